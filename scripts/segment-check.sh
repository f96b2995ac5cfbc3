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
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
command -v curl >/dev/null 2>&1 || die "need curl"

check_setup segment-check.sh

key="$(cd "$work" && inlet clients add --file clients.json web 2>/dev/null | head -1)"
serve_bg --clients clients.json --auth

scripts/doc-commands.sh "$page" >"$work/run.sh"
(cd "$work" && INLET="http://$addr" WRITE_KEY="$key" timeout 60 bash -euo pipefail run.sh) >"$work/out" 2>&1 || {
	cat "$work/out" >&2
	die "$page: a runnable block failed"
}
for want in '"success":true' '"accepted":2' '"index":2' 'a track needs \"event\"'; do
	grep -qF "$want" "$work/out" || { cat "$work/out" >&2; die "$page: no $want in what the commands printed"; }
done
echo "segment-check.sh: $page ran as written"
