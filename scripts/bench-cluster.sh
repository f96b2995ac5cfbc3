#!/usr/bin/env bash
# What replication costs (issue 14): `inlet serve --ack kafka` and
# `--ack spool` req/s on a 3-node Kafka cluster (scripts/kafka-cluster.sh:
# replication 3, min.insync.replicas=2, acks=all) against a single broker
# (scripts/kafka.sh: replication 1), under the same load, in interleaved
# rounds, medians printed as one Markdown table for BENCHMARKS.md; then the
# failover figures (lost, duplicates, the longest time without a 2xx around
# each leader kill) from one run of the leader-kill scenario of
# internal/failover.
#
# Pinning (this machine has 2 cores): inlet on core 0 with GOMAXPROCS=1;
# the single broker, the cluster's three nodes and the load generator
# (`inlet bench http`, closed loop) on core 1. Both Kafkas run for the
# whole benchmark, so that each round measures the four set-ups
# back to back: single/kafka, cluster/kafka, single/spool, cluster/spool.
# Each run has a fresh data dir and a topic of its own.
#
# The failover run starts a cluster of its own (the benchmark's are stopped
# first) and is not pinned: it measures gaps, not throughput.
#
# Usage: scripts/bench-cluster.sh
# Environment: ROUNDS=3 DURATION=20s WARMUP=5s CONNS=100 EVENTS=5
#   EVENT_BYTES=100 FAILOVER=1 (0: skip the failover run)
#   BENCH_OUT=dir for the reports (default /tmp/inlet-bench-cluster-<time>)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-20s}"
WARMUP="${WARMUP:-5s}"
CONNS="${CONNS:-100}"
EVENTS="${EVENTS:-5}"
EVENT_BYTES="${EVENT_BYTES:-100}"
FAILOVER="${FAILOVER:-1}"
OUT="${BENCH_OUT:-/tmp/inlet-bench-cluster-$(date +%Y%m%d-%H%M%S)}"
WORK="$(mktemp -d)"
SINGLE_DIR="$WORK/kafka-single"
CLUSTER_DIR="$WORK/kafka-cluster"
mkdir -p "$OUT"

log() { echo "bench-cluster: $*" >&2; }
die() {
	echo "bench-cluster: error: $*" >&2
	exit 1
}
for tool in taskset jq curl; do
	command -v "$tool" >/dev/null || die "$tool is needed (Debian: apt-get install util-linux jq curl)"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number, not '$ROUNDS'"
[ "$(nproc --all)" -ge 2 ] || die "two cores are needed: inlet on core 0, Kafka and the load on core 1"

SERVER_PID=
stop_kafkas() {
	KAFKA_DIR="$SINGLE_DIR" scripts/kafka.sh stop >/dev/null 2>&1 || true
	KAFKA_DIR="$CLUSTER_DIR" scripts/kafka-cluster.sh cluster-stop >/dev/null 2>&1 || true
}
cleanup() {
	if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
	stop_kafkas
	rm -rf "$WORK"
}
trap cleanup EXIT

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
log "load average before: $LOAD_BEFORE; reports go to $OUT"
if awk '{ exit !($1 > 1) }' /proc/loadavg; then
	log "warning: the load average is $LOAD_BEFORE: other work on this machine will skew the figures"
fi
log "building inlet"
CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet

log "starting the single broker and the 3-node cluster on core 1"
declare -A BROKERS
BROKERS[single]="$(KAFKA_DIR="$SINGLE_DIR" taskset -c 1 scripts/kafka.sh start | tail -n 1)"
BROKERS[cluster]="$(KAFKA_DIR="$CLUSTER_DIR" taskset -c 1 scripts/kafka-cluster.sh cluster-start | sed -n 's/^PLAINTEXT=//p')"
[ -n "${BROKERS[single]}" ] || die "the single broker printed no address"
[ -n "${BROKERS[cluster]}" ] || die "the cluster printed no PLAINTEXT addresses"
log "single broker ${BROKERS[single]}; cluster ${BROKERS[cluster]}"

