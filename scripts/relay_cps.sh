#!/usr/bin/env bash
# relay_cps.sh - connections per second through examples/c/peek_relay, each mode plain and
# with --sandbox (seccomp allowlist, no allocation after start-up) side by side.
#
# Assumes `make examples` (build/bin/peek_relay and build/bin/relay_cps, from tests/relay/cps.c).
# Environment:
#   BIN=build/bin          CPS_SECONDS=2   seconds per run     CPS_CLIENTS=4  client threads
#   CPS_REPEAT=5           runs per cell (median), alternated so that drift hits all alike
#   CPS_MODES="copy offset discard auto"
#
# Each connection: connect through the relay, 64 bytes each way, close (the relay opens its
# own connection to a loopback server per client connection).
# What the columns mean:
#   conns/s     connections completed per second (client side; the clients, the server
#               and the relay share the machine's CPUs)
#   us/conn     relay user+sys CPU (getrusage) per connection it relayed
#   x conns, x CPU   sandboxed over plain: conns/s and us/conn
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
SECONDS_PER_RUN=${CPS_SECONDS:-2}
CLIENTS=${CPS_CLIENTS:-4}
REPEAT=${CPS_REPEAT:-5}
MODES=${CPS_MODES:-"copy offset discard auto"}

die() { echo "relay_cps: $*" >&2; exit 1; }
[[ -x $BIN/peek_relay && -x $BIN/relay_cps ]] || die "no $BIN/peek_relay or relay_cps: run 'make examples' first"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/lowcopy-cps.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

echo "relay_cps: $CLIENTS clients x $SECONDS_PER_RUN s, $REPEAT run(s) per cell;" \
     "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
read -ra MODE_LIST <<<"$MODES"
for ((run = 1; run <= REPEAT; run++)); do
    for mode in "${MODE_LIST[@]}"; do
        if [[ $mode == copy ]]; then args=(--copy); else args=(--peek "$mode"); fi
        # Plain and sandboxed, in alternating order from run to run.
        if ((run % 2)); then kinds=(plain sandbox); else kinds=(sandbox plain); fi
        for kind in "${kinds[@]}"; do
            extra=()
            [[ $kind == sandbox ]] && extra=(--sandbox)
            out=$TMP/$mode.$kind.$run
            # relay_cps exits 1 on any failed connection or an unclean relay exit (SIGSYS).
            "$BIN/relay_cps" "$SECONDS_PER_RUN" "$CLIENTS" "$BIN/peek_relay" "${args[@]}" \
                "${extra[@]}" >"$out" 2>"$out.err" ||
                die "$mode $kind: $(cat "$out" "$out.err" | tail -5)"
        done
    done
done

python3 - "$TMP" "$REPEAT" "${MODE_LIST[@]}" <<'PY'
import statistics, sys

tmp, repeat, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def cell(mode, kind):
    cps, us = [], []
    for r in range(1, repeat + 1):
        with open("%s/%s.%s.%d" % (tmp, mode, kind, r)) as f:
            line = [l for l in f if l.startswith("cps ")][-1]
        kv = dict(x.split("=", 1) for x in line.split()[1:])
        cps.append(float(kv["conns_per_s"]))
        us.append(float(kv["relay_cpu_us_per_conn"]))
    return statistics.median(cps), statistics.median(us), min(cps), max(cps)

print("relay connections per second: plain | --sandbox | sandboxed over plain")
hdr = "%-8s | %9s | %8s | %9s | %8s | %9s | %8s" % (
    "mode", "conns/s", "us/conn", "conns/s", "us/conn", "x conns", "x CPU")
print(hdr)
print("-" * len(hdr))
spread = []
for m in modes:
    pc, pu, plo, phi = cell(m, "plain")
    sc, su, slo, shi = cell(m, "sandbox")
    print("%-8s | %9.0f | %8.1f | %9.0f | %8.1f | %9.2f | %8.2f" % (
        m, pc, pu, sc, su, sc / pc, su / pu))
    spread.append("%s %.0f-%.0f / %.0f-%.0f" % (m, plo, phi, slo, shi))
print("(median of %d alternated runs; conns/s range plain / sandboxed: %s)" % (
    repeat, "; ".join(spread)))
PY
