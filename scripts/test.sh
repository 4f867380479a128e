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
# skipped parts), always the last line of its output, and exits non-zero on any failure.
#
# scripts/test.sh [SECTION...]: the sections below, in this order for `all` (the default,
# `make test`, what CI runs); the tiers of the Makefile call a few of them (CONTRIBUTING.md):
#   check      make check: cargo fmt --check, clippy -D warnings, the doc copies, core's unit
#              tests and the Rust behaviour tables (not part of all: rust runs all of it)
#   rust       fmt, clippy, doc copies, cargo test of the workspace (unit, tables, header,
#              doctests of README.md and docs/*.md), rustdoc with warnings denied
#   c          the library, examples and C tests built; the C ABI tests (ASan, .so and .a), the
#              C behaviour tables (ASan, and under the seccomp allowlists), the ABI rules, the
#              zerocopy benchmark as a test (root)
#   release    the install target, exported symbols, man pages, one version, cargo package,
#              make dist and each artifact installed
#   python     pip install ./python into build/venv, pytest, stubtest and mypy --strict
#   node       npm ci + napi build, node --test, npm pack
#   examples   every code block of README.md and docs/*.md compiled or run
#              (scripts/doc_examples.py; `examples-c`, `examples-python`, `examples-js`: one
#              language's blocks), and make demo's report checked (tests/report/)
#   relay      byte-exact relay transfers, short connections, the 2,000-connection burst
#   fallbacks  the tables again with the kernel made to look older (tests/faults/faultrun)
#   valgrind   valgrind memcheck on the C ABI tests
#   fuzz       the saved fuzzing corpus replayed
# `all` also checks that the run left `git status --porcelain` as it found it.
# LOWCOPY_SCENARIO=substring runs only the behaviour-table scenarios whose name contains it,
# in every runner (Rust, C, Python, Node).
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
	# lowcopy-static.pc: the archive, and a program that needs nothing but libc.
	# shellcheck disable=SC2046
	cc -Wall -Wextra -Werror $("${pc[@]}" pkg-config --cflags lowcopy-static) tests/c/test_abi.c \
		-o "$d/ts" $("${pc[@]}" pkg-config --libs lowcopy-static) || return 1
	# (glibc's dynamic loader, ld-linux*, is part of libc: __tls_get_addr, _dl_find_object.)
	needed=$(readelf -d "$d/ts" | awk '/NEEDED/ {print $5}' | tr -d '[]' | grep -v '^ld-linux' |
		tr '\n' ' ')
	[ "$needed" = "libc.so.6 " ] || { echo "lowcopy-static.pc: NEEDED $needed"; return 1; }
	"$d/ts" | tail -1
	# lowcopy-peek.pc: the peek archive, a -static program from the installed files, silent.
	# shellcheck disable=SC2046
	cc -static -Wall -Wextra -Werror $("${pc[@]}" pkg-config --cflags lowcopy-peek) \
		tests/footprint/daemon.c -o "$d/tp" $("${pc[@]}" pkg-config --static --libs lowcopy-peek) \
		2> "$d/tp.err" && ! [ -s "$d/tp.err" ] || { cat "$d/tp.err"; echo "lowcopy-peek.pc: link"; return 1; }
	"$d/tp" include/syscalls/use_peeker_init_closing.list | tail -1
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

NA_LOG=$(mktemp "${TMPDIR:-/tmp}/lowcopy-na.XXXXXX")
trap 'rm -f "$LOWCOPY_SKIP_LOG" "$NA_LOG"' EXIT
fault_suite() { # fault_suite FAULTS NAME COMMAND...
	local f=$1 name=$2
	shift 2
	suite "fallback [$f]: $name" env LOWCOPY_SKIP_LOG="$NA_LOG" "$FR" "$f" -- "$@"
}
# The library, examples and C tests, built once per run (the c section's first suite; relay
# and fallbacks need them too when run alone).
built=0
build_once() {
	[ "$built" -eq 1 ] && return 0
	built=1
	suite "build library and examples" make -s all c-tests
}

