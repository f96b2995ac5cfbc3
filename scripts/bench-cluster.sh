#!/usr/bin/env bash
# What replication costs, and what a leader's death costs (issue 14), from
# one run, as one Markdown table for BENCHMARKS.md:
#
#   - `inlet serve --ack kafka` and `--ack spool` req/s on a 3-node Kafka
#     cluster (scripts/kafka-cluster.sh: replication 3,
#     min.insync.replicas=2, acks=all) against a single broker
#     (scripts/kafka.sh: replication 1), under the same load (`inlet bench
#     http`, closed loop), in interleaved rounds, medians;
#   - the leader-kill run on the same cluster: `inlet verify` at a steady
#     rate through an --ack kafka and an --ack spool gateway side by side
#     while the leader of the busiest partition of their topic is killed
#     with SIGKILL KILLS times, each time started again after DOWN and the
#     next kill only once every replica is back in sync: acknowledged
#     events lost, duplicates, requests not answered 2xx, and verify's gap in
#     acknowledgements (the longest time without a 2xx answer, when it
#     began, and how many such gaps lasted 1 s or more).
#
# Pinning (this machine has 2 cores): inlet on core 0 with GOMAXPROCS=1;
# the single broker, the cluster's three nodes and the load generator on
# core 1. Both Kafkas run for the whole benchmark, so that each round
# measures the four set-ups back to back: single/kafka, cluster/kafka,
# single/spool, cluster/spool. Each run has a fresh data dir and a topic
# of its own. The leader-kill run is not pinned (the restarted node stays on
# core 1): it measures gaps, not throughput; the single broker is stopped
# before it.
#
# Usage: scripts/bench-cluster.sh
# Environment: ROUNDS=3 DURATION=20s WARMUP=5s CONNS=100 EVENTS=5
#   EVENT_BYTES=100; the leader-kill run: FAILOVER=1 (0: skip it) KILLS=3
#   DOWN=10 (seconds a killed node stays down) BEFORE=10 (seconds of load
#   before each kill) RATE=200 (verify's events/s, 5 per request)
#   FAILOVER_DURATION (verify's load, seconds; default KILLS*(BEFORE+DOWN+60)
#   +BEFORE, room for each node's restart; a kill not over before the load
#   ends is flagged in the output)
#   SHORT=1: a smoke test of the script, not figures (ROUNDS=1 DURATION=2s
#   WARMUP=1s CONNS=10 KILLS=1 DOWN=2 BEFORE=3 unless given)
#   BENCH_OUT=dir for the reports (default /tmp/inlet-bench-cluster-<time>)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
SHORT="${SHORT:-0}"
if [ "$SHORT" = 1 ]; then
	ROUNDS="${ROUNDS:-1}" DURATION="${DURATION:-2s}" WARMUP="${WARMUP:-1s}" CONNS="${CONNS:-10}"
	KILLS="${KILLS:-1}" DOWN="${DOWN:-2}" BEFORE="${BEFORE:-3}"
fi
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-20s}"
WARMUP="${WARMUP:-5s}"
CONNS="${CONNS:-100}"
EVENTS="${EVENTS:-5}"
EVENT_BYTES="${EVENT_BYTES:-100}"
FAILOVER="${FAILOVER:-1}"
KILLS="${KILLS:-3}"
DOWN="${DOWN:-10}"
BEFORE="${BEFORE:-10}"
RATE="${RATE:-200}"
FAILOVER_DURATION="${FAILOVER_DURATION:-$((KILLS * (BEFORE + DOWN + 60) + BEFORE))}"
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
for tool in taskset jq curl kcat; do
	command -v "$tool" >/dev/null || die "$tool is needed (Debian: apt-get install util-linux jq curl kcat)"
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number, not '$ROUNDS'"
for v in KILLS DOWN BEFORE RATE FAILOVER_DURATION; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive whole number, not '${!v}'"
done
[ "$(nproc --all)" -ge 2 ] || die "two cores are needed: inlet on core 0, Kafka and the load on core 1"

