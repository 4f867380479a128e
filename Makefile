# lowcopy: build, test, demo and install.
#   make demo      build everything and run the main job (relay on real iperf3 traffic), every
#                  benchmark table, and build/report/index.html (charts of those tables)
#   make test      every test (Rust, C, relay, fallbacks, valgrind, fuzz corpus, the docs' code
#                  blocks, a clean tree afterwards); .ci/run calls this
#   make check     the quick tier: fmt, clippy, doc copies, core's unit tests, the Rust behaviour
#                  tables (under two minutes warm; CONTRIBUTING.md)
#   make test-c | test-python | test-node   one language's tier (scripts/test.sh sections)
#   LOWCOPY_SCENARIO=substring   any of them runs only the behaviour-table scenarios so named
#   make fuzz      the fuzzers, FUZZ_SECONDS (60) each, on nightly (fuzz/README.md)
#   make header    the adapters' doc copies from core (make docs), then include/lowcopy.h
#   make install   PREFIX=/usr/local DESTDIR= : stripped .so and .a (the .so's debug info in
#                  LIBDIR/.debug), lowcopy.h, lowcopy_syscalls.h, lowcopy.pc and
#                  lowcopy-static.pc (the archive, libc alone), the per-use syscall lists
#                  (SYSCALLSDIR: include/syscalls/*.list), the man pages
#                  (MANDIR: lowcopy(7) and one section-3 page per function)
#   make peek-lib  build/lib/liblowcopy_peek.a (capi/peek: the peeker's calls alone over core's
#                  no_std peek engine; tens of KB of text, libc's syscall wrappers and mem*) and
#                  its lowcopy-peek.pc (the archive and nothing but libc)
#   make man       the man pages in build/man, generated from include/lowcopy.h
#   make dist      every release artifact in dist/ (scripts/dist.sh): the Python wheel and
#                  sdist, the two npm tarballs, the C source tarball, the Debian packages
# The version is the root Cargo.toml's [workspace.package] version, and only there:
# scripts/version.sh --check fails when package.json, debian/changelog, ... differ from it.
VERSION  := $(shell sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
PREFIX   ?= /usr/local
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
MANDIR   ?= $(PREFIX)/share/man
SYSCALLSDIR ?= $(PREFIX)/share/lowcopy/syscalls
DESTDIR  ?=
CARGO    ?= cargo
CC       ?= cc
BUILD    := $(CURDIR)/build
STRICT   := -Wall -Wextra -Werror -O2 -g
comma    := ,
PKGENV   := PKG_CONFIG_PATH=$(BUILD)/lib/pkgconfig
# What a Rust staticlib needs from the C runtime (rustc --print native-static-libs), less
# -lgcc_s: the unwinder is libgcc's, which the cc driver links itself (libgcc_s for a dynamic
# program, libgcc_eh.a with -static, where -lgcc_s does not exist and failed the link).
STATIC_PRIVATE := -lutil -lrt -lpthread -lm -ldl -lc

.PHONY: all lib peek-lib fault-lib docs header examples c-tests demo python-demo test check test-c \
	test-python test-node test-examples install clean valgrind \
	fuzz fuzz-replay man man-check abi-check version version-check dist

all: lib examples

lib:
	$(CARGO) build --release -p lowcopy-capi
	mkdir -p $(BUILD)/lib/pkgconfig
	# Copy then rename: a program running on the old library keeps its mapping intact.
	cp -f target/release/liblowcopy.so $(BUILD)/lib/.liblowcopy.so.tmp
	mv -f $(BUILD)/lib/.liblowcopy.so.tmp $(BUILD)/lib/liblowcopy.so.$(VERSION)
	ln -sf liblowcopy.so.$(VERSION) $(BUILD)/lib/liblowcopy.so.0
	ln -sf liblowcopy.so.0 $(BUILD)/lib/liblowcopy.so
	cp -f target/release/liblowcopy.a $(BUILD)/lib/.liblowcopy.a.tmp
	mv -f $(BUILD)/lib/.liblowcopy.a.tmp $(BUILD)/lib/liblowcopy.a
	$(call write_pc,$(CURDIR),$(BUILD)/lib,$(CURDIR)/include,$(BUILD)/lib/pkgconfig/lowcopy.pc)

# liblowcopy_peek.a: capi/peek is a workspace of its own (core without its default `std`
# feature; in this workspace cargo would unify std back in), built with its profile `peek`
# (panic=abort, LTO, one codegen unit, opt-level s) into target/peek.
PEEK_TARGET := $(CURDIR)/target/peek
peek-lib:
	$(CARGO) build --manifest-path capi/peek/Cargo.toml --profile peek --target-dir $(PEEK_TARGET)
	mkdir -p $(BUILD)/lib/pkgconfig
	cp -f $(PEEK_TARGET)/peek/liblowcopy_peek.a $(BUILD)/lib/.liblowcopy_peek.a.tmp
	mv -f $(BUILD)/lib/.liblowcopy_peek.a.tmp $(BUILD)/lib/liblowcopy_peek.a
	$(call write_peek_pc,$(CURDIR),$(BUILD)/lib,$(CURDIR)/include,$(BUILD)/lib/pkgconfig/lowcopy-peek.pc)

# write_peek_pc(prefix, libdir, includedir, file): the peek archive; libc is the cc driver's.
define write_peek_pc
	printf '%s\n' 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	  'Name: lowcopy-peek' \
	  'Description: the peek path of lowcopy as a no_std archive: libc alone, no libgcc_s, no TLS' \
	  'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -l:liblowcopy_peek.a' \
	  'Cflags: -I$${includedir}' > $(4)
endef

# write_pc(prefix, libdir, includedir, file)
define write_pc
	printf '%s\n' 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	  'Name: lowcopy' \
	  'Description: Linux socket primitives without needless copies or wakeups' \
	  'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -llowcopy' \
	  'Libs.private: $(STATIC_PRIVATE)' \
	  'Cflags: -I$${includedir}' > $(4)
	printf '%s\n' 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	  'Name: lowcopy-static' \
	  'Description: lowcopy linked from its archive: a program that depends on libc alone' \
	  'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -l:liblowcopy.a -static-libgcc $(STATIC_PRIVATE)' \
	  'Cflags: -I$${includedir}' > $(dir $(4))lowcopy-static.pc
endef

# The adapters' copies of core's behavioural doc text (`// doc-copy:` blocks in capi/src,
# node/src, python/src), rewritten from core's `// doc-source:` blocks; scripts/test.sh runs
# `scripts/docgen.py --check`. The header is generated from capi's docs, so after them; the
# Node declarations (node/index.d.ts) are regenerated by `node/scripts/ci.sh build`.
docs:
	python3 scripts/docgen.py

header: docs
	LOWCOPY_BLESS=1 $(CARGO) test -p lowcopy-capi --test header

EXAMPLES := $(patsubst examples/c/%.c,$(BUILD)/bin/%,$(wildcard examples/c/*.c))

# Beside the examples, the relay's connections-per-second client (scripts/relay_cps.sh) and
# its many-concurrent-connections test (tests/relay/burst.sh).
RELAY_TOOLS := $(BUILD)/bin/relay_cps $(BUILD)/bin/relay_burst

examples: lib $(EXAMPLES) $(RELAY_TOOLS)

$(BUILD)/bin/relay_cps: tests/relay/cps.c
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $< -o $@ -lpthread

$(BUILD)/bin/relay_burst: tests/relay/burst.c
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $< -o $@ -lpthread

$(BUILD)/bin/%: examples/c/%.c include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $$($(PKGENV) pkg-config --libs lowcopy) -lpthread -Wl,-rpath,$(BUILD)/lib

# C tests against the header, under AddressSanitizer: once through pkg-config and the .so,
# once against the .a. Each is one tests/c/test_*.c; check.h and common.h are header-only.
ASAN := -fsanitize=address,undefined -fno-omit-frame-pointer
C_TESTS := $(patsubst tests/c/test_%.c,%,$(wildcard tests/c/test_*.c))
C_TEST_BINS := $(foreach t,$(C_TESTS),$(BUILD)/bin/test_$(t)_shared $(BUILD)/bin/test_$(t)_static)
# One runner per behaviour table: tests/c/<x>scenarios.c, linked with harness.c.
C_RUNNERS := $(patsubst tests/c/%.c,$(BUILD)/bin/c_%,$(wildcard tests/c/*scenarios.c))
# ABI tests beside those (see tests/c/README.md): the growth rule, 0.1 programs, panics.
C_ABI_BINS := $(BUILD)/bin/layout_older $(BUILD)/bin/layout_newer $(BUILD)/bin/abi_0_1 \
	$(BUILD)/bin/fault_panic
# The same runners with every lowcopy call held to its documented syscalls (tests/seccomp/):
# no ASan (its runtime makes syscalls of its own inside the filtered calls).
SECCOMP_RUNNERS := $(patsubst tests/c/%.c,$(BUILD)/bin/seccomp_%,$(wildcard tests/c/*scenarios.c))
c-tests: lib peek-lib $(C_TEST_BINS) $(C_RUNNERS) $(C_ABI_BINS) $(SECCOMP_RUNNERS) $(BUILD)/bin/faultrun \
	$(BUILD)/bin/seccomp_uses

$(C_TEST_BINS): tests/c/check.h tests/c/common.h

$(BUILD)/bin/test_%_shared: tests/c/test_%.c include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $$($(PKGENV) pkg-config --libs lowcopy) -lpthread -Wl,-rpath,$(BUILD)/lib

$(BUILD)/bin/test_%_static: tests/c/test_%.c include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $(BUILD)/lib/liblowcopy.a $(STATIC_PRIVATE) -lpthread

# The behaviour-table runners (tests/scenarios/*.json), parsing JSON with cJSON. A static
# pattern rule over the globbed list: a plain c_%scenarios pattern cannot make c_scenarios
# (make wants a non-empty stem), so a fresh checkout's `make c-tests` stopped there.
$(C_RUNNERS): $(BUILD)/bin/c_%: tests/c/%.c tests/c/harness.c tests/c/harness.h tests/c/common.h \
		include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) $$($(PKGENV) pkg-config --cflags lowcopy libcjson) $< \
	  tests/c/harness.c -o $@ $$($(PKGENV) pkg-config --libs lowcopy libcjson) -lpthread \
	  -Wl,-rpath,$(BUILD)/lib

# WRAP(lowcopy_...) for every function of lowcopy_syscalls.h, and the matching --wrap flags.
SECCOMP_FNS = $(shell sed -n 's/^.define LOWCOPY_SYSCALLS_\(lowcopy_[a-z0-9_]*\)(X).*/\1/p' \
	include/lowcopy_syscalls.h)
$(BUILD)/seccomp/functions.h: include/lowcopy_syscalls.h
	mkdir -p $(dir $@)
	sed -n 's/^.define LOWCOPY_SYSCALLS_\(lowcopy_[a-z0-9_]*\)(X).*/WRAP(\1)/p' $< > $@.tmp
	mv -f $@.tmp $@

$(SECCOMP_RUNNERS): $(BUILD)/bin/seccomp_%: tests/c/%.c tests/c/harness.c tests/c/harness.h \
		tests/c/common.h tests/seccomp/sandbox.c $(BUILD)/seccomp/functions.h \
		include/lowcopy.h include/lowcopy_syscalls.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) -I$(BUILD)/seccomp $$($(PKGENV) pkg-config --cflags lowcopy libcjson) $< \
	  tests/c/harness.c tests/seccomp/sandbox.c -o $@ $(addprefix -Wl$(comma)--wrap=,$(SECCOMP_FNS)) \
	  $$($(PKGENV) pkg-config --libs lowcopy libcjson) -lpthread -Wl,-rpath,$(BUILD)/lib

# Each way of using the peek API under a filter of exactly its per-use list (-z now: no lazy
# binding inside the filter).
$(BUILD)/bin/seccomp_uses: tests/seccomp/uses.c include/lowcopy.h include/lowcopy_syscalls.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $$($(PKGENV) pkg-config --libs lowcopy) -Wl,-z,now -Wl,-rpath,$(BUILD)/lib

$(BUILD)/bin/test_abi_shared: tests/c/test_abi.c include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $$($(PKGENV) pkg-config --libs lowcopy) -lpthread -Wl,-rpath,$(BUILD)/lib

$(BUILD)/bin/test_abi_static: tests/c/test_abi.c include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $(BUILD)/lib/liblowcopy.a $$($(PKGENV) pkg-config --static --libs-only-l lowcopy | sed 's/-llowcopy//')

# The growth rule: tests/c/layout_growth.c built against headers whose structs are one field
# shorter (older) or longer (newer) than include/lowcopy.h, run against today's library.
$(BUILD)/include-%/lowcopy.h: include/lowcopy.h tests/c/layout_header.py
	mkdir -p $(dir $@)
	python3 tests/c/layout_header.py $* < $< > $@.tmp && mv -f $@.tmp $@

$(BUILD)/bin/layout_%: tests/c/layout_growth.c $(BUILD)/include-%/lowcopy.h tests/c/check.h \
		tests/c/common.h lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) -DLAYOUT_$(if $(filter older,$*),OLDER,NEWER) -I$(BUILD)/include-$* \
	  $< -o $@ -L$(BUILD)/lib -llowcopy -lpthread -Wl,-rpath,$(BUILD)/lib

# A program of ABI 0.1: linked against a stub liblowcopy.so.0 without symbol versions (as the
# 0.1 library was), run against today's library (rpath).
$(BUILD)/stub-0.1/liblowcopy.so: lib
	mkdir -p $(dir $@)
	nm -D --defined-only $(BUILD)/lib/liblowcopy.so.0 | awk '$$3 ~ /^lowcopy_/ { \
	  sub(/@.*/, "", $$3); print "void " $$3 "(void) {}" }' | sort -u > $(dir $@)stub.c
	$(CC) -shared -fPIC -Wl,-soname,liblowcopy.so.0 $(dir $@)stub.c -o $@

$(BUILD)/bin/abi_0_1: tests/c/abi_0_1.c tests/c/check.h tests/c/common.h \
		$(BUILD)/stub-0.1/liblowcopy.so lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) $< -o $@ -L$(BUILD)/stub-0.1 -llowcopy -lpthread \
	  -Wl,-rpath,$(BUILD)/lib