section_check() {
	suite "cargo fmt" cargo fmt --all -- --check
	suite "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
	no_std_lints
	suite "docs: adapters' doc copies match core (scripts/docgen.py --check)" python3 scripts/docgen.py --check
	suite "docs: docs/calls.md lists every call of every language (scripts/calls_table.py --check)" \
		python3 scripts/calls_table.py --check
	suite "rust: core's unit tests" cargo test -q -p lowcopy --lib
	suite "rust: behaviour tables (peek, zc, zc_scale, rx)" \
		cargo test -q -p lowcopy --test scenarios --test zc_scenarios --test rx_scenarios
}

# The no_std builds, which the workspace's clippy does not see: core without std (the peek
# engine alone), and capi/peek (liblowcopy_peek.a), a workspace of its own.
no_std_lints() {
	suite "cargo clippy, core without std" cargo clippy -q -p lowcopy --no-default-features -- -D warnings
	suite "cargo fmt and clippy, capi/peek (liblowcopy_peek.a)" sh -c \
		'cargo fmt --manifest-path capi/peek/Cargo.toml -- --check &&
		cargo clippy -q --manifest-path capi/peek/Cargo.toml --target-dir target/peek -- -D warnings'
}

section_rust() {
	suite "cargo fmt" cargo fmt --all -- --check
	suite "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
	no_std_lints
	# The binding crates are tested from their languages (python/run-tests.sh, the node
	# suites below): a cargo test binary would load the ld cache's libpython, and cannot load
	# napi.
	# Each behavioural doc sentence is written once, in core (`// doc-source:` blocks); the C, Node
	# and Python docs carry it in `// doc-copy:` blocks that scripts/docgen.py writes. Fails when a
	# copy is stale or hand-edited (the header test below then checks lowcopy.h against capi).
	suite "docs: adapters' doc copies match core (scripts/docgen.py --check)" python3 scripts/docgen.py --check
	suite "cargo test (unit, behaviour tables, header)" cargo test --workspace --exclude lowcopy-python --exclude lowcopy-node
	suite "rustdoc, warnings denied" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
}

section_c() {
	build_once
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
	suite "each way of using the peek API under a filter of exactly its per-use list" \
		build/bin/seccomp_uses
	# A sandboxed daemon (issue 22.7): peeker storage in its connection table, its own filter
	# from include/syscalls/use_peeker_init_closing.list, linked through lowcopy-static.pc,
	# hash-checked streams with rewinds; fails past the footprint bounds in the script.
	suite "C daemon with a static peeker table, its own seccomp filter, the archive's footprint bounds" \
		sh tests/footprint/check.sh
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
}

section_release() {
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
}

section_python() {
	# The Python package: a fresh venv, pip install ./python (the abi3 wheel, built from source),
	# pytest (the behaviour tables + Python-only cases), stubtest and mypy --strict.
	suite "python: pip install ./python into build/venv" python/run-tests.sh install
	suite "python: pytest (behaviour tables, Python cases)" python/run-tests.sh pytest
	suite "python: stubtest, mypy --strict (package, examples)" python/run-tests.sh types
}

section_node() {
	suite "node: npm ci, napi build, generated loader and types unchanged" node/scripts/ci.sh build
	suite "node: node --test (behaviour tables, Node-only cases)" node/scripts/ci.sh test
	suite "node: npm pack, install the tarball elsewhere, load it" node/scripts/ci.sh pack
}

# Every fenced code block of README.md and docs/*.md (scripts/doc_examples.py): C compiled
# with -Wall -Wextra -Werror against include/ and build/lib and run, Python run in build/venv,
# JavaScript run with node against the package installed in examples/node, Rust as doctests
# (the rust section). Needs the c, python and node sections' builds.
section_examples() { # section_examples [LANG]
	local what=${1:-c,python,js}
	suite "docs: every code block of README.md and docs/*.md compiled or run ($what)" \
		python3 scripts/doc_examples.py --lang "$what"
	# make demo's report (scripts/report.py): every chart present and drawn from the tables.
	if [ "$what" = c,python,js ]; then
		suite "report: make demo's charts present and drawn from data" python3 tests/report/test_report.py
	fi
}

