#!/usr/bin/env bash
# The headline benchmark (issue 4), in one run on one machine: a no-op Go
# HTTP server (cmd/noop: reads the body, answers 204 — the limit of this
# HTTP stack), and `inlet serve` with --ack none, kafka and spool, against
# a real single-node Kafka broker. Prints a Markdown table for
# BENCHMARKS.md, with the machine and the command, and the top of a CPU
# profile of inlet serve --ack kafka under the same load (and of BASE's).
#
# Pinning (this machine has 2 cores): each server on core 0 with
# GOMAXPROCS=1; Kafka and the load generator (inlet bench http) on core 1.
# Load goes to loopback only.
#
# ROUNDS rounds, the servers interleaved (each round starts one server
# later in the list; this machine's speed drifts by tens of percent within
# minutes), each run on a new topic and data directory; the table gives
# the medians of the rounds and every round's req/s.
#
# For each server: a closed loop of CONNS connections (each request
# POST /v1/batch with EVENTS events of about EVENT_BYTES bytes, unique ids)
# for DURATION after WARMUP; then open loops (latency from the intended
# send time) at half the rate the closed loop reached, and at FIXED_RATE.
# Peak RSS is the kernel's VmHWM of the server process after the closed
# loop.
#
# Usage: scripts/bench.sh      (make bench)
# Environment: ROUNDS=3 DURATION=20s WARMUP=5s OPEN_DURATION=15s CONNS=100
#   EVENTS=5 EVENT_BYTES=100 FIXED_RATE=2000 PROFILE_SECONDS=10 KAFKA_WARMUP=15s
#   SERVERS="noop none kafka spool" (a subset, in this order); each inlet
#     server is MODE[-nethttp][-routes|-segment|-privacy][-base]: --ack MODE;
#     -routes adds --routes bench/routes-20.yaml (20 rules and routes that
#     no event of the load matches: each is checked against all); -segment
#     sends the same events as Segment batches (inlet bench http --shape
#     segment); -privacy turns every privacy and enrichment stage on
#     (--parse-ua, --geoip-db of a million networks written by mkcitydb,
#     the load's X-Forwarded-For in it, --ip-policy truncate, a route with
#     3 redaction rules, one of which hashes each event's props.pad);
#     -base runs inlet built
#     from the commit BASE (BASE=<git revision>), to compare a change with
#     what it changes in one run; -nethttp adds --http-front nethttp (for
#     a BASE that still had the fasthttp front)
#   BENCH_OUT=dir for the reports (default /tmp/inlet-bench-<time>)
#   BENCH_KAFKA_DISK=1 for Kafka's log on disk rather than in memory
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
DURATION="${DURATION:-20s}"
WARMUP="${WARMUP:-5s}"
OPEN_DURATION="${OPEN_DURATION:-15s}"
CONNS="${CONNS:-100}"
EVENTS="${EVENTS:-5}"
EVENT_BYTES="${EVENT_BYTES:-100}"
FIXED_RATE="${FIXED_RATE:-2000}"
ROUNDS="${ROUNDS:-3}"
PROFILE_SECONDS="${PROFILE_SECONDS:-10}"
OUT="${BENCH_OUT:-/tmp/inlet-bench-$(date +%Y%m%d-%H%M%S)}"
WORK="$(mktemp -d)"
# A broker of its own, apart from the tests' one, with its log in memory
# (tmpfs) where there is room, as on a broker's own machine: with its log on
# this machine's one disk, the broker's writeback shared the disk the spool
# fsyncs to, and the open-loop p99 of --ack kafka doubled
# and --ack spool's grew tenfold, while inlet's own produce latency did not
# change (BENCHMARKS.md, 2026-12-05). Retention keeps it to a few GiB.
# BENCH_KAFKA_DISK=1 puts it on disk, under $WORK.
KAFKA_PLACE="on disk"
KAFKA_SHM=
if [ "${BENCH_KAFKA_DISK:-0}" != 1 ] && [ -d /dev/shm ] &&
	[ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -n 1)" -gt $((8 * 1024 * 1024)) ] 2>/dev/null; then
	KAFKA_SHM="$(mktemp -d /dev/shm/inlet-bench-kafka.XXXXXX)"
	export KAFKA_DIR="$KAFKA_SHM"
	export KAFKA_EXTRA_PROPS=$'log.segment.bytes=33554432\nlog.retention.bytes=67108864\nlog.retention.check.interval.ms=10000\nlog.segment.delete.delay.ms=1000'
	KAFKA_PLACE="its log in memory (tmpfs)"
