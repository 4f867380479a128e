#!/usr/bin/env bash
# burst.sh - 2,000 concurrent connections through examples/c/peek_relay, 10% of them reset by
# their clients mid-transfer (SO_LINGER {1, 0}), in every mode, plain and --sandbox, with the
# relay's defaults: no connection that nobody reset may be lost (tests/relay/burst.c checks
# every echo byte). Then the same through a relay held to 64 pairs, so that connections wait
# in its listen backlog, and once over ::1. Run by scripts/test.sh; about 10 s on 2 cores.
#
# Usage: tests/relay/burst.sh [BIN_DIR]   (default build/bin; `make examples` builds it)
# Environment: BURST_MODES="copy offset discard auto"
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/build/bin}
read -ra MODES <<<"${BURST_MODES:-copy offset discard auto}"
[[ -x $BIN/peek_relay && -x $BIN/relay_burst ]] || {
    echo "burst: no $BIN/peek_relay or relay_burst: run 'make examples' first" >&2
    exit 2
}

failed=0
run() { # run LABEL RELAY_BURST_ARGS... -- each relay_burst kills its relay itself
    local label=$1
    shift
    local out
    if out=$("$BIN/relay_burst" "$@" 2>&1); then
        echo "ok   $label: ${out##*$'\n'}"
    else
        echo "FAIL $label:"
        printf '%s\n' "$out" | tail -8
        failed=$((failed + 1))
    fi
}
mode_args() { if [[ $1 == copy ]]; then echo --copy; else echo --peek "$1"; fi; }

for mode in "${MODES[@]}"; do
    read -ra a <<<"$(mode_args "$mode")"
    run "$mode" -s 1 "$BIN/peek_relay" "${a[@]}"
    run "$mode, sandboxed" -s 2 "$BIN/peek_relay" "${a[@]}" --sandbox
done
# At capacity: accept() pauses, connections wait in the backlog, none is refused.
run "copy, --max-pairs 64" -s 3 "$BIN/peek_relay" --copy --max-pairs 64
run "auto, --max-pairs 64, sandboxed" -s 4 "$BIN/peek_relay" --peek auto --max-pairs 64 --sandbox
run "auto over ::1, sandboxed" -6 -s 5 "$BIN/peek_relay" --peek auto --sandbox
echo "burst: $failed failed"
((failed == 0))
