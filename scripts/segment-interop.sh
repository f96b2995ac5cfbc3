#!/usr/bin/env bash
# The Segment tracking API against real SDKs, unmodified, from their
# registries: installs segment-analytics-python and rudder-sdk-python
# (PyPI, a venv under .cache), @segment/analytics-node,
# @rudderstack/rudder-sdk-node and @segment/analytics-next (npm ci in
# interop/segment/node) and Segment's Go SDK (interop/segment/go, a module of
# its own), then runs interop/segment/e2e (each SDK's calls in Kafka once, a
# wrong write key refused, a 20 s Kafka outage with --ack kafka, nothing
# lost) and the browser library in headless Chromium
# (interop/segment/node/browser.test.mjs).
#
# Uses the Kafka of INLET_TEST_BROKERS (and INLET_TEST_KAFKA_SCRIPT for the
# outage's private broker) when scripts/test.sh set them, else starts
# scripts/services.sh's own and stops it at the end.
#
# Usage: scripts/segment-interop.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CACHE="${INLET_CACHE:-$REPO/.cache}"
DIR="$REPO/interop/segment"
mkdir -p "$CACHE"
start=$(date +%s)

# Python: a venv of its own, made again when requirements.txt changes.
VENV="$CACHE/segment-py"
PY="$VENV/bin/python"
sum="$(sha256sum "$DIR/python/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$VENV/.requirements" 2>/dev/null)" != "$sum" ]; then
	echo "segment-interop.sh: installing the Python SDKs in $VENV" >&2
	rm -rf "$VENV"
	if ! python3 -m venv "$VENV" >&2; then
		if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
			rm -rf "$VENV"
			apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2
			python3 -m venv "$VENV" >&2
		else
			echo "segment-interop.sh: python3 -m venv failed; install python3-venv" >&2
			exit 1
		fi
	fi
	"$PY" -m pip --disable-pip-version-check -q install -r "$DIR/python/requirements.txt" >&2
	echo "$sum" >"$VENV/.requirements"
fi

# Node: npm ci when package-lock.json changed since the last one.
sum="$(sha256sum "$DIR/node/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$DIR/node/node_modules/.inlet-lock" 2>/dev/null)" != "$sum" ]; then
	echo "segment-interop.sh: npm ci in interop/segment/node" >&2
	(cd "$DIR/node" && npm ci --no-audit --no-fund --loglevel=error >&2)
	echo "$sum" >"$DIR/node/node_modules/.inlet-lock"
fi

# Go: the SDK's module (the test builds the driver).
(cd "$DIR/go" && go mod download)

CHROMIUM="$(scripts/chromium.sh)"
BIN="$CACHE/inlet-segment-test"
go build -o "$BIN" ./cmd/inlet

if [ -z "${INLET_TEST_BROKERS:-}" ]; then
	trap 'scripts/services.sh stop' EXIT
	eval "$(scripts/services.sh start)"
	export INLET_TEST_BROKERS="$INLET_KAFKA_BROKERS" INLET_TEST_REQUIRE_KAFKA=1
	export INLET_TEST_KAFKA_SCRIPT="$REPO/scripts/kafka.sh"
fi
echo "segment-interop.sh: installed in $(($(date +%s) - start)) s" >&2

export INLET_TEST_SEGMENT_SDKS=1 INLET_SEGMENT_PYTHON="$PY"
# The browser test beside the Go one (its outage phase mostly waits).
(cd "$DIR/node" && CHROMIUM="$CHROMIUM" INLET_BIN="$BIN" node --test --test-reporter=spec browser.test.mjs) >"$CACHE/segment-browser.log" 2>&1 &
browser=$!
status=0
go test -count=1 -v -timeout 10m -run 'TestSegmentSDKs' ./interop/segment/e2e/ >"$CACHE/segment-sdks.log" 2>&1 || status=1
wait "$browser" || status=1
if [ "$status" != 0 ]; then
	cat "$CACHE/segment-sdks.log" "$CACHE/segment-browser.log" >&2
	echo "segment-interop.sh: FAILED (logs above)" >&2
	exit 1
fi
grep -E '^(=== RUN|--- |ok|PASS|FAIL)|outage: ' "$CACHE/segment-sdks.log" >&2
grep -E 'analytics-next|^# (tests|pass|fail)|^ℹ (tests|pass|fail)' "$CACHE/segment-browser.log" >&2 || true
echo "segment-interop.sh: done in $(($(date +%s) - start)) s" >&2
