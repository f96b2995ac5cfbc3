#!/usr/bin/env bash
# Installs Debian's chromium (for the browser tests of web/) when it is
# missing, and prints its path. Never a downloaded browser build: the
# package comes from the distribution's archive, like redis-server.
#
# Usage: scripts/chromium.sh
set -euo pipefail

for c in chromium chromium-browser; do
	if p="$(command -v "$c" 2>/dev/null)"; then
		echo "$p"
		exit 0
	fi
done
if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium.sh: chromium is not installed and apt-get is not available; install Chromium and put it on PATH" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
echo "chromium.sh: installing Debian's chromium" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-liberation >&2
command -v chromium
