#!/usr/bin/env bash
# Every test of the project: Rust (unit, behaviour tables, header check), lints, the C ABI
# under AddressSanitizer (shared and static; the growth rule, ABI 0.1 programs, panics) and
# under valgrind memcheck, the C behaviour-table runners, the tables again under per-process
# fault injection (tests/faults/faultrun: the kernel made to look older or locked down), the
# saved fuzzing corpus, the install target, and byte-exact relay transfers. Installs what it
# needs on a fresh Debian machine (as root; as a normal user it says what is missing).
#
# As a normal user it runs everything that needs no privilege; what cannot run is a skipped
# part with its reason: a whole suite (the zerocopy benchmark over network namespaces) or
# parts of one (a test or table run), which test programs append to $LOWCOPY_SKIP_LOG.
# Ends with one line "tests: N passed, M failed, K skipped" (N and M count suites, K the
# skipped parts) and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/deps.sh
ensure_deps test

LOWCOPY_SKIP_LOG=$(mktemp "${TMPDIR:-/tmp}/lowcopy-skips.XXXXXX")
export LOWCOPY_SKIP_LOG
trap 'rm -f "$LOWCOPY_SKIP_LOG"' EXIT

results=()
fails=0
skipped_suites=0
suite() { # suite NAME COMMAND...
	local name=$1
	shift
	echo
	echo "=== $name: $*"
	local t0=$SECONDS
	if "$@"; then
		results+=("ok    $name ($((SECONDS - t0)) s)")
	else
		results+=("FAIL  $name ($((SECONDS - t0)) s)")
		fails=$((fails + 1))
	fi
}
skip_suite() { # skip_suite NAME REASON
	echo
	echo "=== $1: SKIPPED: $2"
	results+=("SKIP  $1: $2")
	skipped_suites=$((skipped_suites + 1))
}
is_root() { [ "$(id -u)" -eq 0 ]; }

install_smoke() ( # a subshell: its EXIT trap cleans up whatever happens
	set -e
	VERSION=$(make -s version)
	d=$(mktemp -d)
	trap 'rm -rf "$d"' EXIT
	make -s install DESTDIR="$d" PREFIX=/usr/local >/dev/null || return 1
	pc=(env PKG_CONFIG_SYSROOT_DIR="$d" PKG_CONFIG_LIBDIR="$d/usr/local/lib/pkgconfig")
	test -L "$d/usr/local/lib/liblowcopy.so.0" && test -f "$d/usr/local/lib/liblowcopy.a" &&
		test -f "$d/usr/local/include/lowcopy.h" || return 1
	# shellcheck disable=SC2046
	cc -Wall -Wextra -Werror $("${pc[@]}" pkg-config --cflags lowcopy) tests/c/test_abi.c \
		-o "$d/t" $("${pc[@]}" pkg-config --libs lowcopy) || return 1
	LD_LIBRARY_PATH="$d/usr/local/lib" "$d/t" | tail -1
	# Only lowcopy_* symbols leave the shared library, all under a version node.
	bad=$(nm -D --defined-only "$d/usr/local/lib/liblowcopy.so.0" | awk '{print $3}' |
		grep -v '^lowcopy_' | grep -v '^LOWCOPY_0' || true)
	[ -z "$bad" ] || { echo "unexpected exported symbols: $bad"; return 1; }
	# A call whose signature changed keeps its 0.1 symbol beside the default 0.2 one.
	nm -D --defined-only "$d/usr/local/lib/liblowcopy.so.0" | grep -q ' lowcopy_zc_reap@LOWCOPY_0.1$' &&
		nm -D --defined-only "$d/usr/local/lib/liblowcopy.so.0" | grep -q ' lowcopy_zc_reap@@LOWCOPY_0.2$' ||
		{ echo "symbol versions missing"; return 1; }
	readelf -d "$d/usr/local/lib/liblowcopy.so.0" | grep -q 'SONAME.*\[liblowcopy.so.0\]' ||
		{ echo "no SONAME"; return 1; }
	# Stripped libraries; the shared one's debug info apart, named by its debuglink.
	lib=$d/usr/local/lib
	if readelf -S "$lib/liblowcopy.so.0" | grep -q '\.debug_info' ||
		readelf -S "$lib/liblowcopy.a" 2>/dev/null | grep -q '\.debug_info'; then
		echo "installed libraries carry debug info"
		return 1
	fi
	readelf -S "$lib/.debug/liblowcopy.so.$VERSION.debug" | grep -q '\.debug_info' &&
		readelf -p .gnu_debuglink "$lib/liblowcopy.so.0" | grep -q "liblowcopy.so.$VERSION.debug" ||
		{ echo "debug info not installed apart"; return 1; }
	test -f "$d/usr/local/include/lowcopy_syscalls.h" || { echo "no lowcopy_syscalls.h"; return 1; }
	# The man pages under MANDIR: `man lowcopy_peeker_init` finds its page.
	test -f "$d/usr/local/share/man/man7/lowcopy.7" &&
		[ "$(MANPATH="$d/usr/local/share/man" man -w lowcopy_peeker_init)" = \
			"$d/usr/local/share/man/man3/lowcopy_peeker_init.3" ] ||
		{ echo "man pages not installed under MANDIR"; return 1; }
	# A fully static program with the flags pkg-config --static prints, and it runs.
	# shellcheck disable=SC2046
	cc -static -Wall -Wextra -Werror $("${pc[@]}" pkg-config --cflags lowcopy) tests/c/test_abi.c \
		-o "$d/t_static" $("${pc[@]}" pkg-config --static --libs lowcopy) 2>"$d/ld.log" ||
		{ cat "$d/ld.log"; return 1; }
	file "$d/t_static" | grep -q 'statically linked' || { echo "not static"; return 1; }
	"$d/t_static" | tail -1
	echo "installed sizes (bytes):"
	stat -c '  %s %n' "$lib/liblowcopy.so.$VERSION" "$lib/liblowcopy.a" \
		"$lib/.debug/liblowcopy.so.$VERSION.debug" "$d/t_static" | sed "s|$d||"
)

