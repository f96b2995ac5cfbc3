#!/usr/bin/env bash
# Runs docs/configuration.md's runnable blocks as written (from the
# repository's root, as the page says) with a freshly built inlet, and
# checks what they printed: --print-config's sources and the one-line
# refusals. Needs no service; a few seconds with the build cached.
#
# Usage: scripts/config-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
page=docs/configuration.md
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
check_setup config-check.sh

scripts/doc-commands.sh "$page" >"$work/all.sh"
timeout 60 bash -euo pipefail "$work/all.sh" >"$work/out" 2>&1 || {
	cat "$work/out" >&2
	die "$page: a runnable block failed"
}
# Every line of the page's answers (its plain ``` blocks) is printed as shown.
awk '/^```/ { if (open) open = 0; else { open = 1; plain = ($0 == "```") } next } open && plain' "$page" >"$work/shown"
[ -s "$work/shown" ] || die "$page: no answer shown"
while IFS= read -r want; do
	grep -qxF -- "$want" "$work/out" || { cat "$work/out" >&2; die "$page: no line '$want' in what the commands printed"; }
done <"$work/shown"
# The page's example file is the one it shows.
sed -n '/^```yaml$/,/^```$/p' "$page" | sed '1d;$d' >"$work/shown.yaml"
grep -v '^#' docs/inlet.example.yaml | diff -u - "$work/shown.yaml" >&2 || die "$page shows a different file than docs/inlet.example.yaml"
echo "config-check.sh: $page ran as written" >&2