section_relay() {
	build_once
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

}

section_fallbacks() {
	# The fallbacks, each exercised on this kernel by making it look older or locked down for one
	# test process (tests/faults/faultrun.c, a seccomp filter answering with the old kernel's
	# error; never a sysctl). The tables decide from lowcopy's probe what to expect, so they run
	# and pass with the fallback in use; faultrun fails a run that never hit its fault.
	# What a table finds not applicable under a fault (a scenario about SO_PEEK_OFF itself, where
	# the imitated kernel has none) is listed apart: it is by design, not a part this machine
	# could not run.
	FR=build/bin/faultrun
	build_once
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

}

section_valgrind() {
	# valgrind memcheck on the C ABI tests (against the .so; tests/valgrind.supp says why each
	# suppression is there), and the saved fuzzing corpus replayed on stable Rust (make fuzz runs
	# the fuzzers themselves, on nightly).
	suite "valgrind memcheck: C ABI tests" make -s valgrind
	# The per-call cost table (callgrind): fails when a program under it fails its own checks
	# (peek_cost's bytes, zc_bench's one completion per send). SO_RCVBUFFORCE needs root.
	if is_root; then
		suite "callgrind: per-call cost table (scripts/hot_cost.sh)" \
			env HOT_ITERS=200 HOT_SECONDS=0.2 sh -c 'make -s examples && scripts/hot_cost.sh'
	else
		skip_suite "callgrind: per-call cost table" "SO_RCVBUFFORCE needs root"
	fi
}

section_fuzz() {
	suite "fuzz corpus replay" make -s fuzz-replay
}

# The tree as the run found it: every file a test writes is ignored by git or removed.
tree_before=
tree_snapshot() { git status --porcelain --untracked-files=all 2>/dev/null; }
tree_check() {
	if ! git rev-parse --git-dir >/dev/null 2>&1; then
		skip_suite "tree: git status unchanged by the run" "not a git checkout"
		return
	fi
	local after
	after=$(tree_snapshot)
	if [ "$after" = "$tree_before" ]; then
		suite "tree: git status unchanged by the run" true
	else
		echo
		echo "=== tree: git status changed during the run:"
		diff <(echo "$tree_before") <(echo "$after")
		suite "tree: git status unchanged by the run" false
	fi
}

sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(all)
for s in "${sections[@]}"; do
	case $s in
	all | check | rust | c | release | python | node | examples | examples-c | examples-python | \
		examples-js | relay | fallbacks | valgrind | fuzz) ;;
	*)
		echo "usage: $0 [all|check|rust|c|release|python|node|examples[-c|-python|-js]|relay|fallbacks|valgrind|fuzz]..." >&2
		exit 2
		;;
	esac
done
for s in "${sections[@]}"; do
	case $s in
	all)
		tree_before=$(tree_snapshot)
		section_rust
		section_c
		section_release
		section_python
		section_node
		section_examples
		section_relay
		section_fallbacks
		section_valgrind
		section_fuzz
		tree_check
		;;
	examples-*) section_examples "${s#examples-}" ;;
	*) "section_$s" ;;
	esac
done

echo
echo "=== summary"
if [ -s "$NA_LOG" ]; then
	echo "not applicable under a fault (the kernel imitated lacks what they test):"
	sort -u "$NA_LOG" | sed 's/^/  n\/a   /'
fi
parts=$(sort -u "$LOWCOPY_SKIP_LOG" | grep -c . || true)
if [ "$parts" -gt 0 ]; then
	echo "skipped parts:"
	sort -u "$LOWCOPY_SKIP_LOG" | sed 's/^/  SKIP  /'
fi
echo "suites:"
printf '%s\n' "${results[@]}"
echo "tests: $((${#results[@]} - fails - skipped_suites)) passed, $fails failed, $((skipped_suites + parts)) skipped"
[ "$fails" -eq 0 ]
