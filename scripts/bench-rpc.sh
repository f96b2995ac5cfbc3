#!/usr/bin/env bash
# Request-reply benchmark (issue 5), one run per reply mode (kafka, redis):
#   1. a worker whose work takes a uniform 3-5 s, 4,000 calls/s offered for
#      60 s (about 16,000 calls in flight): success ratio, p99, and the
#      gateway's memory per call in flight (RSS growth over idle / peak);
#   2. a worker with no delay, 1,000 calls/s for 20 s: p99;
#   3. the 3-5 s worker at 1,500 calls/s for 20 s from a generator that
#      shares no code with inlet (scripts/rpcload: one HTTP/1.1 connection
#      per call, about 6,000 open at once), the gateway with its default
#      flags: the share answered by the worker (200 with the call's body)
#      and what the others got.
# Everything runs on this machine: the gateway (inlet serve) on core 0 with
# GOMAXPROCS=1; Kafka, Redis, the worker and the load generator
# (inlet bench rpc, over h2c) on core 1. Loopback only.
#
# Each row also gives the CPU each process used over the run (warmup and
# the last answers included), in % of one core: on this machine core 1 is
# shared by Kafka, Redis, the worker and the generator, and is what runs
# out first.
#
# Usage: scripts/bench-rpc.sh     (env: RATE=4000 DURATION=60s ZRATE=1000 ZDURATION=20s H1RATE=1500 H1DURATION=20s
#                                  MODES="kafka redis" CASES="slow zero h1"
#                                  SERVE_ARGS, WORKER_ARGS: extra flags of inlet serve and inlet worker;
#                                  INLET_BIN: a binary to run instead of building this tree's)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
RATE="${RATE:-4000}"
DURATION="${DURATION:-60s}"
ZRATE="${ZRATE:-1000}"
ZDURATION="${ZDURATION:-20s}"
H1RATE="${H1RATE:-1500}"
H1DURATION="${H1DURATION:-20s}"
MODES="${MODES:-kafka redis}"
CASES="${CASES:-slow zero h1}"
WORK="$(mktemp -d)"
OUT="${BENCH_OUT:-$WORK}"
mkdir -p "$OUT"
export KAFKA_DIR="$WORK/kafka" REDIS_DIR="$WORK/redis"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

log() { echo "bench-rpc: $*" >&2; }
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	scripts/kafka.sh stop >/dev/null 2>&1 || true
	scripts/redis.sh stop >/dev/null 2>&1 || true
	[ "$OUT" = "$WORK" ] || rm -rf "$WORK/kafka" "$WORK/redis"
}
trap cleanup EXIT

if [ -n "${INLET_BIN:-}" ]; then
	INLET="$INLET_BIN"
else
	log "building inlet"
	CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet
	INLET="$WORK/inlet"
fi
CGO_ENABLED=0 go build -o "$WORK/rpcload" scripts/rpcload/main.go
BROKERS="$(taskset -c 1 scripts/kafka.sh start | tail -n 1)"
REDIS="$(taskset -c 1 scripts/redis.sh start | tail -n 1)"
log "kafka $BROKERS, redis $REDIS, load $(cut -d' ' -f1-3 /proc/loadavg)"
KAFKA_PID="$(cat "$KAFKA_DIR"/*.pid 2>/dev/null | head -n 1 || true)"
REDIS_PID="$(cat "$REDIS_DIR"/*.pid 2>/dev/null | head -n 1 || true)"

# ticks PID: CPU time of PID so far, in clock ticks (0 if it is gone), in
# TICKS. No subprocess: it runs while the benchmark does.
ticks() {
	local f
	TICKS=0
	if [ -r "/proc/$1/stat" ] && read -r -a f <"/proc/$1/stat"; then TICKS=$((f[13] + f[14])); fi
}

