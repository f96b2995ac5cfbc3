#!/usr/bin/env bash
# Runs the runnable blocks of README.md and docs/*.md as written, against
# `inlet serve` on its development broker, and checks what they print
# (docs/development.md, "The commands in the docs are run by a test").
#
# Builds inlet once, starts `inlet serve --rpc-services echo` with a fresh
# data directory on free ports, then runs each page's blocks
# (scripts/doc-commands.sh --expect) in a directory of its own, with the
# built inlet first on PATH, 127.0.0.1:8080 and 127.0.0.1:9092 (the
# addresses a reader has) replaced by the gateway's and the broker's, and
# INLET and BROKERS set to them. README.md runs first, on an empty topic.
# Pages whose blocks another script runs (it names the page and calls
# doc-commands.sh: routing-check.sh, ops-check.sh, ...) are left to it.
# Fails when a command exits non-zero or prints other than what its block
# shows, when README.md is over 300 lines, or when BENCHMARKS.md does not
# open with its table of current figures; warns of links to missing files. About 30 s with the build cached.
#
# Usage: scripts/docs-check.sh [PAGE.md...]    (default: every page)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
log() { printf 'docs-check.sh: %s\n' "$*" >&2; }
die() {
	printf 'docs-check.sh: error: %s\n' "$*" >&2
	exit 1
}
command -v curl >/dev/null 2>&1 || die "need curl"

# The pages: README.md first, then docs/*.md with a runnable block, less
# those another check script runs.
if [ $# -gt 0 ]; then
	pages=("$@")
else
	own="$(grep -l 'doc-commands\.sh' scripts/*.sh | grep -v -e '/docs-check\.sh$' -e '/doc-commands\.sh$' |
		xargs grep -oh 'docs/[A-Za-z0-9_-]*\.md' | sort -u)"
	pages=(README.md)
	for page in docs/*.md; do
		grep -q '^<!-- run -->' "$page" || continue
		if grep -qxF "$page" <<<"$own"; then
			log "$page: run by its own script"
			continue
		fi
		pages+=("$page")
	done
fi

# The shape the issue asks of the two files a newcomer opens first.
lines="$(wc -l <README.md)"
[ "$lines" -le 300 ] || die "README.md has $lines lines: a landing page has at most 300 (move the detail to docs/)"
first="$(grep -m1 '^## ' BENCHMARKS.md)"
[ "$first" = "## Current figures" ] || die "BENCHMARKS.md must open with '## Current figures' (its first section is '$first')"
sed -n '/^## Current figures$/,/^## /p' BENCHMARKS.md | grep '^| what | figure |' >/dev/null ||
	die "BENCHMARKS.md's '## Current figures' has no table of figures"
# Links to files that do not exist: a warning, since pages other branches
# add are linked before they are merged.
for page in README.md docs/*.md; do
	{ grep -o '\](\([^)#[:space:]]*\)[^)]*)' "$page" || true; } | sed 's/^](\([^)#]*\).*/\1/' | while read -r target; do
		case "$target" in "" | http://* | https://* | mailto:*) continue ;; esac
		[ -e "$(dirname "$page")/$target" ] || log "warning: $page links $target, which does not exist"
	done
done

work="$(mktemp -d)"
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin"
go build -o "$work/bin/inlet" ./cmd/inlet
export PATH="$work/bin:$PATH"

inlet serve --listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 --data-dir "$work/data" \
	--rpc-services echo >"$work/serve.log" 2>&1 &
pid=$!
wait_serving "$work/serve.log" "$pid"
log "inlet serve at $addr, its development broker at $brokers"

failed=()
for page in "${pages[@]}"; do
	name="$(basename "$page" .md)"
	dir="$work/pages/$name"
	mkdir -p "$dir"
	scripts/doc-commands.sh --expect "$page" |
		sed -e "s/127\.0\.0\.1:8080/$addr/g" -e "s/127\.0\.0\.1:9092/$brokers/g" >"$work/$name.sh"
	start=$SECONDS
	# A session of its own, so that whatever a page leaves running (a
	# worker started with &) is stopped with it.
	# setsid execs (the subshell leads no group), so the page's process
	# group is $spid: what is left in it after the page is killed.
	(cd "$dir" && INLET="http://$addr" BROKERS="$brokers" \
		exec setsid timeout 120 bash -euo pipefail "$work/$name.sh") >"$work/$name.out" 2>&1 &
	spid=$!
	rc=0
	wait "$spid" || rc=$?
	kill -- "-$spid" 2>/dev/null || true
	if [ "$rc" -ne 0 ]; then
		cat "$work/$name.out" >&2
		log "$page: FAILED (exit $rc); its commands are above"
		failed+=("$page")
	else
		log "$page: ran as written ($((SECONDS - start)) s)"
	fi
done
kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "inlet serve exited while the pages ran"; }
[ ${#failed[@]} -eq 0 ] || die "${#failed[@]} page(s) did not run as written: ${failed[*]}"
log "${#pages[@]} page(s) ran as written"
