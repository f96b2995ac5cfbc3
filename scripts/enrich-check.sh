#!/usr/bin/env bash
# Runs docs/enrichment.md's runnable blocks as written: the first (from the
# repository) writes city.mmdb; `inlet serve` starts with the flags the page
# gives, on its development broker (free ports); the second runs with INLET
# and BROKERS set; then checks what it printed. About 15 s with the build
# cached.
#
# Usage: scripts/enrich-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
page=docs/enrichment.md
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
command -v curl >/dev/null 2>&1 || die "need curl"

check_setup enrich-check.sh

scripts/doc-commands.sh "$page" >"$work/all.sh"
# The first block runs in the repository (go run), writing city.mmdb there:
# it is moved to the work directory.
sed -n '1p' "$work/all.sh" >"$work/write.sh"
sed '1d' "$work/all.sh" >"$work/rest.sh"
grep -q 'mkcitydb' "$work/write.sh" || die "$page: the first runnable block is not mkcitydb's"
bash -euo pipefail "$work/write.sh" >"$work/write.out" 2>&1 || {
	cat "$work/write.out" >&2
	die "$page: the first runnable block failed"
}
mv city.mmdb "$work/city.mmdb"

# The flags of the page's (unmarked) serve block, with free ports.
flags="$(sed -n '/^inlet serve --parse-ua --geoip-db city.mmdb/,/^```/p' "$page" | sed '$d' | tr -d '\\\n' | sed 's/^inlet serve//')"
[ -n "$flags" ] || die "$page: no 'inlet serve --parse-ua --geoip-db city.mmdb' block"
eval "serve_bg $flags"

(cd "$work" && INLET="http://$addr" BROKERS="$brokers" timeout 120 bash -euo pipefail rest.sh) >"$work/out" 2>&1 || {
	cat "$work/out" >&2
	die "$page: a runnable block failed"
}
# Every line of the page's output block after the answers must be in what
# the commands printed, each "..." standing for anything.
awk '/^The records \(cut/ { m = 1; next } m == 1 && /^```/ { m = 2; next } m == 2 && /^```/ { exit } m == 2' "$page" >"$work/want"
[ "$(wc -l <"$work/want")" -ge 6 ] || die "$page: no output block"
while IFS= read -r line; do
	found=
	IFS=$'\n' read -r -d '' -a parts < <(printf '%s' "$line" | sed 's/ *\.\.\. */\n/g' && printf '\0') || true
	while IFS= read -r got; do
		ok=1
		for p in "${parts[@]}"; do
			[ -z "$p" ] && continue
			[[ "$got" == *"$p"* ]] || { ok=; break; }
		done
		[ -n "$ok" ] && { found=1; break; }
	done <"$work/out"
	[ -n "$found" ] || { cat "$work/out" >&2; die "$page: no line like: $line"; }
done <"$work/want"
grep -q 'inlet_bot_requests_total{action="tagged"} 1' < <(curl -fs "http://$addr/metrics") || die "the bot is not counted"
echo "enrich-check.sh: $page ran as written" >&2
