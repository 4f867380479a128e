#!/usr/bin/env bash
# The Node suites of `make test` (scripts/test.sh calls this with one of the names below):
#   build    npm ci (the CLI, devDependencies only), napi build --release (the addon and the
#            generated loader and types), and the drift check: index.js and index.d.ts as
#            committed must be what this build generates; tsc --strict on test/types-check.ts
#   test     node --test on node/test/ (behaviour tables, Node-only cases), after linking the
#            package into examples/node (npm ci there: from its committed lockfile, which it
#            never rewrites, so the tree stays clean; it fails when the lock is out of step)
#   pack     npm pack, then npm install of the tarball alone (no platform package:
#            --omit=optional) in an empty folder elsewhere: no install script runs; the first
#            require() finds no prebuilt binary, says so and builds from the package's own
#            sources (core vendored), then loads; npx lowcopy probe. (The prebuilt path, the
#            tarballs of make dist: scripts/dist_test.sh.)
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_DIR=$PWD
ROOT=$(cd .. && pwd)
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

case "${1:-}" in
build)
	npm ci --ignore-scripts
	npx napi build --platform --release --no-dts-cache
	if ! git diff --exit-code -- index.js index.d.ts; then
		echo "node: index.js/index.d.ts differ from what napi build generates: commit them" >&2
		exit 1
	fi
	npx tsc --noEmit --strict --target es2022 --module nodenext --moduleResolution nodenext \
		--types node --lib es2022,esnext.disposable test/types-check.ts
	;;
test)
	(cd "$ROOT/examples/node" && npm ci)
	timeout --kill-after=10 1200 node --expose-gc --test test/
	;;
pack)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	npm pack --pack-destination "$tmp" >/dev/null
	mkdir "$tmp/app"
	cd "$tmp/app"
	npm init -y >/dev/null
	# Its own target dir inside the workspace's: later runs rebuild incrementally.
	npm install --omit=optional "$tmp"/lowcopy-*.tgz
	test ! -e node_modules/lowcopy/lowcopy.linux-x64-gnu.node
	CARGO_TARGET_DIR="$ROOT/target/npm-pack" node -e "require('lowcopy')" 2>"$tmp/load.log" ||
		{ cat "$tmp/load.log"; exit 1; }
	cat "$tmp/load.log"
	grep -q 'no prebuilt binary loads' "$tmp/load.log"
	test -e node_modules/lowcopy/lowcopy.linux-x64-gnu.node
	test ! -e node_modules/lowcopy/target
	node -e "
		const l = require('lowcopy')
		if (typeof l.probe().peekOffTcp4 !== 'boolean') process.exit(1)
		try { new l.Peeker() } catch (e) { if (e.code === 'ERR_INVALID_ARG_TYPE') process.exit(0) }
		process.exit(1)"
	npx --no-install lowcopy probe
	;;
*)
	echo "usage: $0 build|test|pack" >&2
	exit 2
	;;
esac
