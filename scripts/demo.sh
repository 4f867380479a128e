#!/usr/bin/env bash
# demo.sh - iperf3 over loopback: directly, then through examples/c/peek_relay
# in each mode (copy, offset, discard, auto), and one table to compare them.
#
# Assumes the library and examples are built (`make examples`).
# Environment:
#   BIN=build/bin   where peek_relay is       DURATION=5  iperf3 -t
#   PARALLEL=2      iperf3 -P (streams)       REPEAT=3    runs per mode (median)
#   MODES="copy offset discard auto"
#
# What the columns mean:
#   Gbit/s        iperf3's received throughput (sum of the streams)
#   CPU s/GB      relay user+sys CPU (getrusage) per GB it relayed
#   skip GB/GB    bytes the kernel copied to the relay only to be thrown away
#                 (lowcopy bytes_skipped_copied: the discard prefix), per byte
#                 relayed
#   x copy        ratios against the copy relay of the same run
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
RELAY=$BIN/peek_relay
DURATION=${DURATION:-5}
PARALLEL=${PARALLEL:-2}
REPEAT=${REPEAT:-3}
MODES=${MODES:-"copy offset discard auto"}

die() { echo "demo: $*" >&2; exit 1; }
[[ -x $RELAY ]] || die "no $RELAY: run 'make examples' first"
command -v iperf3 >/dev/null || die "iperf3 not installed"
command -v python3 >/dev/null || die "python3 not installed"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/lowcopy-demo.XXXXXX")
PIDS=()

cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port nobody listens on now (the kernel picks it; we release it at once).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_listening PORT: until a TCP connect to 127.0.0.1:PORT succeeds (5 s).
wait_listening() {
    python3 - "$1" <<'EOF'
import socket, sys, time
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit("demo: nothing listens on port %s" % sys.argv[1])
EOF
}

# The iperf3 server is started once; it serves one test at a time.
SERVER_PORT=$(free_port)
iperf3 -s -p "$SERVER_PORT" >"$TMP/iperf3-server.log" 2>&1 &
PIDS+=($!)
# (no probe connection here: iperf3 -s logs an error for a bare connect)
sleep 0.5
kill -0 "${PIDS[0]}" 2>/dev/null || die "iperf3 -s failed: $(cat "$TMP/iperf3-server.log")"

# run_iperf PORT OUT.json (the server may still be closing the previous test
# and answer "busy": try again)
run_iperf() {
    local _
    for _ in 1 2 3 4 5; do
        if timeout $((DURATION + 30)) iperf3 -c 127.0.0.1 -p "$1" -t "$DURATION" \
            -P "$PARALLEL" -J >"$2"; then
            return 0
        fi
        grep -q busy "$2" || break
        sleep 1
    done
    die "iperf3 -c failed: $(head -c 500 "$2")"
}

# run_relay MODE RUN: iperf3 through a fresh relay; its summary line goes to
# $TMP/MODE.RUN.relay, iperf3's JSON to $TMP/MODE.RUN.json.
run_relay() {
    local mode=$1 run=$2 args port pid
    if [[ $mode == copy ]]; then args=(--copy); else args=(--peek "$mode"); fi
    port=$(free_port)
    "$RELAY" --listen "127.0.0.1:$port" --connect "127.0.0.1:$SERVER_PORT" "${args[@]}" \
        >"$TMP/$mode.$run.relay" 2>"$TMP/$mode.$run.err" &
    pid=$!
    PIDS+=("$pid")
    wait_listening "$port" || die "relay ($mode) did not start: $(cat "$TMP/$mode.$run.err")"
    run_iperf "$port" "$TMP/$mode.$run.json"
    # SIGTERM makes the relay print its summary (user+sys CPU so far) and exit.
    kill -TERM "$pid"
    wait "$pid" || die "relay ($mode) exited with $?: $(cat "$TMP/$mode.$run.err")"
    grep -q '^relay ' "$TMP/$mode.$run.relay" || die "relay ($mode) printed no summary"
}