# The panic test runs against a debug library built with the test-only cargo feature
# `fault-injection` (lowcopy_test_panic_after), kept apart in build/fault.
fault-lib:
	$(CARGO) build -p lowcopy-capi --features fault-injection
	mkdir -p $(BUILD)/fault
	cp -f target/debug/liblowcopy.so $(BUILD)/fault/.liblowcopy.so.tmp
	mv -f $(BUILD)/fault/.liblowcopy.so.tmp $(BUILD)/fault/liblowcopy.so.0
	ln -sf liblowcopy.so.0 $(BUILD)/fault/liblowcopy.so

$(BUILD)/bin/fault_panic: tests/c/fault_panic.c include/lowcopy.h tests/c/check.h \
		tests/c/common.h fault-lib
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $(ASAN) -Iinclude $< -o $@ -L$(BUILD)/fault -llowcopy -lpthread \
	  -Wl,-rpath,$(BUILD)/fault

# Per-process fault injection (tests/faults/faultrun.c): a seccomp filter with a supervisor
# that answers chosen calls as an older or locked-down kernel would. No privilege needed.
$(BUILD)/bin/faultrun: tests/faults/faultrun.c
	mkdir -p $(BUILD)/bin
	$(CC) $(STRICT) $< -o $@ -lpthread

