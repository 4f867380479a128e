#!/usr/bin/env bash
# Sourced by scripts/test.sh and scripts/demo.sh: installs what the project needs on a fresh
# Debian machine (we run as root there), and nothing when it is already present. A normal
# user is told what to install instead.
ensure_deps() { # ensure_deps test|demo
	local need=()
	command -v cargo >/dev/null || { echo "cargo (Rust toolchain) is required" >&2; exit 2; }
	command -v cc >/dev/null || need+=(gcc)
	command -v make >/dev/null || need+=(make)
	command -v pkg-config >/dev/null || need+=(pkg-config)
	command -v python3 >/dev/null || need+=(python3)
	command -v readelf >/dev/null || need+=(binutils)
	command -v ip >/dev/null || need+=(iproute2)
	pkg-config --exists libcjson 2>/dev/null || need+=(libcjson-dev)
	[ "$1" = test ] && { command -v valgrind >/dev/null || need+=(valgrind); }
	# make man-check (mandoc -Tlint), man -w in the install and dist checks, make dist
	# (dpkg-buildpackage with debhelper).
	[ "$1" = test ] && { command -v mandoc >/dev/null || need+=(mandoc); }
	[ "$1" = test ] && { command -v man >/dev/null || need+=(man-db); }
	[ "$1" = test ] && { command -v dh >/dev/null || need+=(debhelper); }
	command -v node >/dev/null || need+=(nodejs)
	command -v npm >/dev/null || need+=(npm)
	[ "$1" = demo ] && { command -v iperf3 >/dev/null || need+=(iperf3); }
	if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
		echo "missing: ${need[*]}; as root: apt-get install ${need[*]}" >&2
		exit 2
	fi
	if [ ${#need[@]} -gt 0 ]; then
		echo "installing: ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null ||
			{ echo "apt-get install ${need[*]} failed" >&2; exit 2; }
	fi
}

# Run directly (`scripts/deps.sh demo`) rather than sourced.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -eu
	ensure_deps "${1:-test}"
fi
