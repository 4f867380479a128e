#!/bin/sh
# A test that is a sandboxed daemon (issue 22.7): builds tests/footprint/daemon.c through
# `pkg-config --static lowcopy-static` (the archive, libc alone), runs it under its own seccomp
# filter built from include/syscalls/use_peeker_init_closing.list (it moves hash-checked
# streams with rewinds and fails on any wrong byte or a syscall outside the list), then checks
# what the archive adds to it against bounds and fails past them:
#   - text added: the linked daemon's text less an empty program's and the daemon's own
#     object's (size(1));
#   - libc symbols added: the daemon's undefined dynamic symbols less those its own object and
#     an empty program reference (nm);
#   - NEEDED: libc (and the dynamic loader) only, no libgcc_s.
# Both as linked by the .pc (the daemon's own link line) and with -Wl,--gc-sections.
#
# The bounds are what the archive shipped today meets, with a few per cent of room: they catch
# growth. They are NOT issue 22.1's (64 KB of text, only syscall wrappers and mem*): the full
# archive carries the Rust standard library (formatting, panics, backtraces, threads, the
# allocator), none of it reached by the peek path; a no_std peek engine would be needed (issue
# 22.1, not done). The gap is printed with every run.
set -eu
cd "$(dirname "$0")/../.."
export PKG_CONFIG_PATH="$PWD/build/lib/pkgconfig"

# Bounds (measured 2026-12-02 on x86_64, gcc, glibc: 1,131,740 B / 148 symbols as linked,
# 348,423 B / 38 with --gc-sections; about 3 per cent of room for text, a few symbols).
MAX_TEXT_FULL=1170000
MAX_SYMS_FULL=154
MAX_TEXT_GC=360000
MAX_SYMS_GC=41
# Issue 22.1's target, reported as the gap.
ISSUE_TEXT=65536

t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
list=include/syscalls/use_peeker_init_closing.list
cflags="-O2 -Wall -Wextra -Werror $(pkg-config --static --cflags lowcopy-static)"
libs="$(pkg-config --static --libs lowcopy-static)"
printf 'int main(void) { return 0; }\n' > "$t/empty.c"
# shellcheck disable=SC2086
cc $cflags "$t/empty.c" -o "$t/empty"
# shellcheck disable=SC2086
cc $cflags -c tests/footprint/daemon.c -o "$t/daemon.o"
# shellcheck disable=SC2086
cc "$t/daemon.o" -o "$t/full" -Wl,-z,now $libs
# shellcheck disable=SC2086
cc "$t/daemon.o" -o "$t/gc" -Wl,-z,now -Wl,--gc-sections $libs

fail=0
"$t/full" "$list" || { echo "FAIL: the daemon (archive as linked by lowcopy-static.pc)"; fail=1; }
"$t/gc" "$list" || { echo "FAIL: the daemon (--gc-sections)"; fail=1; }

text() { size "$1" | awk 'NR == 2 { print $1 }'; }
own_syms() { nm --undefined-only "$t/daemon.o" | awk '{ print $NF }' | sort -u; }
dyn_syms() { nm -D --undefined-only "$1" | awk '$1 != "w" { sub(/@.*/, "", $2); print $2 }' | sort -u; }
base=$(( $(text "$t/empty") + $(text "$t/daemon.o") ))
{ own_syms; dyn_syms "$t/empty"; } | sort -u > "$t/own"
for v in full gc; do
	added=$(( $(text "$t/$v") - base ))
	dyn_syms "$t/$v" > "$t/$v.syms"
	syms=$(comm -23 "$t/$v.syms" "$t/own" | wc -l)
	needed=$(readelf -d "$t/$v" | awk '/NEEDED/ { print $5 }' | tr -d '[]' | tr '\n' ' ')
	if [ "$v" = full ]; then mt=$MAX_TEXT_FULL ms=$MAX_SYMS_FULL; else mt=$MAX_TEXT_GC ms=$MAX_SYMS_GC; fi
	printf 'footprint (%s): text added %d B (bound %d), libc symbols added %d (bound %d), NEEDED: %s\n' \
		"$v" "$added" "$mt" "$syms" "$ms" "$needed"
	printf '  gap to issue 22.1: %d B of text over 64 KB; symbols beyond syscall wrappers and mem*: %s\n' \
		"$(( added - ISSUE_TEXT ))" \
		"$(comm -23 "$t/$v.syms" "$t/own" | grep -Ev '^(mem(cpy|move|set|cmp)|bcmp|recv|recvmsg|recvfrom|setsockopt|getsockopt|ioctl|poll|fcntl|close|clock_gettime|__errno_location|syscall)$' | wc -l)"
	[ "$added" -le "$mt" ] || { echo "FAIL ($v): text added $added > $mt"; fail=1; }
	[ "$syms" -le "$ms" ] || { echo "FAIL ($v): libc symbols added $syms > $ms"; fail=1; }
	for n in $needed; do
		case $n in
		libc.so.6 | ld-linux-x86-64.so.2) ;;
		*) echo "FAIL ($v): NEEDED $n (libc alone expected)"; fail=1 ;;
		esac
	done
done
printf 'libc symbols added with --gc-sections: %s\n' "$(comm -23 "$t/gc.syms" "$t/own" | tr '\n' ' ')"
if [ $fail -ne 0 ]; then
	echo "footprint daemon: FAILED"
	exit 1
fi
echo "footprint daemon: passed"