else
	export KAFKA_DIR="$WORK/kafka"
fi
mkdir -p "$OUT"

log() { echo "bench: $*" >&2; }
die() {
	echo "bench: error: $*" >&2
	exit 1
}
for tool in taskset jq curl; do
	command -v "$tool" >/dev/null || die "$tool is needed (Debian: apt-get install util-linux jq curl)"
done
[ "$(nproc --all)" -ge 2 ] || die "two cores are needed: servers on core 0, Kafka and the load on core 1"

SERVER_PID=
LOAD_PID=
cleanup() {
	if [ -n "$LOAD_PID" ]; then kill "$LOAD_PID" 2>/dev/null || true; fi
	if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
	scripts/kafka.sh stop >/dev/null 2>&1 || true
	rm -rf "$WORK"
	if [ -n "$KAFKA_SHM" ]; then rm -rf "$KAFKA_SHM"; fi
}
trap cleanup EXIT

SERVERS="${SERVERS:-noop none kafka spool}"
read -r -a LIST <<<"$SERVERS"
# label SERVER: its name in the table.
label() {
	local s="$1" mode extra=""
	[ "$s" = noop ] && { echo "no-op net/http"; return; }
	mode="${s%%-*}"
	[[ "$s" == *-nethttp* ]] && extra+=" --http-front nethttp"
	[[ "$s" == *-routes* ]] && extra+=" --routes bench/routes-20.yaml"
	[[ "$s" == *-segment* ]] && extra+=", Segment batches"
	[[ "$s" == *-privacy* ]] && extra+=" --parse-ua --geoip-db (1M networks) --ip-policy truncate, 3 redaction rules"
	[[ "$s" == *-base ]] && extra+=", at $BASE_REV"
	echo "inlet --ack $mode$extra"
}
for s in "${LIST[@]}"; do
	[[ "$s" =~ ^(noop|(none|kafka|spool)(-nethttp)?(-routes|-segment|-privacy)?(-base)?)$ ]] || die "no server $s"
	if [[ "$s" == *-base ]] && [ -z "${BASE:-}" ]; then die "$s needs BASE=<git revision>"; fi
done

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
log "load average before: $LOAD_BEFORE; reports go to $OUT"
if awk '{ exit !($1 > 1) }' /proc/loadavg; then
	log "warning: the load average is $LOAD_BEFORE: other work on this machine will skew the figures"
fi
log "building inlet and noop"
CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet
CGO_ENABLED=0 go build -o "$WORK/noop" ./cmd/noop
if [[ " ${LIST[*]}" == *-privacy* ]]; then
	log "writing a city database of a million networks (mkcitydb, about 90 s) and a redaction key"
	go run ./internal/enrich/enrichtest/mkcitydb -n 1000000 -o "$WORK/city.mmdb" >&2
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/redact.key"
fi
if [ -n "${BASE:-}" ]; then
	# git archive, not a worktree: nothing of this repository's state changes.
	BASE_REV="$(git rev-parse --short "$BASE^{commit}")" || die "BASE=$BASE is not a commit"
	log "building inlet at $BASE_REV (BASE)"
	mkdir -p "$WORK/base"
	git archive "$BASE_REV" | tar -x -C "$WORK/base"
	(cd "$WORK/base" && CGO_ENABLED=0 go build -o "$WORK/inlet-base" ./cmd/inlet)