suite "cargo fmt" cargo fmt --all -- --check
suite "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
# The binding crates are tested from their languages (python/run-tests.sh, the node
# suites below): a cargo test binary would load the ld cache's libpython, and cannot load
# napi.
# Each behavioural doc sentence is written once, in core (`// doc-source:` blocks); the C, Node
# and Python docs carry it in `// doc-copy:` blocks that scripts/docgen.py writes. Fails when a
# copy is stale or hand-edited (the header test below then checks lowcopy.h against capi).
suite "docs: adapters' doc copies match core (scripts/docgen.py --check)" python3 scripts/docgen.py --check
suite "cargo test (unit, behaviour tables, header)" cargo test --workspace --exclude lowcopy-python --exclude lowcopy-node
suite "rustdoc, warnings denied" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
suite "build library and examples" make -s all c-tests
for t in tests/c/test_*.c; do
	t=$(basename "$t" .c)
	suite "C $t, liblowcopy.so, ASan" "build/bin/${t}_shared"
	suite "C $t, liblowcopy.a, ASan" "build/bin/${t}_static"
done
# One C runner per behaviour table: tests/c/<x>scenarios.c runs tests/scenarios/<x>.json
# (scenarios.c runs peek.json).
for r in tests/c/*scenarios.c; do
	r=$(basename "$r" .c)
	table=${r%scenarios}
	table=${table%_}
	suite "C behaviour table ${table:-peek}.json, ASan" "build/bin/c_$r" "tests/scenarios/${table:-peek}.json"
done
# The same tables with every lowcopy call held to the syscalls its documentation names
# (include/lowcopy_syscalls.h) by a seccomp filter: an undocumented one kills the run with
# SIGSYS (tests/seccomp/sandbox.c).
for r in tests/c/*scenarios.c; do
	r=$(basename "$r" .c)
	table=${r%scenarios}
	table=${table%_}
	suite "C behaviour table ${table:-peek}.json, each call under its documented seccomp allowlist" \
		"build/bin/seccomp_$r" "tests/scenarios/${table:-peek}.json"
done
# The zerocopy runner also runs the scale table (issue 13: sender options, many senders on one
# thread's io_uring ring), whose ops only the Rust and C APIs have.
suite "C behaviour table zc_scale.json, ASan" build/bin/c_zc_scenarios tests/scenarios/zc_scale.json
suite "C behaviour table zc_scale.json, each call under its documented seccomp allowlist" \
	build/bin/seccomp_zc_scenarios tests/scenarios/zc_scale.json
# The ABI's own rules (tests/c/README.md): the growth rule from both sides, a program linked
# against ABI 0.1, and a panic inside the library (a test-only build).
suite "C growth rule, header with shorter structs, ASan" build/bin/layout_older
suite "C growth rule, header with longer structs, ASan" build/bin/layout_newer
suite "C program of ABI 0.1 on this library, ASan" build/bin/abi_0_1
suite "C panic is -ENOTRECOVERABLE and retires its handle, ASan" build/bin/fault_panic
# The zerocopy ABI from C over veth between two namespaces and out of a dropping ifb device
# (true zerocopy): zc_bench exits non-zero unless every send got exactly one completion.
if is_root; then
	suite "C zerocopy send over veth and tx-only, one completion per send" \
		env ZC_BENCH_SECONDS=0.3 ZC_BENCH_PATHS="veth tx-only" ZC_BENCH_MODES="lc-errq lc-uring lc-auto" \
		scripts/zc_bench.sh
else
	skip_suite "C zerocopy send over veth and tx-only" \
		"network namespaces (ip netns add) need root"
fi
suite "install target" install_smoke
# Release engineering (issue 20): the exported symbols and their version nodes as listed in
# capi/abi/lowcopy.symbols; the man pages (every exported function has one, mandoc -Tlint
# clean); one version everywhere; then make dist and each artifact installed as its users
# install it, without a Rust toolchain.
suite "ABI: exported symbols and version nodes as capi/abi/lowcopy.symbols lists them" \
	scripts/abi_check.sh build/lib/liblowcopy.so.0
suite "man pages: one per exported function, mandoc -Tlint clean" make -s man-check
suite "version: Cargo.toml's everywhere" scripts/version.sh --check
suite "rust: cargo package -p lowcopy (the crate as crates.io gets it, built alone)" \
	cargo package -q -p lowcopy --allow-dirty
suite "make dist (wheel, sdist, npm tarballs, source tarball, .debs)" make -s dist
suite "dist: install each artifact without a Rust toolchain" scripts/dist_test.sh
# The Python package: a fresh venv, pip install ./python (the abi3 wheel, built from source),
# pytest (the behaviour tables + Python-only cases), stubtest and mypy --strict.
suite "python: pip install ./python into build/venv" python/run-tests.sh install
suite "python: pytest (behaviour tables, Python cases)" python/run-tests.sh pytest
suite "python: stubtest, mypy --strict (package, examples)" python/run-tests.sh types
suite "node: npm ci, napi build, generated loader and types unchanged" node/scripts/ci.sh build
suite "node: node --test (behaviour tables, Node-only cases)" node/scripts/ci.sh test
suite "node: npm pack, install the tarball elsewhere, load it" node/scripts/ci.sh pack
suite "relay: byte-exact transfers in every mode" python3 tests/relay/test_relay.py "$ROOT/build/bin"
# Many short connections through the sandboxed relay: relay_cps (tests/relay/cps.c) fails on
# any connection without its full reply and on an unclean relay exit (SIGSYS included).
for m in copy auto; do
	a=(--peek "$m")
	[ "$m" = copy ] && a=(--copy)
	suite "relay: short connections, $m, sandboxed" build/bin/relay_cps 1 4 build/bin/peek_relay \
		"${a[@]}" --sandbox
done
# 2,000 connections at once, 10% reset by their clients, every mode, plain and sandboxed, the
# relay's defaults (and once held to 64 pairs): relay_burst (tests/relay/burst.c) fails on any
# connection that nobody reset and that did not get its full echo. About 10 s.
suite "relay: 2,000 concurrent connections with resets, every mode" tests/relay/burst.sh

# The fallbacks, each exercised on this kernel by making it look older or locked down for one
# test process (tests/faults/faultrun.c, a seccomp filter answering with the old kernel's
# error; never a sysctl). The tables decide from lowcopy's probe what to expect, so they run
# and pass with the fallback in use; faultrun fails a run that never hit its fault.
# What a table finds not applicable under a fault (a scenario about SO_PEEK_OFF itself, where
# the imitated kernel has none) is listed apart: it is by design, not a part this machine
# could not run.
FR=build/bin/faultrun
NA_LOG=$(mktemp "${TMPDIR:-/tmp}/lowcopy-na.XXXXXX")
trap 'rm -f "$LOWCOPY_SKIP_LOG" "$NA_LOG"' EXIT
fault_suite() { # fault_suite FAULTS NAME COMMAND...
	local f=$1 name=$2
	shift 2
	suite "fallback [$f]: $name" env LOWCOPY_SKIP_LOG="$NA_LOG" "$FR" "$f" -- "$@"
}
cargo_test=(cargo test -q -p lowcopy)
fault_suite no-peek-off-tcp "Rust peek table, urgent data (discard prefix)" \
	"${cargo_test[@]}" --test scenarios --test urgent
fault_suite no-peek-off-tcp "C peek table, ASan" build/bin/c_scenarios tests/scenarios/peek.json
fault_suite no-peek-off-tcp "relay, byte-exact (AUTO = discard)" \
	python3 tests/relay/test_relay.py "$ROOT/build/bin"
fault_suite no-peek-off-tcp "Python peek table" python/run-tests.sh pytest test_scenarios.py -k test_peek_table
fault_suite no-peek-off-tcp "Node peek table" node --test node/test/peek_scenarios.test.js
fault_suite no-io-uring,no-so-zerocopy "Python zerocopy table (copies)" \
	python/run-tests.sh pytest test_scenarios.py -k test_zc_table
fault_suite no-io-uring,no-so-zerocopy "Node zerocopy table (copies)" node --test node/test/zc_scenarios.test.js
fault_suite zcrx-16 "Python receive table" python/run-tests.sh pytest test_scenarios.py -k test_rx_table
for f in no-io-uring no-so-zerocopy no-io-uring,no-so-zerocopy; do
	fault_suite "$f" "Rust zerocopy table" "${cargo_test[@]}" --test zc_scenarios
	fault_suite "$f" "C zerocopy table, ASan" build/bin/c_zc_scenarios tests/scenarios/zc.json
done
fault_suite zcrx-16 "Rust receive table and zero-copy receive streams" \
	"${cargo_test[@]}" --test rx_scenarios --test zcrx
fault_suite zcrx-16 "C receive table, ASan" build/bin/c_rx_scenarios tests/scenarios/rx.json

# valgrind memcheck on the C ABI tests (against the .so; tests/valgrind.supp says why each
# suppression is there), and the saved fuzzing corpus replayed on stable Rust (make fuzz runs
# the fuzzers themselves, on nightly).
suite "valgrind memcheck: C ABI tests" make -s valgrind
suite "fuzz corpus replay" make -s fuzz-replay

echo
echo "=== summary"
printf '%s\n' "${results[@]}"
if [ -s "$NA_LOG" ]; then
	echo "not applicable under a fault (the kernel imitated lacks what they test):"
	sort -u "$NA_LOG" | sed 's/^/  n\/a   /'
fi
parts=$(sort -u "$LOWCOPY_SKIP_LOG" | grep -c . || true)
if [ "$parts" -gt 0 ]; then
	echo "skipped parts:"
	sort -u "$LOWCOPY_SKIP_LOG" | sed 's/^/  SKIP  /'
fi
echo "tests: $((${#results[@]} - fails - skipped_suites)) passed, $fails failed, $((skipped_suites + parts)) skipped"
[ "$fails" -eq 0 ]
