#!/usr/bin/env bash
# Makes a Python virtual environment for the interop tests of the catalog's
# RPC front ends (internal/catalogrpc), with PyPI's thrift (the Thrift
# runtime for Python) and grpcio-tools (protoc and the gRPC runtime for
# Python), and prints the path of its python. Quiet, and quick, when the
# environment is already there.
#
# Usage: scripts/python.sh        (the venv: ${INLET_CACHE:-.cache}/py)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CACHE="${INLET_CACHE:-$REPO/.cache}"
VENV="$CACHE/py"
PY="$VENV/bin/python"
# The Thrift runtime: 0.22.0 (tested), else the newest that installs; every
# version speaks the same binary protocol and framing as the Go library's
# 0.17.0.
THRIFT_VERSION="0.22.0"

ready() {
	[ -x "$PY" ] && "$PY" -c 'import thrift, grpc, grpc_tools.protoc, google.protobuf' >/dev/null 2>&1
}

if ready; then
	echo "$PY"
	exit 0
fi

# apt_get installs Debian packages when this is root (or has sudo) on a
# machine with apt-get, as CI's clean machines are; false otherwise.
apt_get() {
	command -v apt-get >/dev/null 2>&1 || return 1
	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || return 1
		sudo=(sudo)
	fi
	echo "python.sh: apt-get install $*" >&2
	"${sudo[@]}" apt-get update -qq </dev/null >&2 &&
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" </dev/null >&2
}

if ! command -v python3 >/dev/null 2>&1 && ! apt_get python3 python3-venv; then
	echo "python.sh: python3 is not installed; install Python 3.9 or newer (Debian: apt-get install python3 python3-venv)" >&2
	exit 1
fi
mkdir -p "$CACHE"
if [ ! -x "$PY" ]; then
	echo "python.sh: making a virtual environment in $VENV" >&2
	if ! python3 -m venv "$VENV" >&2 && ! { rm -rf "$VENV" && apt_get python3-venv && python3 -m venv "$VENV" >&2; }; then
		rm -rf "$VENV"
		echo "python.sh: python3 -m venv failed; install the venv module (Debian: apt-get install python3-venv)" >&2
		exit 1
	fi
fi
pip() { "$PY" -m pip --disable-pip-version-check -q "$@" >&2; }

echo "python.sh: installing thrift and grpcio-tools from PyPI" >&2
if ! pip install "thrift==$THRIFT_VERSION"; then
	echo "python.sh: thrift==$THRIFT_VERSION did not install; trying the newest thrift" >&2
	if ! pip install --upgrade thrift; then
		echo "python.sh: pip could not install thrift; see the errors above" >&2
		exit 1
	fi
fi
if ! pip install grpcio-tools; then
	echo "python.sh: pip could not install grpcio-tools; see the errors above" >&2
	exit 1
fi
if ! ready; then
	echo "python.sh: thrift and grpcio-tools installed but do not import in $VENV" >&2
	exit 1
fi
echo "$PY"