SERVER_PIDS=()
VERIFY_PIDS=()
stop_kafkas() {
	KAFKA_DIR="$SINGLE_DIR" scripts/kafka.sh stop >/dev/null 2>&1 || true
	KAFKA_DIR="$CLUSTER_DIR" scripts/kafka-cluster.sh cluster-stop >/dev/null 2>&1 || true
}
cleanup() {
	local pid
	for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${VERIFY_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
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
# GOMAXPROCS=1 (PIN=0: anywhere); waits until it is ready and has had one
# event acknowledged (so that the topic exists and has leaders: creating a
# replicated topic is not what is measured). Its pid is SERVER_PID.
start_server() {
	local name="$1" port="$2" i
	shift 2
	if [ "${PIN:-1}" = 1 ]; then
		taskset -c 0 env GOMAXPROCS=1 "$WORK/inlet" serve --listen "127.0.0.1:$port" "$@" >"$OUT/$name.log" 2>&1 &
	else
		"$WORK/inlet" serve --listen "127.0.0.1:$port" "$@" >"$OUT/$name.log" 2>&1 &
	fi
	SERVER_PID=$!
	SERVER_PIDS+=("$SERVER_PID")
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

# stop_server PID: stops the inlet serve of PID (SIGTERM) and waits.
stop_server() {
	local pid="$1" p keep=()
	kill -TERM "$pid"
	wait "$pid" || log "server $pid exited non-zero; see its log"
	for p in "${SERVER_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
	SERVER_PIDS=("${keep[@]}")
}

# j FILE FILTER: a figure of a JSON report.
j() { jq -r "$2" "$1"; }
# failed FILE: answers that were not 2xx, client errors and dropped requests.
failed() { jq -r '([.status | to_entries[] | select(.key | startswith("2") | not) | .value] | add // 0) + ([.errors[]?.count] | add // 0)' "$1"; }
# median VALUES...: the median of numbers (the mean of the middle two when even).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { awk -v v="$1" 'BEGIN { if (v < 10) printf "%.2f ms", v; else if (v < 100) printf "%.1f ms", v; else printf "%.0f ms", v }'; }

declare -A RPS P50 P99 FAILED
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
			stop_server "$SERVER_PID"
			[ -s "$OUT/$name.json" ] || die "$name: no report"
			k="$target-$mode"
			RPS[$k]+=" $(j "$OUT/$name.json" .requests_per_s)"
			P50[$k]+=" $(j "$OUT/$name.json" .latency.p50_ms)"
			P99[$k]+=" $(j "$OUT/$name.json" .latency.p99_ms)"
			FAILED[$k]=$((${FAILED[$k]:-0} + $(failed "$OUT/$name.json")))
			log "$name: $(j "$OUT/$name.json" .requests_per_s) req/s"
		done
	done
done
KAFKA_DIR="$SINGLE_DIR" scripts/kafka.sh stop >/dev/null 2>&1 || true

# topic_state TOPIC: one line per partition, "partition leader isr-size
# end-offset", from the cluster's metadata and ListOffsets (kcat).
topic_state() {
	local t="$1" meta q
	meta="$(kcat -b "${BROKERS[cluster]}" -m 10 -L -J -t "$t")" || return 1
	q=()
	for p in $(jq -r '.topics[0].partitions[].partition' <<<"$meta"); do q+=(-t "$t:$p:-1"); done
	((${#q[@]} > 0)) || return 1
	jq -r --argjson offs "$(kcat -b "${BROKERS[cluster]}" -m 10 -Q -J "${q[@]}")" --arg t "$t" \
		'.topics[0].partitions[] | "\(.partition) \(.leader) \(.isrs | length) \($offs[$t][.partition | tostring].offset // -1)"' <<<"$meta"
}

# wait_in_sync TOPIC: until every partition of TOPIC has 3 replicas in sync
# (at most 3 minutes).
wait_in_sync() {
	local i
	for ((i = 0; i < 180; i++)); do
		topic_state "$1" 2>/dev/null | awk '$3 != 3 { bad = 1 } END { exit bad || NR == 0 }' && return 0
		sleep 1
	done
	log "warning: $1 not fully in sync after 3 minutes: $(topic_state "$1" 2>&1 | tr '\n' ';')"
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

declare -A FO
FAILOVER_NOTE=
if [ "$FAILOVER" = 1 ]; then
	topic=bench-failover
	log "leader kill: --ack kafka and --ack spool on the cluster, inlet verify at $RATE events/s for ${FAILOVER_DURATION}s each, $KILLS kills"
	port=$((port + 1)) kport=$port
	PIN=0 start_server inlet-failover-kafka "$kport" --brokers "${BROKERS[cluster]}" --ack kafka --topic "$topic" \
		--data-dir "$WORK/data-failover-kafka" --produce-timeout 10s --compression none --log-level warn
	kpid=$SERVER_PID
	port=$((port + 1)) sport=$port
	PIN=0 start_server inlet-failover-spool "$sport" --brokers "${BROKERS[cluster]}" --ack spool --topic "$topic" \
		--data-dir "$WORK/data-failover-spool" --produce-timeout 10s --compression none --log-level warn
	spid=$SERVER_PID
	wait_in_sync "$topic"
	t0="$(now)"
	for mode in kafka spool; do
		p=$kport
		[ "$mode" = spool ] && p=$sport
		"$WORK/inlet" verify --target "http://127.0.0.1:$p" --brokers "${BROKERS[cluster]}" --topic "$topic" \
			--duration "${FAILOVER_DURATION}s" --rate "$RATE" --batch 5 --concurrency 16 --timeout 20s --settle 60s \
			>"$OUT/failover-$mode.json" 2>"$OUT/failover-$mode.log" &
		VERIFY_PIDS+=($!)
	done
	kills=()
	late=0
	prev="$(topic_state "$topic")" || prev=
	for k in $(seq 1 "$KILLS"); do
		sleep "$BEFORE"
		cur="$(topic_state "$topic")" || die "leader kill: no metadata of $topic"
		[ -n "$prev" ] || prev="$cur"
		# The busiest partition: the most records since the previous look.
		part= leader=
		read -r part leader < <(join <(sort <<<"$prev") <(sort <<<"$cur") |
			awk '{ d = $7 - $4; if (NR == 1 || d > best) { best = d; p = $1; l = $5 } } END { print p, l }') || true
		[[ $leader =~ ^[0-9]+$ ]] || die "leader kill: no leader of $topic in: $cur"
		kills+=("$(since "$t0")")
		log "kill $k: node $leader, the leader of $topic/$part, SIGKILL at ${kills[-1]} into the load"
		KAFKA_DIR="$CLUSTER_DIR" scripts/kafka-cluster.sh node-kill "$leader" 2>>"$OUT/load.log"
		sleep "$DOWN"
		KAFKA_DIR="$CLUSTER_DIR" taskset -c 1 scripts/kafka-cluster.sh node-start "$leader" >/dev/null 2>>"$OUT/load.log"
		wait_in_sync "$topic"
		back="$(since "$t0")"
		log "kill $k: node $leader back and every replica in sync at $back"
		if awk -v b="${back%s}" -v d="$FAILOVER_DURATION" 'BEGIN { exit !(b > d) }'; then late=$((late + 1)); fi
		prev="$(topic_state "$topic")" || prev=
	done
	log "leader kill: waiting for inlet verify (the load, then reading the topic back)"
	for pid in "${VERIFY_PIDS[@]}"; do wait "$pid" || true; done
	VERIFY_PIDS=()
	stop_server "$kpid"
	stop_server "$spid"
	for mode in kafka spool; do
		f="$OUT/failover-$mode.json"
		if ! jq -e .sent "$f" >/dev/null 2>&1; then
			log "leader kill: ack=$mode: verify printed no report; see $OUT/failover-$mode.log"
			FO[$mode]="verify failed"
			continue
		fi
		FO[$mode-rps]="$(jq -r '.events_per_second / 5 | round' "$f")"
		FO[$mode-gap]="$(jq -r '"\(.ack_gaps.longest) at \(.ack_gaps.longest_after), \(.ack_gaps.at_least_1s) of 1 s or more"' "$f")"
		FO[$mode-lost]="$(jq -r '"\(.lost) of \(.acknowledged) (\(.duplicates) duplicates)"' "$f")"
		FO[$mode-failed]="$(jq -r '[.status | to_entries[] | select(.key | test("^2[0-9][0-9]$") | not) | .value] | add // 0' "$f")"
		log "leader kill: ack=$mode: $(tail -n 1 "$OUT/failover-$mode.log")"
	done
	FAILOVER_NOTE="Leader kill: \`inlet verify --rate $RATE --batch 5 --concurrency 16 --duration ${FAILOVER_DURATION}s\` through an \`--ack kafka\` and an \`--ack spool\` gateway side by side on the cluster (one topic, not pinned), while the leader of the busiest partition was killed with SIGKILL ${KILLS}×, at $(printf '%s, ' "${kills[@]}" | sed 's/, $//') into the load, each time started again after ${DOWN} s, the next kill once every replica was back in sync. \"longest gap\" is verify's longest time without a 2xx answer, when it began after the load's start, and how many lasted 1 s or more; \"lost\" is acknowledged events not in the topic, duplicates the extra copies seen before every acknowledged event was."
	if ((late > 0)); then
		FAILOVER_NOTE+=" **Warning: $late of the kills ended after the load did: raise FAILOVER_DURATION.**"
	fi
fi
stop_kafkas
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

cpu="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
mem="$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
# cell TARGET MODE: "median (each round)" req/s.
cell() {
	# shellcheck disable=SC2086 # word splitting of the rounds' figures is meant
	printf '%.0f (%s)' "$(median ${RPS[$1-$2]})" "$(printf '%.0f ' ${RPS[$1-$2]} | sed 's/ $//')"
}
# lat TARGET MODE: "p50 / p99".
lat() {
	# shellcheck disable=SC2086
	printf '%s / %s' "$(ms "$(median ${P50[$1-$2]})")" "$(ms "$(median ${P99[$1-$2]})")"
}
# ratio MODE: cluster req/s over single.
ratio() {
	# shellcheck disable=SC2086
	awk -v a="$(median ${RPS[cluster-$1]})" -v b="$(median ${RPS[single-$1]})" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }'
}
{
	echo "**Machine**: $(nproc --all) vCPU $cpu, $mem, Linux $(uname -r), $(go version | awk '{print $3}'), Apache Kafka ${KAFKA_VERSION:-4.4.0}: a single KRaft node (\`scripts/kafka.sh\`) and a 3-node KRaft cluster (\`scripts/kafka-cluster.sh\`, each node broker and controller, replication 3, min.insync.replicas=2), all on core 1. $(date -u +%Y-%m-%d), load average $LOAD_BEFORE before the run, $LOAD_AFTER after."
	if [ "$SHORT" = 1 ]; then echo; echo "**SHORT=1: a smoke test of the script, not figures.**"; fi
	echo
	echo '```sh'
	echo "scripts/bench-cluster.sh    # ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONNS=$CONNS EVENTS=$EVENTS EVENT_BYTES=$EVENT_BYTES FAILOVER=$FAILOVER KILLS=$KILLS DOWN=$DOWN BEFORE=$BEFORE RATE=$RATE FAILOVER_DURATION=$FAILOVER_DURATION"
	echo '```'
	echo
	echo "Throughput rows: \`inlet serve\` on core 0 with \`GOMAXPROCS=1\`; the load generator (\`inlet bench http\`, closed loop, $CONNS connections, $EVENTS events of about $EVENT_BYTES bytes per request, unique ids) on core 1 with the Kafkas. $ROUNDS interleaved rounds of $DURATION after $WARMUP warmup; medians (each round's req/s in brackets). \"not 2xx\": answers other than 2xx, client errors and requests the generator dropped, over all rounds (in the leader-kill row: requests verify saw answered other than 2xx)."
	echo
	echo "| Kafka | ack=kafka req/s | ack=spool req/s | ack=kafka p50 / p99 | ack=spool p50 / p99 | not 2xx (kafka, spool) | longest gap without a 2xx, ack=kafka | longest gap without a 2xx, ack=spool | lost, ack=kafka | lost, ack=spool |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	echo "| single broker | $(cell single kafka) | $(cell single spool) | $(lat single kafka) | $(lat single spool) | ${FAILED[single-kafka]}, ${FAILED[single-spool]} | — | — | — | — |"
	echo "| 3-node cluster | $(cell cluster kafka), $(ratio kafka) of single | $(cell cluster spool), $(ratio spool) of single | $(lat cluster kafka) | $(lat cluster spool) | ${FAILED[cluster-kafka]}, ${FAILED[cluster-spool]} | — | — | — | — |"
	if [ "$FAILOVER" = 1 ]; then
		echo "| 3-node cluster, the busiest partition's leader killed ${KILLS}× | ${FO[kafka-rps]:-—} (steady load) | ${FO[spool-rps]:-—} (steady load) | — | — | ${FO[kafka-failed]:-—}, ${FO[spool-failed]:-—} | ${FO[kafka-gap]:-${FO[kafka]:-—}} | ${FO[spool-gap]:-${FO[spool]:-—}} | ${FO[kafka-lost]:-—} | ${FO[spool-lost]:-—} |"
		echo
		echo "$FAILOVER_NOTE"
	fi
	echo
	echo "Reports (JSON, load, verify and server logs): $OUT"
} | tee "$OUT/summary.md"
