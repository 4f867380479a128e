# lowcopy: build, test, demo and install.
#   make demo      build everything and run the main job (relay on real iperf3 traffic)
#   make test      every test (Rust, C, relay, fallbacks, valgrind, fuzz corpus); .ci/run calls this
#   make fuzz      the fuzzers, FUZZ_SECONDS (60) each, on nightly (fuzz/README.md)
#   make install   PREFIX=/usr/local DESTDIR= : stripped .so and .a (the .so's debug info in
#                  LIBDIR/.debug), lowcopy.h, lowcopy_syscalls.h, lowcopy.pc
VERSION  := 0.3.0
PREFIX   ?= /usr/local
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
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

.PHONY: all lib fault-lib header examples c-tests demo python-demo test install clean valgrind \
	fuzz fuzz-replay

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

# write_pc(prefix, libdir, includedir, file)
define write_pc
	printf '%s\n' 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	  'Name: lowcopy' \
	  'Description: Linux socket primitives without needless copies or wakeups' \
	  'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -llowcopy' \
	  'Libs.private: $(STATIC_PRIVATE)' \
	  'Cflags: -I$${includedir}' > $(4)
endef

header:
	LOWCOPY_BLESS=1 $(CARGO) test -p lowcopy-capi --test header

EXAMPLES := $(patsubst examples/c/%.c,$(BUILD)/bin/%,$(wildcard examples/c/*.c))

# Beside the examples, the relay's connections-per-second client (scripts/relay_cps.sh).
RELAY_TOOLS := $(BUILD)/bin/relay_cps

examples: lib $(EXAMPLES) $(RELAY_TOOLS)

$(BUILD)/bin/relay_cps: tests/relay/cps.c
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
c-tests: lib $(C_TEST_BINS) $(C_RUNNERS) $(C_ABI_BINS) $(SECCOMP_RUNNERS) $(BUILD)/bin/faultrun

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
	--suppressions=$(CURDIR)/tests/valgrind.supp --quiet

$(BUILD)/bin/vg_test_%: tests/c/test_%.c tests/c/check.h tests/c/common.h include/lowcopy.h lib
	mkdir -p $(BUILD)/bin
	$(CC) -Wall -Wextra -Werror -O1 -g $$($(PKGENV) pkg-config --cflags lowcopy) $< -o $@ \
	  $$($(PKGENV) pkg-config --libs lowcopy) -lpthread -Wl,-rpath,$(BUILD)/lib

valgrind: $(VALGRIND_BINS)
	@set -e; for t in $(VALGRIND_TESTS); do \
	  echo "valgrind: test_$$t"; \
	  $(VALGRIND) $(BUILD)/bin/vg_test_$$t; \
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
demo:
	scripts/deps.sh demo
	$(MAKE) examples
	$(MAKE) python-demo
	scripts/demo.sh
	scripts/relay_cps.sh
	$(BUILD)/bin/peek_sweep -n 9
	ZC_BENCH_REPEAT=$${ZC_BENCH_REPEAT:-3} scripts/zc_bench.sh
	scripts/zc_scale.sh
	$(BUILD)/bin/rx_bench
	node/scripts/demo.sh

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

# Installs stripped libraries; the shared library's debug info goes apart, to
# $(LIBDIR)/.debug/ (where gdb looks for the file its .gnu_debuglink names).
DEBUGDIR := $(LIBDIR)/.debug
install: lib
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) $(DESTDIR)$(DEBUGDIR) \
	  $(BUILD)/stripped
	objcopy --only-keep-debug $(BUILD)/lib/liblowcopy.so.$(VERSION) \
	  $(BUILD)/stripped/liblowcopy.so.$(VERSION).debug
	cd $(BUILD)/stripped && objcopy --strip-unneeded \
	  --add-gnu-debuglink=liblowcopy.so.$(VERSION).debug \
	  $(BUILD)/lib/liblowcopy.so.$(VERSION) liblowcopy.so.$(VERSION)
	strip --strip-debug -o $(BUILD)/stripped/liblowcopy.a $(BUILD)/lib/liblowcopy.a
	install -m 0755 $(BUILD)/stripped/liblowcopy.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	install -m 0644 $(BUILD)/stripped/liblowcopy.so.$(VERSION).debug $(DESTDIR)$(DEBUGDIR)/
	ln -sf liblowcopy.so.$(VERSION) $(DESTDIR)$(LIBDIR)/liblowcopy.so.0
	ln -sf liblowcopy.so.0 $(DESTDIR)$(LIBDIR)/liblowcopy.so
	install -m 0644 $(BUILD)/stripped/liblowcopy.a $(DESTDIR)$(LIBDIR)/
	install -m 0644 include/lowcopy.h include/lowcopy_syscalls.h $(DESTDIR)$(INCDIR)/
	$(call write_pc,$(PREFIX),$(LIBDIR),$(INCDIR),$(DESTDIR)$(LIBDIR)/pkgconfig/lowcopy.pc)

clean:
	$(CARGO) clean
	rm -rf $(BUILD)
