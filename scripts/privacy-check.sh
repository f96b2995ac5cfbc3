#!/usr/bin/env bash
# Runs docs/privacy.md's runnable blocks as written against `inlet serve
# --auth --redact-key-file` on its development broker (free ports): the
# first block writes the key and the clients file, inlet starts with them,
# the second runs with INLET and BROKERS set; then checks what it printed:
# the truncated address, no address where the policy drops it, the e-mail
# address hashed as openssl hashes it, the phone number gone. About 10 s
# with the build cached.
#
# Usage: scripts/privacy-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
page=docs/privacy.md
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
for tool in curl openssl; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		apt-get install -y "$tool" >/dev/null 2>&1 || die "need $tool"
	fi
done

check_setup privacy-check.sh

scripts/doc-commands.sh "$page" >"$work/all.sh"
# The first block ends with the last `inlet clients add` (its line and
# the continuation after it); inlet starts between it and the second.
n="$(grep -n 'crm.secret$' "$work/all.sh" | head -1 | cut -d: -f1)"
[ -n "$n" ] || die "$page: the first runnable block does not add client crm"
head -n "$n" "$work/all.sh" >"$work/write.sh"
tail -n "+$((n + 1))" "$work/all.sh" >"$work/rest.sh"
(cd "$work" && bash -euo pipefail write.sh) >"$work/write.out" 2>&1 || {
	cat "$work/write.out" >&2
	die "$page: the first runnable block failed"
}

serve_bg --clients clients.json --auth --redact-key-file redact.key

(cd "$work" && INLET="http://$addr" BROKERS="$brokers" timeout 120 bash -euo pipefail rest.sh) >"$work/out" 2>&1 || {
	cat "$work/out" >&2
	die "$page: a runnable block failed"
}
fail() {
	cat "$work/out" >&2
	die "$page: $*"
}
hash="$(sed -n 's/^.*= \([0-9a-f]\{64\}\)$/\1/p' "$work/out")"
[ -n "$hash" ] || fail "no HMAC from openssl"
[ "$(grep -c '"accepted":1' "$work/out")" = 3 ] || fail "want 3 answers of 1 accepted event"
grep '"uid":"u1"' "$work/out" | grep -qF '"ip":"127.0.0.0"' || fail "u1's address is not truncated to 127.0.0.0"
grep '"uid":"u2"' "$work/out" | grep -q '"ip"' && fail "u2 (X-IP-Policy: drop) has an address"
u3="$(grep '"uid":"u3"' "$work/out")" || fail "no record of u3"
grep -q '"ip"' <<<"$u3" && fail "u3 (crm, drop; X-IP-Policy: keep ignored) has an address"
grep -qF '"email":"'"$hash"'"' <<<"$u3" || fail "u3's e-mail address is not openssl's HMAC $hash"
grep -qF -e '+32' -e 'ann@example.com' <<<"$u3" && fail "u3 holds the phone number or the e-mail address"
grep -qF '127.0.0.1' "$work/out" && fail "a full address in what the commands printed"
[ -n "${PRIVACY_CHECK_SHOW:-}" ] && cat "$work/out"
echo "privacy-check.sh: $page ran as written" >&2
