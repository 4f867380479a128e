#!/usr/bin/env bash
# make dist: every release artifact in dist/, with the version of the root Cargo.toml
# (scripts/version.sh --check first):
#   liblowcopy-V.tar.gz                the C library's source (the tree: tracked files and new
#                                      ones not ignored), from which the .debs are built
#   lowcopy-V.tar.gz                   the Python sdist (maturin sdist)
#   lowcopy-V-cp311-abi3-manylinux_2_28_x86_64.whl
#                                      built from that sdist, linked by zig against glibc
#                                      2.28's symbols, stripped; auditwheel show must confirm
#                                      the manylinux_2_28 tag
#   lowcopy-linux-x64-gnu-V.tgz        npm platform package: the stripped addon, glibc 2.28
#   lowcopy-V.tgz                      npm main package (loader, types, the sources for the
#                                      fallback build), optionalDependencies on the above
#   liblowcopy0_V-1_amd64.deb, liblowcopy-dev_V-1_amd64.deb (and the -dbgsym one)
#                                      dpkg-buildpackage -b -us -uc -d from the source tarball
#                                      (-d: cargo and rustc are rustup's, not Debian's packages)
# The build tools come from PyPI at pinned versions into build/dist-tools (a venv): maturin,
# ziglang (zig, the linker for an older glibc) and auditwheel.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/version.sh --check
V=$(scripts/version.sh)
DIST=$ROOT/dist
WORK=$ROOT/build/dist
GLIBC=2.28
TOOLS=$ROOT/build/dist-tools
PINS=(maturin==1.16.0 ziglang==0.17.1 auditwheel==6.8.2)
export MATURIN_NO_INSTALL_RUST=1 npm_config_audit=false npm_config_fund=false \
	npm_config_update_notifier=false
t_all=$SECONDS
step() { echo "dist: $*"; }

# The tools, once per pin list.
if [ "$(cat "$TOOLS/.pins" 2>/dev/null)" != "${PINS[*]}" ]; then
	step "tools: ${PINS[*]}"
	rm -rf "$TOOLS"
	python3 -m venv "$TOOLS" 2>/dev/null || {
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
		python3 -m venv "$TOOLS"
	}
	"$TOOLS/bin/pip" install -q --disable-pip-version-check "${PINS[@]}"
	echo "${PINS[*]}" > "$TOOLS/.pins"
fi
# maturin runs `python3 -m ziglang` from PATH: the venv's.
export PATH=$TOOLS/bin:$PATH

rm -rf "$DIST"
mkdir -p "$DIST" "$WORK"

# 1. The source tarball: reproducible (sorted, owner 0, mtime of the last commit).
t0=$SECONDS
if git rev-parse --git-dir >/dev/null 2>&1; then
	git ls-files -co --exclude-standard -z | LC_ALL=C sort -z |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done > "$WORK/files"
	export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
else
	echo "dist: needs a git checkout (the file list is git's)" >&2
	exit 2
fi
tar --no-recursion --transform "s|^|liblowcopy-$V/|" --sort=name --owner=0 --group=0 \
	--numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --format=gnu --null -T "$WORK/files" \
	-cf - | gzip -n9 > "$DIST/liblowcopy-$V.tar.gz"
step "liblowcopy-$V.tar.gz ($((SECONDS - t0)) s)"

# 2. Python: the sdist, then the wheel from the unpacked sdist (so the sdist is known to
# build it). Its target dir is the repository's: the dependencies are built once.
t0=$SECONDS
(cd python && maturin sdist -o "$DIST" >/dev/null)
sdist=$DIST/lowcopy-$V.tar.gz
rm -rf "$WORK/sdist" && mkdir -p "$WORK/sdist"
tar -xzf "$sdist" -C "$WORK/sdist"
(cd "$WORK/sdist/lowcopy-$V" &&
	CARGO_TARGET_DIR=$ROOT/target maturin build --release --strip --zig \
		--compatibility "manylinux_${GLIBC/./_}" -o "$DIST" 2>&1 | grep -v '^ *Compiling' || true)