fi
log "starting Kafka on core 1, $KAFKA_PLACE"
BROKERS="$(taskset -c 1 scripts/kafka.sh start | tail -n 1)"
KAFKA_PID="$(cat "$KAFKA_DIR/kafka.pid")"
# A broker just started runs its JVM's first produce requests slowly: warm
# it up, so that the first server measured does not pay for that (with
# --ack none, records pile up in its buffer meanwhile).
log "warming up Kafka: inlet bench kafka for ${KAFKA_WARMUP:-15s}"
taskset -c 1 "$WORK/inlet" bench kafka --brokers "$BROKERS" --topic bench-warmup --warmup 2s --duration "${KAFKA_WARMUP:-15s}" \
	>"$OUT/kafka-warmup.txt" 2>&1 || log "the Kafka warm-up failed; see $OUT/kafka-warmup.txt"

# start_server NAME PORT CMD...: runs CMD on core 0 with GOMAXPROCS=1 and
# waits until it answers.
start_server() {
	local name="$1" port="$2"
	shift 2
	taskset -c 0 env GOMAXPROCS=1 "$@" >"$OUT/$name.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 1 150); do
		curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && return 0
		kill -0 "$SERVER_PID" 2>/dev/null || die "$name exited at start; see $OUT/$name.log"
		sleep 0.2
	done
	die "$name did not answer on port $port within 30 s; see $OUT/$name.log"
}

# sample_buffer URL FILE: until killed, the most records and bytes the
# server's events producer has held not yet acknowledged by Kafka, read
# from URL (/metrics) every 250 ms, written to FILE as "RECORDS BYTES".
sample_buffer() {
	local r b max_r=0 max_b=0
	while :; do
		read -r r b < <(curl -s --max-time 1 "$1" | awk '
			/^inlet_producer_buffered_records\{producer="events"\} / { r = $2 }
			/^inlet_producer_buffered_bytes\{producer="events"\} / { b = $2 }
			END { printf "%d %d\n", r, b }') || true
		[ "${r:-0}" -gt "$max_r" ] && max_r=$r
		[ "${b:-0}" -gt "$max_b" ] && max_b=$b
		echo "$max_r $max_b" >"$2"
		sleep 0.25
	done
}

stop_server() {
	kill -TERM "$SERVER_PID"
	wait "$SERVER_PID" || log "server exited non-zero; see its log"
	SERVER_PID=
}

# load NAME ARGS...: inlet bench http on core 1, reports as $OUT/NAME.{txt,json,html,hgrm}.
load() {
	local name="$1" before
	shift
	snapshot
	before="$SNAP"
	taskset -c 1 "$WORK/inlet" bench http --events "$EVENTS" --event-bytes "$EVENT_BYTES" \
		--json "$OUT/$name.json" --html "$OUT/$name.html" --hdr "$OUT/$name.hgrm" "${LOADX[@]}" "$@" \
		>"$OUT/$name.txt" 2>>"$OUT/load.log" || log "$name: the load generator failed; see $OUT/$name.txt"
	snapshot
	OTHER[$name]="$(other_cpu "$before" "$SNAP")"
	[ -s "$OUT/$name.json" ] || die "$name: no report"
	sed 's/^/    /' "$OUT/$name.txt" >&2
	log "$name: other work on the machine took ${OTHER[$name]}% of a core meanwhile"
}

# cpu_ticks: the CPU time the server used so far (user and system), in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"; }

# The machine is shared: each run measures the CPU that other work took
# meanwhile, all CPU time (/proc/stat) less that of the server, Kafka and
# the load generator, and reports it.
HZ="$(getconf CLK_TCK)"
pid_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# snapshot: the CPU counters now, in SNAP: all busy time (ticks), the
# server's and Kafka's (ticks), this script's finished children's (s), the time.
snapshot() {
	times >"$WORK/times" # in this shell: a subshell has no children of ours
	SNAP="$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat) $(pid_ticks "${SERVER_PID:-0}") $(pid_ticks "$KAFKA_PID")"
	SNAP+=" $(awk 'function s(t) { split(t, a, "m"); return a[1] * 60 + a[2] } NR == 2 { print s($1) + s($2) }' "$WORK/times") $(date +%s.%N)"
}
# other_cpu BEFORE AFTER: the CPU other work took between two snapshots, in % of a core.
other_cpu() {
	awk -v hz="$HZ" -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y)
		o = ((y[1] - x[1]) - (y[2] - x[2]) - (y[3] - x[3])) / hz - (y[4] - x[4])
		printf "%.0f", (o > 0 ? o : 0) / (y[5] - x[5]) * 100 }'
}

