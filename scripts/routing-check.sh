#!/usr/bin/env bash
# Runs docs/routing.md's runnable blocks as written against `inlet serve
# --routes` on its development broker (free ports): the first block writes
# routes.yaml, inlet starts with it, the others run with INLET and BROKERS
# set; then checks what they printed. About 10 s with the build cached.
#
# Usage: scripts/routing-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
page=docs/routing.md
command -v curl >/dev/null 2>&1 || die "need curl"

check_setup routing-check.sh

scripts/doc-commands.sh "$page" >"$work/all.sh"
# The first block writes the clients and routes files (up to the routes
# file's closing EOF); inlet starts between it and the others.
sed '/^EOF$/q' "$work/all.sh" >"$work/write.sh"
sed '1,/^EOF$/d' "$work/all.sh" >"$work/rest.sh"
(cd "$work" && bash -euo pipefail write.sh) >"$work/write.out" 2>&1 || {
	cat "$work/write.out" >&2
	die "$page: the first runnable block failed"
}

serve_bg --routes routes.yaml --clients clients.json --auth

(cd "$work" && INLET="http://$addr" BROKERS="$brokers" timeout 120 bash -euo pipefail rest.sh) >"$work/out" 2>&1 || {
	cat "$work/out" >&2
	die "$page: a runnable block failed"
}
for want in '"accepted":3' '"reason":"route_rule"' '"accepted":1' '"reason":"forbidden_topic"' 'key="o-1"' \
	'inlet-route="payments"' 'key="u2"' 'inlet-reason="forbidden_topic"' \
	'inlet_route_events_total{action="dropped",kind="rule",name="no-bots"} 1'; do
	grep -qF "$want" "$work/out" || { cat "$work/out" >&2; die "$page: no $want in what the commands printed"; }
done
echo "routing-check.sh: $page ran as written" >&2
