#!/usr/bin/env bash
# The Python package's suites, called by scripts/test.sh (and usable alone):
#   python/run-tests.sh install   fresh venv (build/venv) + pip install ./python: builds the
#                                 abi3 wheel from source with nothing but PyPI and crates.io
#   python/run-tests.sh pytest    the behaviour tables and the Python-only cases
#   python/run-tests.sh types     mypy.stubtest on the native module, mypy --strict on the
#                                 package and examples/python
# LOWCOPY_VENV overrides the venv's path.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LOWCOPY_VENV:-$PWD/build/venv}
PY=$VENV/bin/python
# maturin must use this machine's cargo, never download a toolchain.
export MATURIN_NO_INSTALL_RUST=1

case "${1:-all}" in
install)
	if [ ! -x "$PY" ] && ! python3 -m venv "$VENV"; then
		# Debian's python3 has venv in a package of its own.
		rm -rf "$VENV"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null &&
			python3 -m venv "$VENV"
	fi
	"$PY" -m pip install -q --disable-pip-version-check \
		"pytest>=8" "pytest-asyncio>=0.23" "mypy>=1.10" "typing_extensions>=4.6"
	t0=$SECONDS
	"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python
	echo "pip install ./python: $((SECONDS - t0)) s"
	"$PY" -m lowcopy
	;;
pytest)
	# From the tests folder: the installed wheel is imported, not the source tree.
	cd python/tests
	"$PY" -m pytest -q -p no:cacheprovider "${@:2}"
	;;
types)
	cd python/tests # import the installed package, not python/python
	"$PY" -m mypy.stubtest lowcopy._lowcopy --allowlist ../stubtest-allowlist.txt
	cd ../..
	"$PY" -m mypy --strict --cache-dir build/mypy-cache python/python/lowcopy examples/python
	;;
all)
	"$0" install && "$0" pytest && "$0" types
	;;
*)
	echo "usage: $0 install|pytest|types|all" >&2
	exit 2
	;;
esac
