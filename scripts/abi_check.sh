#!/usr/bin/env bash
# The exported ABI of liblowcopy.so.0 against its committed list, capi/abi/lowcopy.symbols:
# one line per exported symbol, `name@@NODE` for the default version of a name and
# `name@NODE` for an older one kept for programs built against it (nm -D's spelling).
#   scripts/abi_check.sh [LIB]        fails when a listed symbol is missing, has moved to
#                                     another version node, or an export is not listed, when
#                                     an export has no version node, and when
#                                     debian/liblowcopy0.symbols is not what the list gives
#   scripts/abi_check.sh --list LIB   prints LIB's exports in the list's form
#   scripts/abi_check.sh --debian     prints debian/liblowcopy0.symbols from the list
# A new function: add its default_version! beside it (capi/src), its node's name in
# capi/lowcopy.map (a new node for a new release, inheriting the last one), and its line here.
set -euo pipefail
cd "$(dirname "$0")/.."
LIST=capi/abi/lowcopy.symbols

exports() { # exports LIB: defined dynamic symbols, sorted
	nm -D --defined-only "$1" | awk '{ print $3 }' | LC_ALL=C sort
}
listed() { grep -v '^#' "$LIST" | grep . | LC_ALL=C sort; }

debian_symbols() {
	echo "liblowcopy.so.0 liblowcopy0 #MINVER#"
	echo "* Build-Depends-Package: liblowcopy-dev"
	# dpkg-gensymbols writes name@NODE for default and older versions alike; the minimal
	# package version of a symbol is the release that brought its node (LOWCOPY_0.2: 0.2.0).
	listed | sed 's/@@/@/' | awk -F@ '{ v = $2; sub(/^LOWCOPY_/, "", v); print " " $1 "@" $2 " " v ".0" }'
}

case "${1:-}" in
--list) exports "$2"; exit ;;
--debian) debian_symbols; exit ;;
esac

LIB=${1:-build/lib/liblowcopy.so.0}
[ -e "$LIB" ] || { echo "abi: no $LIB (make lib)" >&2; exit 2; }
fail=0
missing=$(LC_ALL=C comm -23 <(listed) <(exports "$LIB"))
extra=$(LC_ALL=C comm -13 <(listed) <(exports "$LIB"))
# A name that is in both lists under another node has moved.
for s in $missing; do
	n=${s%%@*}
	moved=$(grep -E "^$n@" <<<"$extra" || true)
	if [ -n "$moved" ]; then
		echo "abi: $s moved: the library has $(echo $moved)"
	else
		echo "abi: $s is listed in $LIST but the library does not export it"
	fi
	fail=1
done
for s in $extra; do
	n=${s%%@*}
	grep -qE "^$n@" <<<"$missing" && continue
	case $s in
	*@*) echo "abi: $s is exported but not listed in $LIST" ;;
	*) echo "abi: $s is exported without a version node (and not listed in $LIST)" ;;
	esac
	fail=1
done
if ! diff -u debian/liblowcopy0.symbols <(debian_symbols) >/dev/null; then
	echo "abi: debian/liblowcopy0.symbols is not what $LIST gives (scripts/abi_check.sh --debian > debian/liblowcopy0.symbols):"
	diff -u debian/liblowcopy0.symbols <(debian_symbols) || true
	fail=1
fi
if [ "$fail" -ne 0 ]; then
	echo "abi: $LIB differs from $LIST"
	exit 1
fi
echo "abi: $(listed | wc -l) symbols of $LIB as listed ($(listed | sed 's/.*@//' | sort -u | tr '\n' ' '))"
