#!/bin/sh
# The footprint a daemon takes in with the peek path (issue 22, points 1 and 7): text added to
# tests/footprint/daemon_min.c by liblowcopy.a (build/lib, `make lib`), linked through
# lowcopy-static.pc with and without --gc-sections, and the libc symbols the program then
# references. A measurement, not yet a test: the issue's bounds (64 KB, no symbol beyond the
# syscall wrappers and mem*) are not met by this version.
set -eu
cd "$(dirname "$0")/../.."
export PKG_CONFIG_PATH="$PWD/build/lib/pkgconfig"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
printf 'int main(void) { return 0; }\n' > "$t/empty.c"
cc -O2 "$t/empty.c" -o "$t/empty"
# shellcheck disable=SC2046
cc -O2 -Wall -Wextra -Werror $(pkg-config --cflags lowcopy-static) tests/footprint/daemon_min.c \
	-o "$t/full" $(pkg-config --libs lowcopy-static)
# shellcheck disable=SC2046
cc -O2 -Wall -Wextra -Werror $(pkg-config --cflags lowcopy-static) tests/footprint/daemon_min.c \
	-o "$t/gc" -Wl,--gc-sections $(pkg-config --libs lowcopy-static)
text() { size "$1" | awk 'NR == 2 { print $1 }'; }
syms() { nm -D --undefined-only "$1" | awk '$1 != "w" { sub(/@.*/, "", $2); print $2 }' | sort -u; }
e=$(text "$t/empty")
printf '%-34s %10s %8s\n' "program" "text" "libc syms"
printf '%-34s %10s %8s\n' "empty" "$e" "$(syms "$t/empty" | wc -l)"
for v in full gc; do
	printf '%-34s %10s %8s\n' "daemon_min ($v), text added" "$(( $(text "$t/$v") - e ))" \
		"$(syms "$t/$v" | wc -l)"
done
printf 'NEEDED: %s\n' "$(readelf -d "$t/gc" | awk '/NEEDED/ { print $5 }' | tr -d '[]' | tr '\n' ' ')"
printf 'libc symbols with --gc-sections: %s\n' "$(syms "$t/gc" | tr '\n' ' ')"
