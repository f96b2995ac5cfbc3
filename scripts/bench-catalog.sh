#!/usr/bin/env bash
# The catalog's benchmarks for BENCHMARKS.md, in one run:
#   1. cached-hit inf.Data/DataType lookups over gRPC and Thrift against
#      `inlet catalog serve` and against the floors of the two RPC stacks
#      (cmd/noop: grpc-go and Thrift's TSimpleServer answering at once), in
#      a closed loop, interleaved rounds, medians, with the server's CPU time
#      per call; then an open loop of each at half inlet's median max rate;
#   2. ingest with --catalog (mode open, embedded store, names cached) against
#      without, and with --catalog --auth (Bearer session token), through
#      `inlet serve --ack kafka` on a real Kafka broker of its own, interleaved
#      rounds, medians.
#
# Pinning (this machine has 2 cores): the server under test on core 0 with
# GOMAXPROCS=1; the load generator (and Kafka) on core 1. Loopback only.
#
# Usage: scripts/bench-catalog.sh   (env: ROUNDS=3 DURATION=10s WARMUP=2s
#        GRPC_CONNS=4 THRIFT_CONNS=4 CONCURRENCY=64 KEYS=1000 HTTP_CONNS=64
#        EVENTS=5 SKIP_INGEST=)
# gRPC multiplexes the calls of a connection (fewer connections batch more
# answers per write); Thrift makes one call at a time per connection, so
# it needs as many connections as calls in flight.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-2s}"
GRPC_CONNS="${GRPC_CONNS:-${CONNS:-4}}"
THRIFT_CONNS="${THRIFT_CONNS:-${CONNS:-4}}"
CONCURRENCY="${CONCURRENCY:-64}"
KEYS="${KEYS:-1000}"
HTTP_CONNS="${HTTP_CONNS:-64}"
EVENTS="${EVENTS:-5}"
WORK="$(mktemp -d)"
export KAFKA_DIR="$WORK/kafka"

log() { echo "bench-catalog: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

log "building inlet"
CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet
CGO_ENABLED=0 go build -o "$WORK/noop" ./cmd/noop
I="$WORK/inlet"
PIDS=()
cleanup() {
	for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
	scripts/kafka.sh stop >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

"$I" clients add --file "$WORK/clients.json" bench >"$WORK/bench.secret" 2>/dev/null
head -c 48 /dev/urandom >"$WORK/token.key"

echo "## catalog lookups (cached hits), $(nproc) cores, $(uname -r), $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
taskset -c 0 env GOMAXPROCS=1 "$I" catalog serve --clients "$WORK/clients.json" --auth-token-key-file "$WORK/token.key" \
	--data-dir "$WORK/cat" --grpc-listen 127.0.0.1:19590 --thrift-listen 127.0.0.1:19591 --log-level warn >"$WORK/catalog.log" 2>&1 &
PIDS+=($!)
CAT_PID=$!
# The floors: inf.Data answered at once by grpc-go and Thrift's
# TSimpleServer with their defaults (cmd/noop), pinned the same way.
taskset -c 0 env GOMAXPROCS=1 "$WORK/noop" --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:19592 --thrift-listen 127.0.0.1:19593 >"$WORK/noop.log" 2>&1 &
PIDS+=($!)
NOOP_PID=$!
for port in 19591 19593; do
	for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
common=(--client-id bench --secret-file "$WORK/bench.secret" --keys "$KEYS")
conns() { if [ "$1" = grpc ]; then echo "$GRPC_CONNS"; else echo "$THRIFT_CONNS"; fi; }
port_of() { # server proto
	case "$1/$2" in
	inlet/grpc) echo 19590 ;; inlet/thrift) echo 19591 ;; floor/grpc) echo 19592 ;; floor/thrift) echo 19593 ;;
	esac
}
pid_of() { if [ "$1" = inlet ]; then echo "$CAT_PID"; else echo "$NOOP_PID"; fi; }
# cpu_ticks PID: user+system CPU time of PID, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ="$(getconf CLK_TCK)"
# The load generator shares core 1 with nothing else but may still be the
# limit (a gRPC client costs about as much as the server): the server's CPU
# time per call, and the one-core capacity it implies, read the server
# alone whether or not the generator saturated it.
# Fill the catalog first (first sight of each key is a store write), so
# that every round's prefill and load are cached hits.
taskset -c 1 "$I" bench grpc --target 127.0.0.1:19590 "${common[@]}" --connections 1 --concurrency 4 --duration 1s >/dev/null 2>&1
declare -A rps p99 cpu busy
for r in $(seq 1 "$ROUNDS"); do
	order="grpc thrift"
	[ $((r % 2)) -eq 0 ] && order="thrift grpc"
	for proto in $order; do
		servers="inlet floor"
		[ $((r % 2)) -eq 0 ] && servers="floor inlet"
		for srv in $servers; do
			k="$srv/$proto"
			f="$WORK/$srv-$proto-$r.json"
			t0="$(cpu_ticks "$(pid_of "$srv")")"
			taskset -c 1 "$I" bench "$proto" --target "127.0.0.1:$(port_of "$srv" "$proto")" "${common[@]}" --connections "$(conns "$proto")" \
				--concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" --json "$f" >/dev/null 2>&1
			t1="$(cpu_ticks "$(pid_of "$srv")")"
			calls="$(json "$f" "d['requests'] + d['warmup_requests'] + $KEYS")"
			secs="$(json "$f" "d['duration_s'] + d['warmup_s']")"
			rps[$k]+="$(json "$f" "d['requests_per_s']") "
			p99[$k]+="$(json "$f" "d['latency']['p99_ms']") "
			cpu[$k]+="$(echo "($t1 - $t0) / $HZ * 1000000 / $calls" | bc -l) "
			busy[$k]+="$(echo "($t1 - $t0) / $HZ / $secs * 100" | bc -l) "
			log "round $r $k: $(json "$f" "round(d['requests_per_s'])") lookups/s"
		done
	done
