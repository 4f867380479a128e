#!/usr/bin/env bash
# Each artifact of dist/ (make dist) installed the way its users install it, with no Rust
# toolchain on PATH, then a smoke check of each primitive there (tests/dist/smoke.*: a peek at
# an offset over loopback TCP, a zerocopy send and its completion, a recv_atleast):
#   wheel   a fresh venv, pip install of the wheel (its declared dependency from PyPI)
#   npm     an empty npm project, npm install --offline of the two tarballs with install
#           scripts allowed: no build may run (no cargo; the loader is told not to build)
#   debs    dpkg -x of liblowcopy0 and liblowcopy-dev into a scratch root, a C program
#           built there with pkg-config and run; man finds lowcopy_peeker_init(3) there
# Prints each install's time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
V=$(scripts/version.sh)
DIST=$ROOT/dist
for f in "lowcopy-$V-cp311-abi3-manylinux_2_28_x86_64.whl" "lowcopy-$V.tgz" \
	"lowcopy-linux-x64-gnu-$V.tgz" "liblowcopy0_$V-1_amd64.deb" "liblowcopy-dev_$V-1_amd64.deb" \
	"liblowcopy-$V.tar.gz" "lowcopy-$V.tar.gz"; do
	[ -f "$DIST/$f" ] || { echo "dist_test: no dist/$f (make dist)" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lowcopy-dist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# No Rust toolchain: PATH without rustup's and cargo's directories, and a check of it.
PATH=$(tr ':' '\n' <<<"$PATH" | grep -v -e '\.cargo/bin' -e 'rustup' | paste -sd: -)
export PATH
unset CARGO RUSTC RUSTUP_TOOLCHAIN CARGO_TARGET_DIR
if command -v cargo >/dev/null || command -v rustc >/dev/null; then
	echo "dist_test: a Rust toolchain is still on PATH ($(command -v cargo rustc))" >&2
	exit 1
fi
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

echo "--- wheel: fresh venv, pip install"
python3 -m venv "$tmp/venv"
t0=$(date +%s%N)
"$tmp/venv/bin/pip" install -q --disable-pip-version-check \
	"$DIST/lowcopy-$V-cp311-abi3-manylinux_2_28_x86_64.whl"
echo "pip install of the wheel: $(ms "$t0") ms"
(cd "$tmp" && venv/bin/python "$ROOT/tests/dist/smoke.py")

echo "--- npm: an empty project, npm install --offline of the two tarballs"
mkdir "$tmp/app"
(cd "$tmp/app" && npm init -y >/dev/null)
main=$(tar -xzOf "$DIST/lowcopy-$V.tgz" package/package.json)
node -e '
	const p = JSON.parse(process.argv[1])
	const s = Object.keys(p.scripts || {}).filter((k) => /^(pre|post)?install$/.test(k))
	if (s.length) { console.error(`dist_test: the main package has install scripts: ${s}`); process.exit(1) }
	const pin = (p.optionalDependencies || {})["lowcopy-linux-x64-gnu"]
	if (pin !== p.version) { console.error(`dist_test: optionalDependencies pin ${pin}, not ${p.version}`); process.exit(1) }' "$main"
t0=$(date +%s%N)
(cd "$tmp/app" && npm install --offline --ignore-scripts=false --foreground-scripts \
	"$DIST/lowcopy-linux-x64-gnu-$V.tgz" "$DIST/lowcopy-$V.tgz" > "$tmp/npm.log" 2>&1) ||
	{ cat "$tmp/npm.log"; exit 1; }
echo "npm install of the two tarballs: $(ms "$t0") ms"
if grep -qi -e cargo -e 'lowcopy: ' "$tmp/npm.log" ||
	ls "$tmp/app/node_modules/lowcopy/"*.node >/dev/null 2>&1; then
	cat "$tmp/npm.log"
	echo "dist_test: npm install built something"
	exit 1
fi
cp tests/dist/smoke.js "$tmp/app/"
(cd "$tmp/app" && LOWCOPY_NO_BUILD=1 node smoke.js)

echo "--- debs: dpkg -x into a scratch root, a C program with pkg-config"
t0=$(date +%s%N)
for d in "liblowcopy0_$V-1_amd64.deb" "liblowcopy-dev_$V-1_amd64.deb"; do
	dpkg -x "$DIST/$d" "$tmp/root"
done
echo "dpkg -x of the two packages: $(ms "$t0") ms"
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
pc=(env PKG_CONFIG_SYSROOT_DIR="$tmp/root" PKG_CONFIG_LIBDIR="$tmp/root/usr/lib/$multi/pkgconfig")
[ "$("${pc[@]}" pkg-config --modversion lowcopy)" = "$V" ] || { echo "dist_test: lowcopy.pc version"; exit 1; }
# shellcheck disable=SC2046
cc -Wall -Wextra -Werror $("${pc[@]}" pkg-config --cflags lowcopy) tests/dist/smoke.c -o "$tmp/smoke" \
	$("${pc[@]}" pkg-config --libs lowcopy)
LD_LIBRARY_PATH="$tmp/root/usr/lib/$multi" "$tmp/smoke"
# shellcheck disable=SC2046
cc -static -Wall -Wextra -Werror $("${pc[@]}" pkg-config --cflags lowcopy) tests/dist/smoke.c \
	-o "$tmp/smoke_static" $("${pc[@]}" pkg-config --static --libs lowcopy) 2>"$tmp/ld.log" ||
	{ cat "$tmp/ld.log"; exit 1; }
"$tmp/smoke_static" | tail -1 | sed 's/^/static: /'
scripts/abi_check.sh "$tmp/root/usr/lib/$multi/liblowcopy.so.0"
page=$(MANPATH="$tmp/root/usr/share/man" man -w lowcopy_peeker_init)
case $page in "$tmp/root/usr/share/man/man3/lowcopy_peeker_init.3"*) ;; *)
	echo "dist_test: man -w lowcopy_peeker_init gave $page"; exit 1 ;; esac
MANPATH="$tmp/root/usr/share/man" MANWIDTH=80 man lowcopy_peeker_init 2>/dev/null | sed -n '4,5p'
echo "dist_test: every artifact installed and ran without a Rust toolchain"
