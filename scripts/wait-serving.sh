# shellcheck shell=bash
# Sourced by the check scripts that start `inlet serve` in the background:
# wait_serving LOG PID waits (up to 30 s) until the server logging to LOG
# says where it serves and answers /readyz there, then sets addr (host:port
# of its HTTP listener) and brokers (its Kafka brokers, from the same line:
# the development broker's address when it runs one). On failure it prints
# LOG and calls die (the sourcing script's) with the reason.
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
