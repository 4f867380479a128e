#!/usr/bin/env bash
# The release version has one source: the root Cargo.toml's [workspace.package] version (the
# crates inherit it, maturin gives it to the Python package, the Makefile reads it).
#   scripts/version.sh            prints it
#   scripts/version.sh --check    fails when any other place that spells it differs: the npm
#                                 packages (node/package.json, node/npm/*/package.json,
#                                 package-lock.json), napi's
#                                 generated loader (node/index.js), the header's
#                                 LOWCOPY_VERSION_* (include/lowcopy.h), capi/peek/Cargo.toml
#                                 (a workspace of its own) and debian/changelog
#   scripts/version.sh --set X    writes X into Cargo.toml and every file above that is not
#                                 generated; then `make header` and `node/scripts/ci.sh build`
#                                 regenerate lowcopy.h and index.js, and --check passes
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_version() {
	sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml
}
V=$(cargo_version)

case "${1:-}" in
"") echo "$V" ;;
--check)
	python3 - "$V" <<'PY'
import glob, json, re, sys
v = sys.argv[1]
bad = []
def want(where, got):
    if got != v:
        bad.append(f"{where}: {got!r}, not {v!r} (the root Cargo.toml's)")
pkg = json.load(open("node/package.json"))
want("node/package.json version", pkg.get("version"))
plats = sorted(glob.glob("node/npm/*/package.json"))
if not plats:
    bad.append("node/npm/*/package.json: no platform package")
for p in plats:
    d = json.load(open(p))
    want(f"{p} version", d.get("version"))
    # The main package's exact pin on it is written at pack time (node/scripts/pack.js);
    # scripts/dist_test.sh checks it in the packed tarball.
lock = json.load(open("node/package-lock.json"))
want("node/package-lock.json version", lock.get("version"))
want("node/package-lock.json packages[''].version", lock["packages"][""].get("version"))
# examples/node links the package (npm ci there in make test and make demo: its lock is never
# rewritten, so it must name the package's version itself).
ex = json.load(open("examples/node/package-lock.json"))
want("examples/node/package-lock.json packages['../../node'].version",
     ex["packages"]["../../node"].get("version"))
for got in sorted(set(re.findall(r"bindingPackageVersion !== '([^']+)'", open("node/index.js").read()))):
    want("node/index.js (napi build's loader: node/scripts/ci.sh build)", got)
h = open("include/lowcopy.h").read()
hv = ".".join(re.search(rf"#define LOWCOPY_VERSION_{k} (\d+)", h).group(1)
              for k in ("MAJOR", "MINOR", "PATCH"))
want("include/lowcopy.h LOWCOPY_VERSION_* (make header)", hv)
# capi/peek is a workspace of its own (liblowcopy_peek.a): it cannot inherit the version.
pm = re.search(r'^version = "([^"]+)"', open("capi/peek/Cargo.toml").read(), re.M)
want("capi/peek/Cargo.toml version", pm.group(1) if pm else None)
m = re.match(r"lowcopy \(([^)]+)\)", open("debian/changelog").read())
want("debian/changelog's latest entry (upstream part)", m.group(1).split("-")[0] if m else None)
if bad:
    print("\n".join("version: " + b for b in bad))
    sys.exit(1)
print(f"version: {v} everywhere (Cargo.toml, npm packages, loader, header, debian/changelog)")
PY
	;;
--set)
	new=${2:?usage: scripts/version.sh --set X.Y.Z}
	sed -i "/^\[workspace\.package\]/,/^\[/s/^version *= *\".*\"/version = \"$new\"/" Cargo.toml
	python3 - "$new" <<'PY'
import glob, json, sys
v = sys.argv[1]
def edit(path, f):
    d = json.load(open(path))
    f(d)
    with open(path, "w") as out:
        json.dump(d, out, indent=2)
        out.write("\n")
for p in glob.glob("node/npm/*/package.json"):
    edit(p, lambda d: d.update(version=v))
edit("node/package.json", lambda d: d.update(version=v))
def lock(d):
    d["version"] = v
    d["packages"][""]["version"] = v
edit("node/package-lock.json", lock)
edit("examples/node/package-lock.json", lambda d: d["packages"]["../../node"].update(version=v))
PY
	sed -i "0,/^version = \".*\"/s//version = \"$new\"/" capi/peek/Cargo.toml
	(cd capi/peek && cargo update -w -q 2>/dev/null) || true
	if ! head -1 debian/changelog | grep -q "($new-"; then
		{
			echo "lowcopy ($new-1) unstable; urgency=medium"
			echo
			echo "  * New upstream release $new."
			echo
			echo " -- lowcopy developers <dev@lowcopy.invalid>  $(date -R)"
			echo
			cat debian/changelog
		} > debian/changelog.new && mv debian/changelog.new debian/changelog
	fi
	cargo update -w -q 2>/dev/null || true
	echo "version: $new written; now make header and node/scripts/ci.sh build (lowcopy.h, index.js)"
	;;
*) echo "usage: $0 [--check | --set X.Y.Z]" >&2; exit 2 ;;
esac