# start_server NAME PORT ARGS...: inlet serve ARGS on core 0 with
# GOMAXPROCS=1; waits until it is ready and has had one event acknowledged
# (so that the topic exists and has leaders: creating a replicated topic is
# not what is measured).
start_server() {
	local name="$1" port="$2" i
	shift 2
	taskset -c 0 env GOMAXPROCS=1 "$WORK/inlet" serve --listen "127.0.0.1:$port" "$@" >"$OUT/$name.log" 2>&1 &
	SERVER_PID=$!
	for ((i = 0; ; i++)); do
		curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break
		kill -0 "$SERVER_PID" 2>/dev/null || die "$name exited at start; see $OUT/$name.log"
		((i < 300)) || die "$name was not ready on port $port within 60 s; see $OUT/$name.log"
		sleep 0.2
	done
	for ((i = 0; ; i++)); do
		curl -sf -o /dev/null -m 15 -H 'Content-Type: application/json' --data '[{"event":"bench_cluster_warm"}]' \
			"http://127.0.0.1:$port/v1/batch" && return 0
		((i < 60)) || die "$name acknowledged no event within a minute; see $OUT/$name.log"
		sleep 1
	done
}

stop_server() {
	kill -TERM "$SERVER_PID"
	wait "$SERVER_PID" || log "server exited non-zero; see its log"
	SERVER_PID=
}

# j FILE FILTER: a figure of a JSON report.
j() { jq -r "$2" "$1"; }
# failed FILE: answers that were not 2xx, client errors and dropped requests.
failed() { jq -r '([.status | to_entries[] | select(.key | startswith("2") | not) | .value] | add // 0) + ([.errors[]?.count] | add // 0)' "$1"; }
# median VALUES...: the median of numbers (the mean of the middle two when even).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { awk -v v="$1" 'BEGIN { if (v < 10) printf "%.2f ms", v; else if (v < 100) printf "%.1f ms", v; else printf "%.0f ms", v }'; }

declare -A RPS EPS P50 P99 FAILED
port=18680
for round in $(seq 1 "$ROUNDS"); do
	for mode in kafka spool; do
		for target in single cluster; do
			port=$((port + 1))
			name="$target-$mode-$round"
			log "round $round/$ROUNDS: --ack $mode on the $target Kafka"
			start_server "inlet-$name" "$port" --brokers "${BROKERS[$target]}" --ack "$mode" \
				--topic "bench-$target-$mode" --data-dir "$WORK/data-$name" --log-level warn
			taskset -c 1 "$WORK/inlet" bench http --target "http://127.0.0.1:$port/v1/batch" \
				--events "$EVENTS" --event-bytes "$EVENT_BYTES" --concurrency "$CONNS" \
				--warmup "$WARMUP" --duration "$DURATION" --json "$OUT/$name.json" \
				>"$OUT/$name.txt" 2>>"$OUT/load.log" || log "$name: the load generator failed; see $OUT/$name.txt"
			stop_server
			[ -s "$OUT/$name.json" ] || die "$name: no report"
			k="$target-$mode"
			RPS[$k]+=" $(j "$OUT/$name.json" .requests_per_s)"
			EPS[$k]+=" $(j "$OUT/$name.json" .events_per_s)"
			P50[$k]+=" $(j "$OUT/$name.json" .latency.p50_ms)"
			P99[$k]+=" $(j "$OUT/$name.json" .latency.p99_ms)"
			FAILED[$k]=$((${FAILED[$k]:-0} + $(failed "$OUT/$name.json")))
			log "$name: $(j "$OUT/$name.json" .requests_per_s) req/s"
		done
	done
done
stop_kafkas
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

