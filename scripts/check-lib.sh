# shellcheck shell=bash
# Sourced by the scripts that check a docs page against a running `inlet
# serve` (scripts/*-check.sh). After `. scripts/check-lib.sh`:
#
#   check_setup NAME   die prints "NAME: error: ..."; work is a new
#                      directory, removed on exit with the server serve_bg
#                      started; inlet is built into $work/bin, first on PATH
#   serve_bg ARGS...   runs `inlet serve ARGS` in $work on free ports (its
#                      development broker unless ARGS name --brokers), its
#                      log in $work/serve.log, and waits until it serves
#   wait_serving LOG PID
#                      waits (up to 30 s) until the server logging to LOG
#                      says where it serves and answers /readyz there, then
#                      sets addr (host:port of its HTTP listener) and
#                      brokers (its Kafka brokers, from the same line: the
#                      development broker's address when it runs one). On
#                      failure it prints LOG and calls die with the reason.
#
# A script may define its own die and cleanup after check_setup.
check_name="${0##*/}"
die() {
	printf '%s: error: %s\n' "$check_name" "$*" >&2
	exit 1
}

check_cleanup() {
	if [ -n "${pid:-}" ]; then
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	fi
	rm -rf "$work"
}

check_setup() {
	check_name="$1"
	work="$(mktemp -d)"
	pid=
	trap check_cleanup EXIT
	mkdir -p "$work/bin"
	go build -o "$work/bin/inlet" ./cmd/inlet
	export PATH="$work/bin:$PATH"
}

serve_bg() {
	(cd "$work" && exec inlet serve --listen 127.0.0.1:0 --broker-listen 127.0.0.1:0 --data-dir "$work/data" "$@" >"$work/serve.log" 2>&1) &
	pid=$!
	wait_serving "$work/serve.log" "$pid"
}

wait_serving() {
	local log="$1" pid="$2"
	addr=
	for _ in $(seq 300); do
		addr="$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$log" | head -1)"
		[ -n "$addr" ] && curl -fs -o /dev/null "http://$addr/readyz" && break
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "inlet serve exited"; }
		sleep 0.1
	done
	curl -fs -o /dev/null "http://$addr/readyz" || { cat "$log" >&2; die "inlet serve not ready after 30 s"; }
	# shellcheck disable=SC2034 # for the sourcing script
	brokers="$(sed -n 's/.*msg=serving .* brokers=\[\([^] ]*\)\].*/\1/p' "$log" | head -1)"
}