done
med() { echo "$1" | tr ' ' '\n' | grep . | median; }
printf '| server | | connections | lookups/s (closed loop, %s in flight, median of %s) | server CPU µs per call | one core at that cost, calls/s | server core busy | p99 ms | p99 ms at half that rate (open loop) | rounds (lookups/s) |\n|---|---|---|---|---|---|---|---|---|---|\n' "$CONCURRENCY" "$ROUNDS"
for proto in grpc thrift; do
	for srv in inlet floor; do
		k="$srv/$proto"
		m="$(med "${rps[$k]}")"
		c="$(med "${cpu[$k]}")"
		# The floor's open loop runs at inlet's half rate: the same load
		# for both, so that the generator's and the machine's share of the
		# p99 shows.
		[ "$srv" = inlet ] && half="$(printf '%.0f' "$(echo "$m / 2" | bc -l)")"
		taskset -c 1 "$I" bench "$proto" --target "127.0.0.1:$(port_of "$srv" "$proto")" "${common[@]}" --connections "$(conns "$proto")" --rate "$half" \
			--max-in-flight "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" --json "$WORK/$srv-$proto-half.json" >/dev/null 2>&1
		hp="$(printf '%.2f at %s/s' "$(json "$WORK/$srv-$proto-half.json" "d['latency']['p99_ms']")" "$half")"
		name="inlet catalog serve"
		[ "$srv" = floor ] && name="floor ($( [ "$proto" = grpc ] && echo grpc-go || echo TSimpleServer ), constant answer)"
		printf '| %s | %s | %s | %.0f | %.1f | %.0f | %.0f%% | %.2f | %s | %s |\n' "$name" "$proto" "$(conns "$proto")" "$m" "$c" \
			"$(echo "1000000 / $c" | bc -l)" "$(med "${busy[$k]}")" "$(med "${p99[$k]}")" "$hp" "$(echo "${rps[$k]}" | xargs printf '%.0f ')"
	done
done
echo "server peak RSS: $(awk '/VmHWM/ {print int($2/1024)" MB"}' "/proc/$CAT_PID/status")"
kill "$CAT_PID" "$NOOP_PID"; wait "$CAT_PID" "$NOOP_PID" 2>/dev/null || true

[ -n "${SKIP_INGEST:-}" ] && exit 0
echo
echo "## ingest with and without the catalog (--ack kafka, $EVENTS events of ~100 B per request)"
BROKERS="$(taskset -c 1 scripts/kafka.sh start | tail -n 1)"
body="["
for i in $(seq 1 "$EVENTS"); do
	[ "$i" -gt 1 ] && body+=","
	body+="{\"event\":\"page_view_$i\",\"uid\":\"user-$i\",\"props\":{\"path\":\"/products/12$i\",\"ref\":\"home\"}}"
done
body+="]"
printf '%s' "$body" >"$WORK/body.json"
declare -A irps
port=19600
for r in $(seq 1 "$ROUNDS"); do
	for mode in off catalog catalog+auth; do
		port=$((port + 1))
		args=(--ack kafka --brokers "$BROKERS" --topic "bench-cat" --data-dir "$WORK/d-$mode" --listen "127.0.0.1:$port" --log-level warn)
		hdr=()
		case $mode in
		catalog) args+=(--catalog) ;;
		catalog+auth)
			args+=(--catalog --auth --clients "$WORK/clients.json" --auth-token-key-file "$WORK/token.key")
			hdr=(--header "Authorization: Bearer $(cat "$WORK/bench.secret")")
			;;
		esac
		taskset -c 0 env GOMAXPROCS=1 "$I" serve "${args[@]}" >"$WORK/serve-$mode.log" 2>&1 &
		SP=$!
		PIDS+=($SP)
		for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
		taskset -c 1 "$I" bench http --target "http://127.0.0.1:$port/v1/batch" --method POST --body-file "$WORK/body.json" \
			--header 'Content-Type: application/json' "${hdr[@]}" --connections "$HTTP_CONNS" --concurrency "$HTTP_CONNS" \
			--events "$EVENTS" --duration "$DURATION" --warmup "$WARMUP" --json "$WORK/http-$mode-$r.json" >/dev/null 2>&1
		kill "$SP"; wait "$SP" 2>/dev/null || true
		irps[$mode]+="$(json "$WORK/http-$mode-$r.json" "d['requests_per_s']") "
		log "round $r $mode: $(json "$WORK/http-$mode-$r.json" "round(d['requests_per_s'])") req/s, ok $(json "$WORK/http-$mode-$r.json" "d['success_ratio']")"
	done
done
off="$(echo "${irps[off]}" | tr ' ' '\n' | grep . | median)"
printf '| ingest | req/s (median of %s) | vs off | rounds |\n|---|---|---|---|\n' "$ROUNDS"
for mode in off catalog catalog+auth; do
	m="$(echo "${irps[$mode]}" | tr ' ' '\n' | grep . | median)"
	printf '| %s | %.0f | %.2fx | %s |\n' "$mode" "$m" "$(echo "$m / $off" | bc -l)" "$(echo "${irps[$mode]}" | xargs printf '%.0f ')"
done