# run_case MODE NAME MIN MAX RATE DURATION WARMUP [GEN]
# GEN: h2c (inlet bench rpc over 16 h2c connections, --http2-max-streams
# 2000 for its 16,000 streams) or h1 (scripts/rpcload, the gateway's
# default flags).
run_case() {
	local mode=$1 name=$2 min=$3 max=$4 rate=$5 dur=$6 warm=$7 genkind=${8:-h2c}
	local port=$((18900 + RANDOM % 500)) svc="bench${RANDOM}" extra=()
	[ "$genkind" = h1 ] || extra=(--rpc-max-in-flight 50000 --http2-max-streams 2000)
	taskset -c 0 env GOMAXPROCS=1 ${INLET_GOGC:+GOGC=$INLET_GOGC} "$INLET" serve --listen "127.0.0.1:$port" --brokers "$BROKERS" \
		--data-dir "$WORK/data-$name" --rpc-services "$svc" --reply "$mode" --redis "$REDIS" \
		"${extra[@]}" --log-level warn ${SERVE_ARGS:-} >"$OUT/serve-$name.log" 2>&1 &
	local serve=$!
	PIDS+=("$serve")
	taskset -c 1 "$INLET" worker --service "$svc" --brokers "$BROKERS" --redis "$REDIS" --concurrency 30000 \
		--echo --min-delay "$min" --max-delay "$max" --log-level warn ${WORKER_ARGS:-} >"$OUT/worker-$name.log" 2>&1 &
	local worker=$!
	PIDS+=("$worker")
	# Wait until a call is answered: the worker's group is assigned.
	for _ in $(seq 1 120); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Inlet-Timeout: 8s' -d ping "http://127.0.0.1:$port/v1/rpc/$svc" || true)
		[ "$code" = 200 ] && break
		sleep 0.5
	done
	[ "$code" = 200 ] || { log "$name: no worker answered"; return 1; }
	sleep 6 # let the probes' replies and the idle state settle
	log "$name: $rate calls/s for $dur (worker delay $min-$max, $genkind)"
	if [ "$genkind" = h1 ]; then
		taskset -c 1 "$WORK/rpcload" -url "http://127.0.0.1:$port/v1/rpc/$svc" -rate "$rate" -duration "$dur" \
			-rpc-timeout 10s -timeout 12s >"$OUT/rpc-$name.json" 2>"$OUT/rpc-$name.err" &
	else
		taskset -c 1 "$INLET" bench rpc --target "http://127.0.0.1:$port" --service "$svc" --rate "$rate" \
			--duration "$dur" --warmup "$warm" --rpc-timeout 10s --timeout 12s --connections 30000 \
			--h2-conns 16 --json "$OUT/rpc-$name.json" --html "$OUT/rpc-$name.html" >"$OUT/rpc-$name.txt" 2>"$OUT/rpc-$name.err" &
	fi
	local gen=$! t0 t1 pids=("$serve" "${KAFKA_PID:-0}" "$worker" "" "${REDIS_PID:-0}") before=() after=() cpu=""
	pids[3]=$gen
	t0=$(date +%s.%N)
	for p in "${pids[@]}"; do
		ticks "$p"
		before+=("$TICKS")
	done
	# The generator's ticks are read just before it exits: poll.
	local last_gen=0
	while kill -0 "$gen" 2>/dev/null; do
		ticks "$gen"
		last_gen=$TICKS
		sleep 1
	done
	wait "$gen"
	t1=$(date +%s.%N)
	for p in "${pids[@]}"; do
		ticks "$p"
		after+=("$TICKS")
	done
	after[3]=$last_gen
	local hz
	hz=$(getconf CLK_TCK)
	for i in 0 1 2 3 4; do
		cpu+="$(awk -v a="${before[$i]}" -v b="${after[$i]}" -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN { printf "%.0f", 100 * (b - a) / hz / (t1 - t0) }')"
		[ "$i" = 4 ] || cpu+=" / "
	done
	local rss_kb
	rss_kb="$(awk '/VmHWM/ {print $2}' "/proc/$serve/status")"
	curl -s "http://127.0.0.1:$port/metrics" >"$OUT/metrics-$name.txt" || true
	kill "$worker" "$serve"
	wait "$worker" "$serve" 2>/dev/null || true
	python3 - "$OUT/rpc-$name.json" "$mode" "$name" "$min-$max" "$rss_kb" "$cpu" "$genkind" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if sys.argv[7] == "h1":
    l, st = r["latency_ms"], r["statuses"]
    others = ", ".join(f"{k}: {v}" for k, v in sorted(st.items()) if k != "200") or "none"
    errs = ", ".join(f"{k}: {v}" for k, v in sorted(r["errors"].items())) or "none"
    print(f"| {sys.argv[2]} (h1, a connection per call, default flags) | {sys.argv[4]} | {r['rate']:.0f} | {r['calls']} | "
          f"{100*r['answered_by_worker']/r['calls']:.3f}% (other statuses {others}; errors {errs}) | - | "
          f"{l['p50']:.1f} | {l['p99']:.1f} | {l['max']:.1f} | - | - | - | {int(sys.argv[5])/1024:.1f} | - | {sys.argv[6]} |")
    sys.exit(0)
s = r.get("server") or {}
l = r["latency"]
per = s.get("bytes_per_in_flight", 0) / 1024
print(f"| {sys.argv[2]} | {sys.argv[4]} | {r['rate']:.0f} | {r['requests']} | {100*r['success_ratio']:.3f}% | {r['dropped']} | "
      f"{l['p50_ms']:.1f} | {l['p99_ms']:.1f} | {l['max_ms']:.1f} | {s.get('in_flight_peak', 0)} | "
      f"{s.get('rss_idle_bytes', 0)/2**20:.1f} | {s.get('rss_peak_bytes', 0)/2**20:.1f} | {int(sys.argv[5])/1024:.1f} | {per:.1f} | {sys.argv[6]} |")
PY
}

printf '| reply | worker delay | offered calls/s | calls | success | dropped | p50 ms | p99 ms | max ms | in flight peak | RSS idle MiB | RSS peak MiB | VmHWM MiB | KiB per call in flight | CPU %% gateway / kafka / worker / generator / redis |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for mode in $MODES; do
	for c in $CASES; do
		case $c in
		slow) run_case "$mode" "$mode-slow" 3s 5s "$RATE" "$DURATION" 5s ;;
		zero) run_case "$mode" "$mode-zero" 0s 0s "$ZRATE" "$ZDURATION" 5s ;;
		h1) run_case "$mode" "$mode-h1" 3s 5s "$H1RATE" "$H1DURATION" 0s h1 ;;
		esac
	done
done
log "reports in $OUT"