# Everything here competes for the same CPUs: on a small or busy machine the
# figures move from run to run, hence the medians and the load shown here.
echo "demo: iperf3 -t $DURATION -P $PARALLEL over loopback, $REPEAT run(s) per mode;" \
     "kernel $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
read -ra MODE_LIST <<<"$MODES"
for ((run = 1; run <= REPEAT; run++)); do
    # Modes interleaved per run, so that drift on the machine hits all alike.
    echo "demo: run $run: direct" >&2
    run_iperf "$SERVER_PORT" "$TMP/direct.$run.json"
    for mode in "${MODE_LIST[@]}"; do
        echo "demo: run $run: relay $mode" >&2
        run_relay "$mode" "$run"
    done
done

python3 - "$TMP" "$REPEAT" direct "${MODE_LIST[@]}" <<'EOF'
import json, statistics, sys

tmp, repeat, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def gbps(path):
    with open(path) as f:
        return json.load(f)["end"]["sum_received"]["bits_per_second"] / 1e9

def summary(path):
    with open(path) as f:
        line = [l for l in f if l.startswith("relay ")][-1]
    return dict(kv.split("=", 1) for kv in line.split()[1:])

rows = {}
for m in modes:
    runs = []
    for r in range(1, repeat + 1):
        row = {"gbps": gbps("%s/%s.%d.json" % (tmp, m, r))}
        if m != "direct":
            s = summary("%s/%s.%d.relay" % (tmp, m, r))
            gb = int(s["bytes"]) / 1e9
            row["eff"] = s["effective"]
            row["cpu_gb"] = float(s["cpu_s"]) / gb if gb else float("nan")
            row["skip_gb"] = int(s["bytes_skipped_copied"]) / 1e9 / gb if gb else float("nan")
            row["sweep_share"] = int(s["sweep_consumed"]) / max(1, int(s["bytes_consumed"]))
        runs.append(row)
    # Median run by throughput: its CPU figures belong to the same run.
    runs.sort(key=lambda x: x["gbps"])
    rows[m] = runs[len(runs) // 2]
    rows[m]["all"] = [x["gbps"] for x in runs]

base = rows.get("copy")
hdr = "%-8s | %-8s | %12s | %10s | %12s | %8s | %8s" % (
    "mode", "peek", "Gbit/s", "CPU s/GB", "skip GB/GB", "x copy", "CPU x")
print(hdr)
print("-" * len(hdr))
for m in modes:
    r = rows[m]
    if m == "direct":
        print("%-8s | %-8s | %12.2f | %10s | %12s | %8s | %8s" % (
            m, "-", r["gbps"], "-", "-",
            "%.2f" % (r["gbps"] / base["gbps"]) if base else "-", "-"))
        continue
    print("%-8s | %-8s | %12.2f | %10.3f | %12.3f | %8s | %8s" % (
        m, r["eff"], r["gbps"], r["cpu_gb"], r["skip_gb"],
        "%.2f" % (r["gbps"] / base["gbps"]) if base else "-",
        "%.2f" % (r["cpu_gb"] / base["cpu_gb"]) if base else "-"))
if repeat > 1:
    print("(median of %d runs; Gbit/s of every run: %s)" % (repeat, "; ".join(
        "%s %s" % (m, " ".join("%.1f" % g for g in rows[m]["all"])) for m in modes)))

# The expectations the relay is built to meet.
checks = []
if "offset" in rows and "discard" in rows:
    ratio = rows["offset"]["gbps"] / rows["discard"]["gbps"]
    checks.append(("offset clearly ahead of discard", ratio > 1.15, "%.1fx" % ratio))
if "offset" in rows and base:
    ratio = rows["offset"]["gbps"] / base["gbps"]
    checks.append(("offset within 15% of copy", ratio >= 0.85, "%.2fx" % ratio))
if "offset" in rows:
    checks.append(("offset skips no byte", rows["offset"]["skip_gb"] == 0,
                   "%.3f GB/GB" % rows["offset"]["skip_gb"]))
for name, ok, value in checks:
    print("check: %-34s %-8s (%s)" % (name, "ok" if ok else "NOT MET", value))
EOF