wheel=$DIST/lowcopy-$V-cp311-abi3-manylinux_${GLIBC/./_}_x86_64.whl
test -f "$wheel" || { echo "dist: no $wheel" >&2; exit 1; }
auditwheel show "$wheel" > "$WORK/auditwheel.txt"
grep -q "consistent with the following platform tag: \"manylinux_${GLIBC/./_}_x86_64\"" \
	<(tr -s '\n ' '  ' < "$WORK/auditwheel.txt") ||
	{ cat "$WORK/auditwheel.txt"; echo "dist: auditwheel does not confirm manylinux_${GLIBC/./_}" >&2; exit 1; }
step "$(basename "$sdist"), $(basename "$wheel") (auditwheel: manylinux_${GLIBC/./_}_x86_64; $((SECONDS - t0)) s)"

# 3. Node: the addon linked by zig against glibc $GLIBC (maturin's zig wrapper, the same
# cargo-zigbuild code the wheel is linked with), stripped, in the platform package.
t0=$SECONDS
cat > "$WORK/zigcc" <<ZIG
#!/bin/sh
exec "$TOOLS/bin/maturin" zig cc -- -g -fno-sanitize=all -target x86_64-linux-gnu.$GLIBC "\$@"
ZIG
chmod +x "$WORK/zigcc"
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$WORK/zigcc CC_x86_64_unknown_linux_gnu=$WORK/zigcc \
	cargo build -q --release -p lowcopy-node --target x86_64-unknown-linux-gnu
plat=$ROOT/node/npm/linux-x64-gnu
strip --strip-unneeded -o "$plat/lowcopy.linux-x64-gnu.node" \
	target/x86_64-unknown-linux-gnu/release/liblowcopy_node.so
newest=$(objdump -T "$plat/lowcopy.linux-x64-gnu.node" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
[ "$(printf '%s\n' "GLIBC_$GLIBC" "$newest" | sort -V | tail -1)" = "GLIBC_$GLIBC" ] ||
	{ echo "dist: the addon needs $newest, newer than glibc $GLIBC" >&2; exit 1; }
(cd "$plat" && npm pack -q --pack-destination "$DIST" >/dev/null)
(cd node && npm pack -q --pack-destination "$DIST" >/dev/null)
step "lowcopy-linux-x64-gnu-$V.tgz (addon needs $newest at most), lowcopy-$V.tgz ($((SECONDS - t0)) s)"

# 4. Debian: from the unpacked source tarball, in build/dist/deb (dpkg-buildpackage writes
# beside the source dir). Its cargo target dir is kept (target/deb) between runs.
t0=$SECONDS
command -v dh >/dev/null || {
	[ "$(id -u)" -eq 0 ] || { echo "dist: needs debhelper (apt-get install debhelper)" >&2; exit 2; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debhelper >/dev/null
}
rm -rf "$WORK/deb" && mkdir -p "$WORK/deb" "$ROOT/target/deb"
tar -xzf "$DIST/liblowcopy-$V.tar.gz" -C "$WORK/deb"
ln -s "$ROOT/target/deb" "$WORK/deb/liblowcopy-$V/target"
(cd "$WORK/deb/liblowcopy-$V" && dpkg-buildpackage -b -us -uc -d > "$WORK/deb/build.log" 2>&1) ||
	{ tail -40 "$WORK/deb/build.log"; echo "dist: dpkg-buildpackage failed ($WORK/deb/build.log)" >&2; exit 1; }
grep -E 'dpkg-gensymbols: warning' -A20 "$WORK/deb/build.log" || true
cp "$WORK"/deb/*.deb "$DIST/"
step "$(cd "$DIST" && ls *.deb | tr '\n' ' ')($((SECONDS - t0)) s)"

echo "dist: $V in $((SECONDS - t_all)) s:"
(cd "$DIST" && stat -c '  %8s  %n' * | sort -k2)