# valgrind memcheck on the C ABI tests, built without ASan against the .so (ASan and valgrind
# exclude each other). Known false positives are suppressed in tests/valgrind.supp, each
# with its reason; anything else fails (--error-exitcode).
VALGRIND_TESTS := abi zc rx
VALGRIND_BINS := $(foreach t,$(VALGRIND_TESTS),$(BUILD)/bin/vg_test_$(t))
VALGRIND := valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite --track-origins=yes --track-fds=no \
	--suppressions=$(CURDIR)/tests/valgrind.supp --quiet --child-silent-after-fork=yes

$(BUILD)/bin/vg_test_%: tests/c/test_%.c tests/c/check.h tests/c/common.h include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) -Wall -Wextra -Werror -O1 -g $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $$($(PKGENV) pkg-config --libs lowcopy) -lpthread -Wl,-rpath,$(BUILD)/lib

valgrind: $(VALGRIND_BINS)
	@set -e; for t in $(VALGRIND_TESTS); do \
	  echo "valgrind: test_$$t"; \
	  LOWCOPY_TEST_UNDER_VALGRIND=1 $(VALGRIND) $(BUILD)/bin/vg_test_$$t; \
	done

# Fuzzing (fuzz/README.md). `make fuzz` runs every target for FUZZ_SECONDS each on nightly
# (cargo-fuzz is installed from crates.io when missing) and adds what it finds to the corpus;
# `make fuzz-replay` (part of `make test`) runs the saved corpus through the same checks on
# stable Rust, no fuzzer needed.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := tracker zcrx capi