FAILOVER_LINES=
if [ "$FAILOVER" = 1 ]; then
	log "failover: go test -run 'TestFailover/leader_kill' ./internal/failover/ (a cluster of its own, minutes)"
	rm -f "$OUT/failover-summary.txt"
	if env -u INLET_TEST_CLUSTER INLET_TEST_KAFKA_SCRIPT="$REPO/scripts/kafka.sh" INLET_TEST_REQUIRE_KAFKA=1 \
		INLET_FAILOVER_SUMMARY="$OUT/failover-summary.txt" \
		go test -count=1 -timeout 15m -v -run 'TestFailover/leader_kill' ./internal/failover/ >"$OUT/failover.log" 2>&1; then
		FAILOVER_LINES="$(sed 's/^failover summary: /- /' "$OUT/failover-summary.txt")"
	else
		log "the failover run failed; see $OUT/failover.log"
		FAILOVER_LINES="- the failover run failed; see $OUT/failover.log"
	fi
fi

cpu="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
mem="$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
{
	echo "**Machine**: $(nproc --all) vCPU $cpu, $mem, Linux $(uname -r), $(go version | awk '{print $3}'), Apache Kafka ${KAFKA_VERSION:-4.4.0}: a single KRaft node (\`scripts/kafka.sh\`) and a 3-node KRaft cluster (\`scripts/kafka-cluster.sh\`, each node broker and controller, replication 3, min.insync.replicas=2), all on core 1. $(date -u +%Y-%m-%d), load average $LOAD_BEFORE before the run, $LOAD_AFTER after."
	echo
	echo '```sh'
	echo "scripts/bench-cluster.sh    # ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNS=$CONNS EVENTS=$EVENTS EVENT_BYTES=$EVENT_BYTES"
	echo '```'
	echo
	echo "\`inlet serve\` on core 0 with \`GOMAXPROCS=1\`; the load generator (\`inlet bench http\`, closed loop, $CONNS connections, $EVENTS events of about $EVENT_BYTES bytes per request, unique ids) on core 1 with the Kafkas. $ROUNDS interleaved rounds of $DURATION after $WARMUP warmup; medians (each round's req/s in brackets)."
	echo
	echo "| ack | single broker req/s | 3-node cluster req/s | cluster / single | single events/s | cluster events/s | single p50 / p99 | cluster p50 / p99 | failed (single, cluster) |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for mode in kafka spool; do
		s="single-$mode" c="cluster-$mode"
		# shellcheck disable=SC2086 # word splitting of the rounds' figures is meant
		rs="$(median ${RPS[$s]})" rc="$(median ${RPS[$c]})"
		# shellcheck disable=SC2086
		printf '| %s | %.0f (%s) | %.0f (%s) | %.2fx | %.0f | %.0f | %s / %s | %s / %s | %s, %s |\n' "$mode" \
			"$rs" "$(printf '%.0f ' ${RPS[$s]} | sed 's/ $//')" "$rc" "$(printf '%.0f ' ${RPS[$c]} | sed 's/ $//')" \
			"$(awk -v a="$rc" -v b="$rs" 'BEGIN { print (b > 0 ? a / b : 0) }')" \
			"$(median ${EPS[$s]})" "$(median ${EPS[$c]})" \
			"$(ms "$(median ${P50[$s]})")" "$(ms "$(median ${P99[$s]})")" \
			"$(ms "$(median ${P50[$c]})")" "$(ms "$(median ${P99[$c]})")" \
			"${FAILED[$s]}" "${FAILED[$c]}"
	done
	echo
	echo "\"failed\": answers other than 2xx, client errors and requests the generator dropped, over all rounds."
	if [ "$FAILOVER" = 1 ]; then
		echo
		echo "Failover (\`go test -run TestFailover/leader_kill ./internal/failover/\`): \`inlet verify\`'s load, 200 events/s in requests of 5, through \`--ack kafka\` and \`--ack spool\` side by side, while the leader of the busiest partition of the events topic is killed with SIGKILL three times, each time started again after 10 s; \"longest time without a 2xx\" is over the whole run, \"around each failure\" the gap holding each kill (0s: 2xx answers kept coming at least every second):"
		echo
		echo "$FAILOVER_LINES"
	fi
	echo
	echo "Reports (JSON, load and server logs): $OUT"
} | tee "$OUT/summary.md"
