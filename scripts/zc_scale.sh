#!/usr/bin/env bash
# zc_scale.sh - zerocopy senders at 1 to 10,000 connections: the scale table.
#
# 1. Memory and descriptors per sender (examples/c/zc_scale.c): loopback TCP
#    connections, one lowcopy_zc sender each on one thread, per backend; RSS,
#    heap and descriptors per sender when idle, with 16 sends held each, and
#    after they were reaped. With ZC_SCALE_BEFORE_LIB, the same cells against
#    an older liblowcopy beside them.
# 2. Throughput on the tx-only path (scripts/zc_bench.sh: UDP out of a
#    dropping ifb device, where the kernel really pins pages) with 1 sender and
#    with 1,000 senders on one thread (sharing its io_uring ring), beside plain
#    copies, raw MSG_ZEROCOPY and raw io_uring SEND_ZC with as many sockets
#    (what the kernel's own paths cost across that many sockets), medians of
#    several runs. Many senders are judged against one sender by the part
#    lowcopy adds: lc-errq xN / lc-errq over zc-l32 xN / zc-l32, lc-uring xN /
#    lc-uring over ur-raw xN / ur-raw, in the same rounds (want >= 0.95).
#
# Needs root (network namespaces; the descriptor limit is raised for 10,000
# connections, 20,000 sockets). Builds nothing: run `make examples` first.
# Environment:
#   ZC_SCALE_COUNTS="1,100,1000,10000"   ZC_SCALE_BACKENDS="errqueue,io_uring,copy"
#   ZC_SCALE_SENDERS="1 1000"   sender counts of the throughput table
#   ZC_SCALE_MODES="copy zc-l32 ur-raw lc-errq lc-uring"
#   ZC_SCALE_REPEAT=5   runs per throughput cell (the table shows medians)
#   ZC_SCALE_SECONDS=1  seconds per throughput run
#   ZC_SCALE_BEFORE_LIB=DIR  an older build's liblowcopy.so.0, measured beside
#   BIN=build/bin
# Exit status 1 if a run lost or duplicated a completion.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
COUNTS=${ZC_SCALE_COUNTS:-1,100,1000,10000}
BACKENDS=${ZC_SCALE_BACKENDS:-errqueue,io_uring,copy}
BEFORE=${ZC_SCALE_BEFORE_LIB:-}

die() { echo "zc_scale.sh: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "needs root (network namespaces)"
[[ -x $BIN/zc_scale && -x $BIN/zc_bench ]] || die "no $BIN/zc_scale or zc_bench: run 'make examples'"
[[ -z $BEFORE || -e $BEFORE/liblowcopy.so.0 ]] || die "no liblowcopy.so.0 in $BEFORE"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/zc_scale.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

status=0
echo "zc_scale: memory and descriptors per sender; kernel $(uname -r), $(nproc) CPUs," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$BIN/zc_scale" -q -n "$COUNTS" -b "$BACKENDS" >"$TMP/now" || status=1
if [[ -n $BEFORE ]]; then
    # The older library has no lowcopy_zc_new_opts: -O makes zc_scale use lowcopy_zc_new. A
    # cell it cannot run (one io_uring descriptor per sender: EMFILE) shows as "-"; that is
    # the older library's failing, not this one's.
    LD_LIBRARY_PATH=$BEFORE "$BIN/zc_scale" -q -O -n "$COUNTS" -b "$BACKENDS" >"$TMP/before" ||
        echo "zc_scale.sh: (the older library failed some cells; shown as -)" >&2
fi

awk -v before="${BEFORE:+$TMP/before}" '
function kv(line, key,    re) {
    re = " " key "=[^ ]*"
    if (match(line, re))
        return substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 2)
    return ""
}
BEGIN {
    if (before != "")
        while ((getline l < before) > 0)
            if (l ~ /^zc_scale cell /)
                old[kv(l, "backend") " " kv(l, "n")] = l
}
/^zc_scale cell / { rows[++n] = $0 }
END {
    printf "\nZerocopy senders at scale: loopback TCP, one thread; per sender: (measure - baseline with\n"
    printf "the connections open) / senders. RSS: resident set (what a daemon pays); heap: bytes malloc\n"
    printf "handed out (exact, where RSS moves in pages); fds: descriptors. held: 16 sends of 256 bytes\n"
    printf "each, none reaped; after: every completion reaped.%s\n",
        before != "" ? " before: the same with the older library." : ""
    printf "%-9s %7s | %9s %9s %5s | %9s %9s %5s | %9s", "backend", "senders", "RSS idle",
        "heap idle", "fds", "RSS held", "heap held", "fds", "heap after"
    if (before != "") printf " | %12s %5s %12s", "before: idle", "fds", "held"
    printf " | %s\n", "check"
    for (i = 1; i <= n; i++) {
        L = rows[i]
        key = kv(L, "backend") " " kv(L, "n")
        check = kv(L, "ok") == "1" ? "ok" : sprintf("FAIL missing=%s dup=%s errors=%s", kv(L, "missing"), kv(L, "dup"), kv(L, "errors"))
        printf "%-9s %7s | %9.0f %9.0f %5.2f | %9.0f %9.0f %5.2f | %9.0f", kv(L, "used"), kv(L, "n"),
            kv(L, "rss_idle"), kv(L, "heap_idle"), kv(L, "fds_idle"), kv(L, "rss_held"),
            kv(L, "heap_held"), kv(L, "fds_held"), kv(L, "heap_after")
        if (before != "") {
            if (key in old)
                printf " | %12.0f %5.2f %12.0f", kv(old[key], "rss_idle"), kv(old[key], "fds_idle"), kv(old[key], "rss_held")
            else
                printf " | %12s %5s %12s", "-", "-", "-"
        }
        printf " | %s\n", check
        if (kv(L, "n") + 0 >= 1000) {
            worst = kv(L, "rss_idle") + 0 > worst ? kv(L, "rss_idle") + 0 : worst
            fds = kv(L, "fds_idle") + 0 > fds ? kv(L, "fds_idle") + 0 : fds
        }
    }
    printf "Expected: at 1,000 and 10,000 senders, RSS per idle sender <= 4096 bytes (worst: %.0f: %s)\n", worst, worst <= 4096 ? "yes" : "NO"
    printf "          and no descriptor per sender (worst: %.2f: %s)\n", fds, fds < 0.01 ? "yes" : "NO"
}' "$TMP/now"

# Throughput: 1 and many senders on one thread, tx-only.
env ZC_BENCH_PATHS=tx-only ZC_BENCH_PROTOS=udp ZC_BENCH_FAMILIES=4 \
    ZC_BENCH_MODES="${ZC_SCALE_MODES:-copy zc-l32 ur-raw lc-errq lc-uring}" \
    ZC_BENCH_SENDERS="${ZC_SCALE_SENDERS:-1 1000}" \
    ZC_BENCH_REPEAT="${ZC_SCALE_REPEAT:-5}" ZC_BENCH_SECONDS="${ZC_SCALE_SECONDS:-1}" \
    ZC_BENCH_BEFORE_LIB="$BEFORE" BIN="$BIN/zc_bench" \
    "$ROOT/scripts/zc_bench.sh" || status=1
exit $status