fuzz: lib
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  mkdir -p $(BUILD); \
	  rc=0; (cd fuzz && LOWCOPY_LIB_DIR=$(BUILD)/lib $(CARGO) +nightly fuzz run --features libfuzzer $$t \
	    corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1) > $(BUILD)/fuzz-$$t.log 2>&1 || rc=$$?; \
	  grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|#[0-9]+ *DONE)|SUMMARY|panicked|ERROR' \
	    $(BUILD)/fuzz-$$t.log || true; \
	  [ $$rc -eq 0 ] || { echo "fuzz: $$t found something (exit $$rc): $(BUILD)/fuzz-$$t.log, fuzz/artifacts/$$t/"; exit 1; }; \
	done

fuzz-replay: lib
	LOWCOPY_LIB_DIR=$(BUILD)/lib $(CARGO) run -q --release --manifest-path fuzz/Cargo.toml \
	  --bin replay -- $(foreach t,$(FUZZ_TARGETS),$(t)=fuzz/corpus/$(t))

# The main job: iperf3 through the relay in every mode, the relay's connections per second
# (plain and sandboxed), then every benchmark table (the zerocopy tables as medians of 3
# runs: single TCP runs swing 2x on a shared machine; the scale table: memory and descriptors
# per sender at 1 to 10,000 connections, and tx-only throughput with 1 and 1,000 senders on
# one thread, medians of 5).
# Each table is also captured in build/report/*.txt, and scripts/report.py draws them into
# build/report/index.html (self-contained: inline SVG, no network; tests/report/ checks it).
REPORT := $(BUILD)/report
demo:
	scripts/deps.sh demo
	$(MAKE) examples
	$(MAKE) python-demo
	mkdir -p $(REPORT)
	bash -o pipefail -c 'scripts/demo.sh 2>&1 | tee $(REPORT)/relay.txt'
	scripts/relay_cps.sh
	bash -o pipefail -c '$(BUILD)/bin/peek_sweep -n 9 2>&1 | tee $(REPORT)/peek_sweep.txt'
	bash -o pipefail -c 'scripts/hot_cost.sh 2>&1 | tee $(REPORT)/hot_cost.txt'
	bash -o pipefail -c 'ZC_BENCH_REPEAT=$${ZC_BENCH_REPEAT:-3} scripts/zc_bench.sh 2>&1 | tee $(REPORT)/zc_bench.txt'
	bash -o pipefail -c 'scripts/zc_scale.sh 2>&1 | tee $(REPORT)/zc_scale.txt'
	bash -o pipefail -c '$(BUILD)/bin/rx_bench 2>&1 | tee $(REPORT)/rx_bench.txt'
	bash -o pipefail -c 'node/scripts/demo.sh 2>&1 | tee $(REPORT)/node_bench.txt'
	python3 scripts/report.py $(REPORT)

