#!/usr/bin/env bash
# What shared rates cost a request: inlet serve --ack none --auth with one
# client whose rate every request passes (1,000,000 events/s), its rate
# kept locally (--rate-limit-store local) or in Redis on loopback (redis),
# under inlet bench http, open loop at RATE requests/s (0: closed loop,
# CONCURRENCY workers back to back). The server runs on core 0
# (GOMAXPROCS=1), the load generator and Redis on core 1; ROUNDS
# interleaved rounds (local, redis, local, ...), each store's medians.
#
# Usage: BROKERS=host:port scripts/bench-ratelimit.sh   (default: $INLET_TEST_BROKERS)
# Environment: ROUNDS (3), DURATION (10s), RATE (2000), CONCURRENCY
# (connections, 50), RATE_TIMEOUT
# (--rate-limit-timeout, 5ms), OUT (a temp dir).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BROKERS="${BROKERS:-${INLET_TEST_BROKERS:-}}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10s}"
CONCURRENCY="${CONCURRENCY:-50}"
RATE_TIMEOUT="${RATE_TIMEOUT:-5ms}"
RATE="${RATE:-2000}"
OUT="${OUT:-$(mktemp -d)}"
log() { printf 'bench-ratelimit: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ -n "$BROKERS" ] || die "give BROKERS=host:port (a real Kafka)"
for tool in taskset jq curl redis-server redis-cli; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done

mkdir -p "$OUT"
(cd "$REPO" && go build -o "$OUT/inlet" ./cmd/inlet)
rm -f "$OUT/clients.json" "$OUT/rounds.jsonl"
"$OUT/inlet" clients add --file "$OUT/clients.json" bench --rate 1000000 --burst 1000000 >"$OUT/secret"
SECRET="$(tail -n 1 "$OUT/secret")"

# free_port: a loopback port nothing listens on.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}
RPORT="$(free_port)"
taskset -c 1 redis-server --bind 127.0.0.1 --port "$RPORT" --save "" --appendonly no --dir "$OUT" >"$OUT/redis.log" 2>&1 &
REDIS_PID=$!
SERVER_PID=
cleanup() {
	[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
	kill "$REDIS_PID" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis_cpu() { redis-cli -p "$RPORT" info cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f\n", s }'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"; }
HZ="$(getconf CLK_TCK)"

for r in $(seq 1 "$ROUNDS"); do
	for store in local redis; do
		port="$(free_port)"
		name="$store-$r"
		taskset -c 0 env GOMAXPROCS=1 "$OUT/inlet" serve --listen "127.0.0.1:$port" --brokers "$BROKERS" \
			--topic bench-ratelimit --ack none --auth --clients "$OUT/clients.json" \
			--redis "127.0.0.1:$RPORT" --rate-limit-store "$store" --rate-limit-timeout "$RATE_TIMEOUT" --data-dir "$OUT/data-$name" >"$OUT/$name.log" 2>&1 &
		SERVER_PID=$!
		for _ in $(seq 150); do curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break; sleep 0.2; done
		load=(taskset -c 1 "$OUT/inlet" bench http --target "http://127.0.0.1:$port/v1/batch"
			--header "Authorization: Bearer $SECRET" --connections "$CONCURRENCY" --rate "$RATE")
		"${load[@]}" --warmup 0s --duration 3s >/dev/null 2>&1 # warm up
		t0="$(ticks)" r0="$(redis_cpu)"
		"${load[@]}" --warmup 0s --duration "$DURATION" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1
		t1="$(ticks)" r1="$(redis_cpu)"
		fb="$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^inlet_auth_rate_limit_fallback_total / { print $2 }')"
		kill -TERM "$SERVER_PID"
		wait "$SERVER_PID" || true
		SERVER_PID=
		jq -c --arg s "$store" --argjson cpu "$(((t1 - t0) * 1000000 / HZ))" --argjson rcpu "$(awk -v a="$r0" -v b="$r1" 'BEGIN { printf "%.0f", (b - a) * 1000000 }')" --argjson fb "${fb:-0}" \
			'{store: $s, rps: .requests_per_s, p50: .latency.p50_ms, p99: .latency.p99_ms,
			  ok: .requests, cpu_us: ($cpu / .requests), redis_cpu_us: ($rcpu / .requests), fallbacks: $fb, codes: .status}' \
			"$OUT/$name.json" | tee -a "$OUT/rounds.jsonl"
	done
done
log "medians over $ROUNDS rounds (report files in $OUT):"
jq -s -r 'group_by(.store)[] | . as $g | def med(f): ([$g[] | f] | sort | .[(length / 2 | floor)]);
	"\($g[0].store): \(med(.rps) | floor) req/s, p50 \(med(.p50)) ms, p99 \(med(.p99)) ms, \(med(.cpu_us) * 10 | round / 10) µs CPU a request in inlet, \(med(.redis_cpu_us) * 10 | round / 10) µs in Redis, \(med(.fallbacks)) requests fell back"' \
	"$OUT/rounds.jsonl"
