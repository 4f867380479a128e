#!/usr/bin/env bash
# hot_cost.sh - what each hot path costs in user space, per call, beside the raw loop
# that makes the same syscalls (issue 23, point 1): instructions, first-level data-cache
# misses (reads + writes) and last-level misses, counted by callgrind (--cache-sim=yes:
# valgrind's simulated caches, not the CPU's counters, which this VM does not expose).
# The kernel's work is not counted: it is the same syscalls for both sides of each row,
# so "added" is exactly the user-space work lowcopy adds to one call.
#
#   peek      examples/c/peek_cost: one seek + 64 KiB peek at OFFSET bytes into a TCP
#             queue, per mechanism (cost_* functions, ITERS calls each)
#   zc send   examples/c/zc_bench's send_one (one send with the selftest's loop around
#             it: a send, the error-queue read every 32 sends, the poll) over UDPv4
#             loopback, per mode; divided by the sends the run made
#
# Needs valgrind and root (SO_RCVBUFFORCE); the programs are make examples' build/bin.
# Environment: BIN=build/bin  HOT_OFFSETS="0 1048576"  HOT_ITERS=2000  HOT_SECONDS=0.5
#              HOT_LIB=DIR (run the programs against DIR's liblowcopy.so.0 instead)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
OFFSETS=${HOT_OFFSETS:-0 1048576}
ITERS=${HOT_ITERS:-2000}
SECS=${HOT_SECONDS:-0.5}
t=$(mktemp -d)
rpid=
cleanup() { [ -n "$rpid" ] && kill "$rpid" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
[ -n "${HOT_LIB:-}" ] && export LD_LIBRARY_PATH="$HOT_LIB"

# cg FN OUT CMD...: callgrind counting only inside FN (and what it calls); prints
# "Ir D1miss LLmiss" of that function, summed over its calls.
cg() {
	local fn=$1 out=$2
	shift 2
	valgrind -q --tool=callgrind --cache-sim=yes --collect-atstart=no --toggle-collect="$fn" \
		--callgrind-out-file="$out" "$@" > "$out.stdout" 2> "$out.stderr"
	awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
	     /^(summary|totals):/ { s = $0 }
	     END { split(s, v, " ");
	           ir = v[col["Ir"] + 1]; d1 = v[col["D1mr"] + 1] + v[col["D1mw"] + 1];
	           ll = v[col["DLmr"] + 1] + v[col["DLmw"] + 1] + v[col["ILmr"] + 1];
	           print ir, d1, ll }' "$out"
}

row() { # name calls "Ir D1 LL" [raw "Ir D1 LL"]
	local name=$1 calls=$2 a=$3 b=${4:-}
	awk -v n="$name" -v c="$calls" -v a="$a" -v b="$b" 'BEGIN {
		split(a, x, " "); ir = x[1] / c; d1 = x[2] / c; ll = x[3] / c;
		add = "-";
		if (b != "") { split(b, y, " "); add = sprintf("%+.0f", ir - y[1] / c) }
		printf "| %-30s | %8.0f | %8s | %7.2f | %7.3f |\n", n, ir, add, d1, ll }'
}

header() {
	printf '| %-30s | %8s | %8s | %7s | %7s |\n' "$1" "instr" "added" "D1 miss" "LL miss"
	printf '|%s|%s|%s|%s|%s|\n' "--------------------------------" "----------" "----------" \
		"---------" "---------"
}

for off in $OFFSETS; do
	echo "peek at offset $off B, one seek + 64 KiB peek, per call ($ITERS calls):"
	header "mechanism"
	declare -A r=()
	for fn in cost_raw_offset cost_lowcopy_offset cost_lowcopy_auto cost_raw_discard \
		cost_lowcopy_discard; do
		r[$fn]=$(cg "$fn" "$t/peek.$fn" "$BIN/peek_cost" "$off" "$ITERS")
		grep -q 'ok=1' "$t/peek.$fn.stdout" || { echo "hot_cost: peek_cost $fn failed" >&2; exit 1; }
	done
	# The first call of each (the check) is counted too: ITERS + 1 calls.
	c=$((ITERS + 1))
	row "raw SO_PEEK_OFF" $c "${r[cost_raw_offset]}"
	row "lowcopy OFFSET" $c "${r[cost_lowcopy_offset]}" "${r[cost_raw_offset]}"
	row "lowcopy AUTO" $c "${r[cost_lowcopy_auto]}" "${r[cost_raw_offset]}"
	row "raw discard" $c "${r[cost_raw_discard]}"
	row "lowcopy DISCARD" $c "${r[cost_lowcopy_discard]}" "${r[cost_raw_discard]}"
	echo
done

port=$((20000 + RANDOM % 20000))
"$BIN/zc_bench" -r -4 -t udp -D 127.0.0.1 -p "$port" -T 3600 > /dev/null 2>&1 &
rpid=$!
# The receiver is up once its port is bound (a fixed sleep lost that race on a loaded machine).
for _ in $(seq 100); do
	ss -Hlun "sport = :$port" | grep -q . && break
	sleep 0.05
done
echo "zerocopy send over UDPv4 loopback (the kernel copies), send_one per send:"
header "mode"
declare -A z=() zs=()
for m in zc-l32 lc-errq ur-raw lc-uring copy lc-auto; do
	z[$m]=$(cg send_one "$t/zc.$m" "$BIN/zc_bench" -4 -t udp -D 127.0.0.1 -p "$port" -m "$m" \
		-T "$SECS")
	line=$(grep '^zc_bench tx' "$t/zc.$m.stdout" || true)
	case $line in
	*ok=1*) ;;
	*)
		echo "hot_cost: zc_bench -m $m failed: $line" >&2
		cat "$t/zc.$m.stdout" "$t/zc.$m.stderr" >&2
		exit 1
		;;
	esac
	zs[$m]=$(sed -n 's/.* sends=\([0-9]*\) .*/\1/p' <<< "$line")
done
# Each row divides by its own sends; "added" compares per-send costs.
zrow() { # name mode [raw mode]
	local a=${z[$2]} n=${zs[$2]}
	if [ -n "${3:-}" ]; then
		local b n2=${zs[$3]}
		b=$(awk -v s="${z[$3]}" -v n="$n" -v n2="$n2" 'BEGIN { split(s, y, " ");
			printf "%f %f %f", y[1] * n / n2, y[2] * n / n2, y[3] * n / n2 }')
		row "$1" "$n" "$a" "$b"
	else
		row "$1" "$n" "$a"
	fi
}
zrow "raw MSG_ZEROCOPY (-l 32)" zc-l32
zrow "lowcopy error queue" lc-errq zc-l32
zrow "raw io_uring SEND_ZC" ur-raw
zrow "lowcopy io_uring" lc-uring ur-raw
zrow "plain copy" copy
zrow "lowcopy AUTO + ADAPTIVE" lc-auto copy