# The Python package: pip install ./python into build/venv (the abi3 wheel, built here), what
# the kernel offers (python -m lowcopy), the examples, and the Python benchmark table.
PYVENV := $(BUILD)/venv
python-demo:
	python/run-tests.sh install
	$(PYVENV)/bin/python examples/python/peek_fixture.py
	$(PYVENV)/bin/python examples/python/zc_sender.py 256
	$(PYVENV)/bin/python examples/python/asyncio_sniffer.py
	$(PYVENV)/bin/python examples/python/bench.py

test:
	scripts/test.sh

# The tiers (scripts/test.sh's sections; CONTRIBUTING.md says which suites each runs).
check:
	scripts/test.sh check

test-c:
	scripts/test.sh c valgrind examples-c

test-python:
	scripts/test.sh python examples-python

test-node:
	scripts/test.sh node examples-js

# Every code block of README.md and docs/*.md (after the three tiers above built what they need).
test-examples:
	scripts/test.sh examples

# The man pages, from the header's doc comments (scripts/manpages.py: one source of text).
man: $(BUILD)/man/man7/lowcopy.7

$(BUILD)/man/man7/lowcopy.7: include/lowcopy.h scripts/manpages.py capi/abi/lowcopy.symbols Cargo.toml
	python3 scripts/manpages.py $(BUILD)/man