# j FILE FILTER: a figure of a JSON report.
j() { jq -r "$2" "$1"; }
# failed FILE: answers that were not 2xx, client errors and dropped requests.
failed() { jq -r '([.status | to_entries[] | select(.key | startswith("2") | not) | .value] | add // 0) + ([.errors[]?.count] | add // 0)' "$1"; }
ms() { awk -v v="$1" 'BEGIN { if (v < 10) printf "%.2f ms", v; else if (v < 100) printf "%.1f ms", v; else printf "%.0f ms", v }'; }

# Per run, keyed SERVER/ROUND.
LOADX=() # the load generator's extra arguments for the server being measured
declare -A RPS EPS P50 P99 CPU CPUREQ HALF HP50 HP99 FP50 FP99 RSS FAILED OTHER BUF
port=18580
for r in $(seq 1 "$ROUNDS"); do
	log "round $r of $ROUNDS"
	for i in "${!LIST[@]}"; do
		# Each round starts one server later in the list: no server
		# always runs first, or right after the same one.
		s="${LIST[$(((i + r - 1) % ${#LIST[@]}))]}"
		k="$s/$r"
		port=$((port + 1))
		url="http://127.0.0.1:$port/v1/batch"
		topic="bench-$s-$r" # a new topic each run
		LOADX=()
		if [ "$s" = noop ]; then
			log "no-op server (core 0)"
			start_server "noop-$r" "$port" "$WORK/noop" --listen "127.0.0.1:$port"
		else
			bin="$WORK/inlet" extra=()
			[[ "$s" == *-base ]] && bin="$WORK/inlet-base"
			[[ "$s" == *-nethttp* ]] && extra=(--http-front nethttp)
			[[ "$s" == *-routes* ]] && extra+=(--routes "$REPO/bench/routes-20.yaml")
			if [[ "$s" == *-privacy* ]]; then
				# Every stage on; redaction by a route that sends every event to the run's topic.
				printf 'routes:\n  - name: all\n    topic: %s\n    redact:\n      - {path: props.pad, action: hash}\n      - {path: props.email, action: drop}\n      - {path: context.ip, action: drop}\n' "$topic" >"$WORK/privacy-$topic.yaml"
				extra+=(--parse-ua --geoip-db "$WORK/city.mmdb" --trusted-proxies 127.0.0.1/32 --ip-policy truncate
					--routes "$WORK/privacy-$topic.yaml" --redact-key-file "$WORK/redact.key")
				LOADX=(--header "X-Forwarded-For: 192.0.2.77" --header "User-Agent: Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36")
			fi
			[[ "$s" == *-segment* ]] && LOADX=(--shape segment)
			log "$(label "$s") (core 0)"
			start_server "inlet-$s-$r" "$port" "$bin" serve --listen "127.0.0.1:$port" --brokers "$BROKERS" \
				--ack "${s%%-*}" "${extra[@]}" --topic "$topic" --data-dir "$WORK/data-$s-$r" --log-level warn
		fi
		log "$s: closed loop, $CONNS connections, $DURATION after $WARMUP warmup"
		sampler=
		if [ "$s" != noop ] && [ "${s%%-*}" != spool ]; then
			taskset -c 1 bash -c "$(declare -f sample_buffer); sample_buffer http://127.0.0.1:$port/metrics $OUT/$s-$r-buffer" &
			sampler=$!
		fi
		cpu0="$(cpu_ticks)" t0="$(date +%s.%N)"
		load "$s-$r-closed" --target "$url" --concurrency "$CONNS" --warmup "$WARMUP" --duration "$DURATION"
		BUF[$k]=-
		if [ -n "$sampler" ]; then
			kill "$sampler" 2>/dev/null || true
			wait "$sampler" 2>/dev/null || true
			BUF[$k]="$(awk '{ printf "%d/%.1f", $1, $2 / 1048576 }' "$OUT/$s-$r-buffer" 2>/dev/null || echo -)"
		fi
		CPU[$k]="$(awk -v a="$cpu0" -v b="$(cpu_ticks)" -v t0="$t0" -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" \
			'BEGIN { printf "%.0f", 100 * (b - a) / hz / (t1 - t0) }')"
		RSS[$k]="$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER_PID/status")"
		RPS[$k]="$(j "$OUT/$s-$r-closed.json" .requests_per_s)"
		# The server's CPU per request (µs): on a shared core, req/s follows
		# the CPU the server got; this is what each request cost.
		CPUREQ[$k]="$(awk -v c="${CPU[$k]}" -v r="${RPS[$k]}" 'BEGIN { if (r > 0) printf "%.1f", c * 1e4 / r; else print 0 }')"
		EPS[$k]="$(j "$OUT/$s-$r-closed.json" .events_per_s)"
		P50[$k]="$(j "$OUT/$s-$r-closed.json" .latency.p50_ms)"
		P99[$k]="$(j "$OUT/$s-$r-closed.json" .latency.p99_ms)"
		HALF[$k]="$(awk -v r="${RPS[$k]}" 'BEGIN { printf "%d", r / 2 }')"
		log "$s: open loop at ${HALF[$k]} req/s (half its closed-loop rate)"
		load "$s-$r-open-half" --target "$url" --rate "${HALF[$k]}" --connections "$CONNS" --warmup "$WARMUP" --duration "$OPEN_DURATION"
		HP50[$k]="$(j "$OUT/$s-$r-open-half.json" .latency.p50_ms)"
		HP99[$k]="$(j "$OUT/$s-$r-open-half.json" .latency.p99_ms)"
		log "$s: open loop at $FIXED_RATE req/s"
		load "$s-$r-open-fixed" --target "$url" --rate "$FIXED_RATE" --connections "$CONNS" --warmup "$WARMUP" --duration "$OPEN_DURATION"
		FP50[$k]="$(j "$OUT/$s-$r-open-fixed.json" .latency.p50_ms)"
		FP99[$k]="$(j "$OUT/$s-$r-open-fixed.json" .latency.p99_ms)"
		FAILED[$k]=$(($(failed "$OUT/$s-$r-closed.json") + $(failed "$OUT/$s-$r-open-half.json") + $(failed "$OUT/$s-$r-open-fixed.json")))
		OTHER[$k]="$(printf '%s\n' "${OTHER[$s-$r-closed]}" "${OTHER[$s-$r-open-half]}" "${OTHER[$s-$r-open-fixed]}" | sort -n | tail -n 1)"
		stop_server
	done
