#!/usr/bin/env bash
# The Node part of `make demo` (after `make examples` built liblowcopy): installs the package
# into examples/node from its committed lockfile (npm ci: never rewrites package-lock.json), runs the
# protocol sniffer against an HTTP request and two TLS ClientHellos, then the benchmark tables
# (Peeker.peekInto vs the C library; ZeroCopySender vs socket.write on loopback, and vs dgram
# send and the C library tx-only, in the namespaces scripts/zc_bench.sh makes).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
cd "$ROOT/examples/node"
echo "node demo: npm ci (links the lowcopy package from node/)" >&2
npm ci
mkdir -p "$BUILD/bin"
# shellcheck disable=SC2046
cc -Wall -Wextra -Werror -O2 $(PKG_CONFIG_PATH="$BUILD/lib/pkgconfig" pkg-config --cflags lowcopy) \
	peek_bench.c -o "$BUILD/bin/node_peek_bench" \
	$(PKG_CONFIG_PATH="$BUILD/lib/pkgconfig" pkg-config --libs lowcopy) -Wl,-rpath,"$BUILD/lib"
node demo_sniffer.js
node bench.js "$BUILD/bin/node_peek_bench"
