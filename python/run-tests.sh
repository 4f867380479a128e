#!/usr/bin/env bash
# The Python package's suites, called by scripts/test.sh (and usable alone):
#   python/run-tests.sh install   a fresh venv (build/venv, made anew each time, no system
#                                 site-packages) + the test tools + pip install ./python:
#                                 builds the abi3 wheel from source with nothing but PyPI and
#                                 crates.io. Nothing else goes in: a dependency the package
#                                 uses but does not declare fails the tests (test_env.py
#                                 imports every module where only the standard library and
#                                 the declared dependencies can be imported, since the test
#                                 tools bring packages of their own, typing_extensions for one)
#   python/run-tests.sh pytest    the behaviour tables and the Python-only cases
#   python/run-tests.sh types     mypy.stubtest on the native module, mypy --strict on the
#                                 package and examples/python
# LOWCOPY_VENV overrides the venv's path (install makes it anew: give one of its own). The suites run the venv's python with no PYTHONPATH
# (or other PYTHON* settings of the caller), from python/tests: they import the installed
# wheel, never python/python (test_env.py checks).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LOWCOPY_VENV:-$PWD/build/venv}
PY=$VENV/bin/python
# maturin must use this machine's cargo, never download a toolchain.
export MATURIN_NO_INSTALL_RUST=1
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE PYTHONSAFEPATH
export PYTHONNOUSERSITE=1

case "${1:-all}" in
install)
	# Anew each time: nothing a previous run (or a hand) installed stays. build/venv is this
	# script's; a LOWCOPY_VENV elsewhere is removed only when this script made it (its marker).
	if [ -n "${LOWCOPY_VENV:-}" ] && [ -e "$VENV" ] && [ ! -e "$VENV/.lowcopy-test-venv" ]; then
		echo "$VENV exists and was not made by $0: remove it, or set LOWCOPY_VENV to a new path" >&2
		exit 1
	fi
	rm -rf "$VENV"
	if ! python3 -m venv "$VENV"; then
		# Debian's python3 has venv in a package of its own.
		rm -rf "$VENV"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null &&
			python3 -m venv "$VENV"
	fi
	touch "$VENV/.lowcopy-test-venv"
	grep -qx 'include-system-site-packages = false' "$VENV/pyvenv.cfg" ||
		{ echo "$VENV sees the system site-packages" >&2; exit 1; }
	# The test tools only (the package's `test` extra); never a dependency of the package.
	"$PY" -m pip install -q --disable-pip-version-check \
		"pytest>=8" "pytest-asyncio>=0.23" "mypy>=1.10"
	t0=$SECONDS
	"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./python
	echo "pip install ./python: $((SECONDS - t0)) s"
	"$PY" -m lowcopy
	;;
pytest)
	# From the tests folder: the installed wheel is imported, not the source tree.
	cd python/tests
	# A hung test fails the suite after 20 minutes instead of holding CI until its limit.
	timeout --kill-after=10 1200 "$PY" -m pytest -q -p no:cacheprovider "${@:2}"
	;;
types)
	cd python/tests # import the installed package, not python/python
	# Its cache in build/ (mypy's default, .mypy_cache here, left the tree dirty after make test).
	MYPY_CACHE_DIR="$PWD/../../build/mypy-cache-stubtest" \
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