done

# median: the median of the numbers on stdin, one a line.
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# med ARRAY SERVER: the median of the rounds' values of ARRAY for SERVER.
med() {
	local -n a="$1"
	local r
	for r in $(seq 1 "$ROUNDS"); do echo "${a[$2/$r]}"; done | median
}
# rounds ARRAY SERVER FORMAT: the rounds' values, in round order.
rounds() {
	local -n a="$1"
	local r out=()
	for r in $(seq 1 "$ROUNDS"); do out+=("$(printf "$3" "${a[$2/$r]}")"); done
	echo "${out[*]}"
}
# The medians, by server, for the report.
declare -A M_RPS M_EPS M_P50 M_P99 M_CPU M_CPUREQ M_HALF M_HP50 M_HP99 M_FP50 M_FP99 M_RSS M_FAILED
for s in $SERVERS; do
	for f in RPS EPS P50 P99 CPU CPUREQ HALF HP50 HP99 FP50 FP99; do
		declare -n m="M_$f"
		m[$s]="$(med "$f" "$s")"
		unset -n m
	done
	M_RSS[$s]="$(rounds RSS "$s" %s | tr ' ' '\n' | sort -n | tail -n 1)" # the highest
	M_FAILED[$s]=0
	for r in $(seq 1 "$ROUNDS"); do M_FAILED[$s]=$((M_FAILED[$s] + FAILED[$s/$r])); done
