#!/usr/bin/env bash
# Checks what operators run inlet with (docs/operating.md):
#   - the Prometheus rules: promtool check rules, promtool test rules;
#   - the Grafana dashboard: valid JSON, no data-source UID written in, and
#     every panel's PromQL parsed by promtool (as recording rules);
#   - every alert's runbook link has its section in docs/operating.md;
#   - a live gateway's /metrics: promtool check metrics (and /readyz), through
#     docs/operating.md's runnable blocks, run as written;
#   - Debian's Prometheus server scraping that gateway every second with the
#     rules loaded: every rule evaluates without error, no alert fires on
#     the healthy gateway, every dashboard query answers without error
#     (scripts/ops-check.py).
# That every metric the rules and the dashboard read exists is
# TestOpsMetricsExist (internal/gateway), in go test.
#
# promtool and the server come from Debian's prometheus package (2.42 on
# Debian 12), installed when missing: without recommends, and kept from
# starting the server as a service. About 20 s with the package installed
# and the build cached, 20 s more to install it.
#
# Usage: scripts/ops-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=scripts/check-lib.sh
. scripts/check-lib.sh
log() { printf 'ops-check.sh: %s\n' "$*" >&2; }
die() {
	printf 'ops-check.sh: error: %s\n' "$*" >&2
	exit 1
}

need=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || die "need Debian's ${need[*]} (apt-get install ${need[*]}), or run as root to have them installed"
	command -v apt-get >/dev/null 2>&1 || die "need ${need[*]}, and there is no apt-get to install them"
	log "apt-get install ${need[*]}"
	# The prometheus package's postinst starts the server through
	# invoke-rc.d (or deb-systemd-invoke), which obey policy-rc.d: 101
	# forbids it.
	policy=/usr/sbin/policy-rc.d
	made_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		made_policy=1
	fi
	rc=0
	apt-get update -qq </dev/null >&2 || rc=$?
	[ "$rc" -ne 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >&2 || rc=$?
	[ "$made_policy" -eq 0 ] || rm -f "$policy"
	[ "$rc" -eq 0 ] || die "apt-get install ${need[*]} failed"
	# The package enables the server at boot: this machine only needs it
	# for the check below, which starts its own.
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	fi
fi
log "$(promtool --version 2>&1 | head -1)"

rules=deploy/prometheus/inlet.rules.yml
dash=deploy/grafana/inlet.json
page=docs/operating.md

log "promtool check rules, promtool test rules"
promtool check rules "$rules" >&2
(cd deploy/prometheus && promtool test rules inlet.rules.test.yml) >&2

log "the dashboard: JSON, data sources, PromQL"
work="$(mktemp -d)"
pid=
prom=
cleanup() {
	for p in $prom $pid; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
# Each query becomes a recording rule, so that promtool parses it.
python3 scripts/ops-check.py dashboard-rules "$dash" >"$work/dashboard.rules.yml"
promtool check rules "$work/dashboard.rules.yml" >&2

log "runbook links and $page's sections"
missing=0
while read -r anchor; do
	if ! grep -qix "### ${anchor}" "$page"; then
		log "$rules: runbook #$anchor has no section '### ...' in $page"
		missing=1
	fi
done < <(grep -o 'docs/operating.md#[a-z0-9-]*' "$rules" | cut -d'#' -f2 | sort -u)
[ "$missing" -eq 0 ] || die "runbook links without a section"

log "a live gateway: $page's runnable blocks (/readyz, promtool check metrics)"
mkdir -p .cache
go build -o .cache/ops-inlet ./cmd/inlet
./.cache/ops-inlet clients add --file "$work/clients.json" shop >/dev/null 2>&1
./.cache/ops-inlet serve --listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 --data-dir "$work/data" \
	--rpc-services echo --clients "$work/clients.json" >"$work/serve.log" 2>&1 &
pid=$!
wait_serving "$work/serve.log" "$pid"
curl -fs -o /dev/null -H 'Content-Type: application/json' -d '[{"event":"ops_check"}]' "http://$addr/v1/batch"
INLET="http://$addr" bash -euo pipefail <(scripts/doc-commands.sh "$page") >"$work/doc.out" || {
	cat "$work/doc.out" >&2
	die "$page: a runnable block failed"
}
grep -q '"ready":true' "$work/doc.out" || { cat "$work/doc.out" >&2; die "$page: /readyz did not say ready"; }

log "Prometheus scraping the gateway with the rules loaded"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$REPO/$rules"]
scrape_configs:
  - job_name: inlet
    static_configs: [{targets: ["$addr"]}]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
	--web.listen-address="127.0.0.1:$port" >"$work/prometheus.log" 2>&1 &
prom=$!
python3 scripts/ops-check.py prometheus "http://127.0.0.1:$port" "http://$addr" "$dash" || {
	tail -20 "$work/prometheus.log" >&2
	die "Prometheus: see above"
}
log "ok"
