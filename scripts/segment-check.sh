#!/usr/bin/env bash
# Runs docs/segment.md's runnable block as written against `inlet serve
# --auth` on its development broker (free ports), with WRITE_KEY a client's
# secret, and checks the answer. About 10 s with the build cached.
#
# Usage: scripts/segment-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
page=docs/segment.md
die() {
	printf 'segment-check.sh: error: %s\n' "$*" >&2
	exit 1
}
command -v curl >/dev/null 2>&1 || die "need curl"

work="$(mktemp -d)"
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin"
go build -o "$work/bin/inlet" ./cmd/inlet
export PATH="$work/bin:$PATH"

key="$(cd "$work" && inlet clients add --file clients.json web 2>/dev/null | head -1)"
(cd "$work" && exec inlet serve --listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 --data-dir "$work/data" \
	--clients clients.json --auth >"$work/serve.log" 2>&1) &
pid=$!
addr=
for _ in $(seq 300); do
	addr="$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$work/serve.log" | head -1)"
	[ -n "$addr" ] && curl -fs -o /dev/null "http://$addr/readyz" && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "inlet serve exited"; }
	sleep 0.1
done
curl -fs -o /dev/null "http://$addr/readyz" || { cat "$work/serve.log" >&2; die "inlet serve not ready after 30 s"; }

scripts/doc-commands.sh "$page" >"$work/run.sh"
(cd "$work" && INLET="http://$addr" WRITE_KEY="$key" timeout 60 bash -euo pipefail run.sh) >"$work/out" 2>&1 || {
	cat "$work/out" >&2
	die "$page: a runnable block failed"
}
for want in '"success":true' '"accepted":2' '"index":2' 'a track needs \"event\"'; do
	grep -qF "$want" "$work/out" || { cat "$work/out" >&2; die "$page: no $want in what the commands printed"; }
done
echo "segment-check.sh: $page ran as written"