done

# Where the time goes: a CPU profile of --ack kafka under the closed loop
# (and of the BASE binary's, with BASE: the difference, function by function).
PROFILED=(kafka)
[ -n "${BASE:-}" ] && PROFILED+=(kafka-base)
for s in "${PROFILED[@]}"; do
	port=$((port + 1))
	bin="$WORK/inlet"
	[ "$s" = kafka-base ] && bin="$WORK/inlet-base"
	log "profile: $(label "$s"), ${PROFILE_SECONDS}s of CPU profile under the closed loop"
	start_server "inlet-$s-pprof" "$port" "$bin" serve --listen "127.0.0.1:$port" --brokers "$BROKERS" \
		--ack kafka --topic "bench-$s-pprof" --data-dir "$WORK/data-$s-pprof" --log-level warn --pprof
	snapshot
	before="$SNAP"
	warm_s="$(awk -v w="$WARMUP" 'BEGIN { sub(/s$/, "", w); print w + 0 }')"
	taskset -c 1 "$WORK/inlet" bench http --target "http://127.0.0.1:$port/v1/batch" --events "$EVENTS" --event-bytes "$EVENT_BYTES" \
		--concurrency "$CONNS" --warmup "$WARMUP" --duration "$((PROFILE_SECONDS + 4))s" >"$OUT/$s-pprof-load.txt" 2>>"$OUT/load.log" &
	LOAD_PID=$!
	sleep "$(awk -v w="$warm_s" 'BEGIN { print w + 1 }')"
	taskset -c 1 curl -sf -o "$OUT/cpu-$s.pprof" "http://127.0.0.1:$port/debug/pprof/profile?seconds=$PROFILE_SECONDS"
	wait "$LOAD_PID" || true
	LOAD_PID=
	snapshot
	OTHER[profile-$s]="$(other_cpu "$before" "$SNAP")"
	stop_server
	cp "$bin" "$OUT/$(basename "$bin")" # the binary the profile is of
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# The report.
cpu="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
mem="$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
{
	echo "**Machine**: $(nproc --all) vCPU $cpu, $mem, Linux $(uname -r), $(go version | awk '{print $3}'), Apache Kafka ${KAFKA_VERSION:-4.4.0} (single-node KRaft, \`scripts/kafka.sh\`, on core 1, $KAFKA_PLACE). $(date -u +%Y-%m-%d), load average $LOAD_BEFORE before the run, $LOAD_AFTER after."
	echo
	echo '```sh'
	echo "${BASE:+BASE=$BASE }SERVERS=\"$SERVERS\" scripts/bench.sh    # make bench; ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP OPEN_DURATION=$OPEN_DURATION CONNS=$CONNS EVENTS=$EVENTS EVENT_BYTES=$EVENT_BYTES FIXED_RATE=$FIXED_RATE"
	echo '```'
	echo
	echo "Each server on core 0 with \`GOMAXPROCS=1\`; Kafka and the load generator (\`inlet bench http\`, $EVENTS events of about $EVENT_BYTES bytes per request, unique ids) on core 1. Closed loop: $CONNS connections, $DURATION after $WARMUP warmup. Open loop: latency from each request's intended send time, at half the server's closed-loop rate and at $FIXED_RATE req/s, $OPEN_DURATION after $WARMUP warmup, at most $CONNS connections. Server CPU: the server's CPU time over the closed loop (warmup included) per second: 100% is core 0 saturated; CPU per request: that time over the requests answered, the median of the rounds. Peak RSS: \`VmHWM\` after the closed loop."
	echo
	echo "Kafka warmed up first (\`inlet bench kafka\`, ${KAFKA_WARMUP:-15s}). $ROUNDS rounds, the servers interleaved (each round starts one server later in the list), each run on a new topic; the table gives the medians of the rounds (peak RSS: the highest of the rounds, each listed)."
	echo
	echo "| server | req/s | events/s | vs no-op | p50 | p99 | server CPU | CPU per request | open at ½ max: req/s | p50 | p99 | open at $FIXED_RATE req/s: p50 | p99 | peak RSS | failed | req/s per round | peak RSS per round, MB | producer buffer peak per round, records/MiB | other work per round |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for s in $SERVERS; do
		name="$(label "$s")"
		printf '| %s | %.0f | %.0f | %s | %s | %s | %.0f%% | %.1f µs | %.0f | %s | %s | %s | %s | %s MB | %s | %s | %s | %s | %s |\n' "$name" "${M_RPS[$s]}" "${M_EPS[$s]}" \
			"$(awk -v a="${M_RPS[$s]}" -v b="${M_RPS[noop]:-}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')" \
			"$(ms "${M_P50[$s]}")" "$(ms "${M_P99[$s]}")" "${M_CPU[$s]}" "${M_CPUREQ[$s]}" "${M_HALF[$s]}" "$(ms "${M_HP50[$s]}")" "$(ms "${M_HP99[$s]}")" \
			"$(ms "${M_FP50[$s]}")" "$(ms "${M_FP99[$s]}")" "${M_RSS[$s]}" "${M_FAILED[$s]}" "$(rounds RPS "$s" %.0f)" "$(rounds RSS "$s" %s)" "$(rounds BUF "$s" %s)" "$(rounds OTHER "$s" %s%%)"
	done
	echo
	echo "\"failed\": answers other than 2xx, client errors and requests the generator dropped, over all runs. \"other work\": the most CPU that other processes on this shared machine took during one of a round's three runs (closed, open at ½ max, open at $FIXED_RATE), in % of a core (all CPU time less the server's, Kafka's and the load generator's); a round with much of it is disturbed. \"producer buffer peak\": the most records (and MiB of them) the events producer held not yet acknowledged by Kafka during the closed loop, warmup included, from \`/metrics\` every 250 ms; with \`--ack none\` they are the events answered and not yet in Kafka, so a round where Kafka falls behind has a higher peak RSS, up to the buffer's bound (\`--max-buffered-records\` 20000, \`--max-buffered-bytes\` 16 MiB: 503 past it)."
	echo
	has() { [[ " $SERVERS " == *" $1 "* ]]; }
	if has kafka && has noop; then
		echo "Goals (issue 4) for \`--ack kafka\`:"
		awk -v r="${M_RPS[kafka]}" -v n="${M_RPS[noop]}" 'BEGIN { x = r / n; printf "- req/s at least 0.6x the no-op server'"'"'s: %.2fx, %s\n", x, (x >= 0.6 ? "met" : "missed") }'
		awk -v m="${M_RSS[kafka]}" 'BEGIN { printf "- peak RSS at most 50 MB: %d MB, %s\n", m, (m <= 50 ? "met" : "missed") }'
		awk -v p="${M_HP99[kafka]}" 'BEGIN { printf "- open loop at half the maximum rate, p99 at most 10 ms: %.2f ms, %s\n", p, (p <= 10 ? "met" : "missed") }'
		echo
		echo "Goals (issue 12):"
		awk -v r="${M_RPS[kafka]}" -v n="${M_RPS[noop]}" 'BEGIN { x = r / n; printf "- `--ack kafka` at least 0.45x the no-op server'"'"'s req/s: %.2fx, %s\n", x, (x >= 0.45 ? "met" : "missed") }'
	fi
	if has kafka && has spool; then
		per=()
		for r in $(seq 1 "$ROUNDS"); do per+=("$(awk -v a="${RPS[spool/$r]}" -v b="${RPS[kafka/$r]}" 'BEGIN { printf "%.2fx", a / b }')"); done
		awk -v r="${M_RPS[spool]}" -v k="${M_RPS[kafka]}" -v per="${per[*]}" 'BEGIN { x = r / k; printf "- `--ack spool` at least 0.9x of `--ack kafka`: %.2fx (medians; by round %s), %s\n", x, per, (x >= 0.9 ? "met" : "missed") }'
	fi
	for s in none kafka spool; do
		has "$s" || continue
		awk -v s="$s" -v m="${M_RSS[$s]}" -v p="${M_HP99[$s]}" 'BEGIN { printf "- `--ack %s`: peak RSS at most 50 MB: %d MB, %s; open-loop p99 at half its maximum rate at most 10 ms: %.2f ms, %s\n", s, m, (m <= 50 ? "met" : "missed"), p, (p <= 10 ? "met" : "missed") }'
	done
	for m in kafka spool; do
		for b in "$m-base" "$m-nethttp-base"; do
			has "$m" && has "$b" || continue
			per=()
			for r in $(seq 1 "$ROUNDS"); do per+=("$(awk -v a="${RPS[$m/$r]}" -v b="${RPS[$b/$r]}" 'BEGIN { printf "%.2fx", a / b }')"); done
			awk -v m="$m" -v b="$(label "$b")" -v x="${M_RPS[$m]}" -v y="${M_RPS[$b]}" -v per="${per[*]}" -v cx="${M_CPUREQ[$m]}" -v cy="${M_CPUREQ[$b]}" 'BEGIN { r = x / y
				printf "- (issue 27) `--ack %s` at least 0.9x the req/s of %s: %.2fx (medians; by round %s), %s; CPU per request %.1f µs against %.1f (%.2fx)\n", m, b, r, per, (r >= 0.9 ? "met" : "missed"), cx, cy, cx / cy }'
		done
	done
	# Each variant against its server (MODE-routes against MODE, MODE-base
	# against MODE...): the ratio of each round, whose two runs were minutes
	# apart, and the median of those ratios, which the drift between rounds
	# does not move as it moves the ratio of the medians.
	for v in $SERVERS; do
		p="${v%-*}"
		[ "$p" != "$v" ] && has "$p" || continue
		rr=() rc=()
		for r in $(seq 1 "$ROUNDS"); do
			rr+=("$(awk -v a="${RPS[$v/$r]}" -v b="${RPS[$p/$r]}" 'BEGIN { printf "%.3f", a / b }')")
			rc+=("$(awk -v a="${CPUREQ[$v/$r]}" -v b="${CPUREQ[$p/$r]}" 'BEGIN { printf "%.3f", a / b }')")
		done
		printf -- '- %s against %s, paired by round: %sx the req/s (median; rounds %s), %sx the CPU a request (rounds %s)\n' \
			"$(label "$v")" "$(label "$p")" "$(printf '%s\n' "${rr[@]}" | median)" "${rr[*]}" "$(printf '%s\n' "${rc[@]}" | median)" "${rc[*]}"
	done
	echo
	for s in "${PROFILED[@]}"; do
		f="$OUT/cpu-$s.pprof"
		rps="$(awk '/throughput/ {print $2; exit}' "$OUT/$s-pprof-load.txt")"
		# CPU per request: the profile's samples over the requests of its window.
		per="$(go tool pprof -top -nodecount=1 "$f" 2>/dev/null | awk -v r="$rps" -v d="$PROFILE_SECONDS" '
			/Total samples/ { for (i = 1; i <= NF; i++) if ($i == "=") { v = $(i + 1); u = v; sub(/[a-z]+$/, "", v); sub(/^[0-9.]+/, "", u) } }
			END { if (u == "ms") v /= 1000; if (r > 0) printf "%.1f", v * 1e6 / (r * d) }')"
		echo "CPU profile of \`$(label "$s")\` with \`--pprof\` (core 0, GOMAXPROCS=1), ${PROFILE_SECONDS} s of \`/debug/pprof/profile\` under the closed loop (at $(printf '%.0f' "$rps") req/s, ${per} µs of CPU per request; other work ${OTHER[profile-$s]}% of a core):"
		echo
		echo '```'
		go tool pprof -top -nodecount=15 "$f" 2>/dev/null | sed -n '/^Showing\|^      flat/,$p'
		echo
		go tool pprof -top -cum -nodecount=25 "$f" 2>/dev/null | sed -n '/^      flat/,$p'
		echo '```'
		echo
	done
	echo "Reports (JSON, HTML, .hgrm, the profile and the binary it is of): $OUT"
} | tee "$OUT/summary.md"