# Every exported function has its page, and every page is clean under mandoc -Tlint.
man-check: man
	python3 scripts/manpages.py --check $(BUILD)/man

# The exported symbols and their version nodes against capi/abi/lowcopy.symbols.
abi-check: lib
	scripts/abi_check.sh $(BUILD)/lib/liblowcopy.so.0

version:
	@echo $(VERSION)

version-check:
	scripts/version.sh --check

# Release artifacts in dist/ (scripts/dist.sh says what each is and how it is built).
dist:
	scripts/dist.sh

# Installs stripped libraries; the shared library's debug info goes apart, to
# $(LIBDIR)/.debug/ (where gdb looks for the file its .gnu_debuglink names).
DEBUGDIR := $(LIBDIR)/.debug
install: lib peek-lib man
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(DEBUGDIR) \
	  $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man7 $(BUILD)/stripped
	objcopy --only-keep-debug $(BUILD)/lib/liblowcopy.so.$(VERSION) \
	  $(BUILD)/stripped/liblowcopy.so.$(VERSION).debug
	cd $(BUILD)/stripped && objcopy --strip-unneeded \
	  --add-gnu-debuglink=liblowcopy.so.$(VERSION).debug \
	  $(BUILD)/lib/liblowcopy.so.$(VERSION) liblowcopy.so.$(VERSION)
	strip --strip-debug -o $(BUILD)/stripped/liblowcopy.a $(BUILD)/lib/liblowcopy.a
	strip --strip-debug -o $(BUILD)/stripped/liblowcopy_peek.a $(BUILD)/lib/liblowcopy_peek.a
	install -m 0755 $(BUILD)/stripped/liblowcopy.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	install -m 0644 $(BUILD)/stripped/liblowcopy.so.$(VERSION).debug $(DESTDIR)$(DEBUGDIR)/
	ln -sf liblowcopy.so.$(VERSION) $(DESTDIR)$(LIBDIR)/liblowcopy.so.0
	ln -sf liblowcopy.so.0 $(DESTDIR)$(LIBDIR)/liblowcopy.so
	install -m 0644 $(BUILD)/stripped/liblowcopy.a $(DESTDIR)$(LIBDIR)/
	install -m 0644 $(BUILD)/stripped/liblowcopy_peek.a $(DESTDIR)$(LIBDIR)/
	install -m 0644 include/lowcopy.h include/lowcopy_syscalls.h $(DESTDIR)$(INCDIR)/
	install -d $(DESTDIR)$(SYSCALLSDIR)
	install -m 0644 include/syscalls/*.list $(DESTDIR)$(SYSCALLSDIR)/
	install -m 0644 $(BUILD)/man/man3/*.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 0644 $(BUILD)/man/man7/lowcopy.7 $(DESTDIR)$(MANDIR)/man7/
	$(call write_pc,$(PREFIX),$(LIBDIR),$(INCDIR),$(DESTDIR)$(LIBDIR)/pkgconfig/lowcopy.pc)
	$(call write_peek_pc,$(PREFIX),$(LIBDIR),$(INCDIR),$(DESTDIR)$(LIBDIR)/pkgconfig/lowcopy-peek.pc)

clean:
	$(CARGO) clean
	rm -rf $(BUILD) dist
