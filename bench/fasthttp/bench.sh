#!/usr/bin/env bash
# What would a fasthttp front end save inlet's ingest (issue 12, item 5)?
# inlet had one (internal/fastfront) until issue 27 removed it: two HTTP
# parsers on one port was where request smuggling lived, for 1.09-1.20x
# the req/s. This stays as the yardstick of what the HTTP stack costs.
# Measures, side by side against a private single-node Kafka, the server
# CPU per request of:
#
#   noop-nethttp     cmd/noop: net/http reads the body, answers 204
#   noop-fasthttp    frontbench --front fasthttp --handler noop: the same on fasthttp
#   ingest-nethttp   frontbench --front nethttp: inlet's ingest work (event.Frame,
#                    event.Batch, inlet's Kafka producer with acks=all, waiting for
#                    the request's acks) behind net/http
#   ingest-fasthttp  frontbench --front fasthttp: the same code behind fasthttp
#   inlet-kafka      inlet serve --ack kafka (net/http)
#   inlet-spool      the same with --ack spool (not run by default)
#   inlet-kafka-base, inlet-spool-base  inlet serve --ack kafka|spool built from
#                    the commit BASE (a git revision; with BASE set only),
#                    to compare a change with what it changes in one run
#   NAME-gogcN       any of the above with GOGC=N in its environment
#
# Pinning as scripts/bench.sh: each server on core 0 with GOMAXPROCS=1;
# Kafka and the load (inlet bench http, closed loop of CONNS connections,
# POST /v1/batch of EVENTS events of about EVENT_BYTES bytes) on core 1.
# ROUNDS rounds, the servers interleaved (each round starts one later in
# the list); each run is WARMUP then DURATION seconds.
#
# Per run: req/s (the load generator's report), and over a window inside
# the measured time (MARGIN seconds in from either end) the server's CPU
# time (/proc/PID/stat utime+stime) and read and write syscalls
# (/proc/PID/io syscr, syscw), each divided by the requests of that window
# (req/s times its length); peak RSS is VmHWM after the run. The table
# gives the medians of the rounds. "other work" is the CPU that processes
# other than the server, Kafka and the load generator took in the window.
#
# Usage: flock /tmp/inlet-bench.lock bench/fasthttp/bench.sh
# Environment: ROUNDS=3 DURATION=10 WARMUP=3 MARGIN=0.5 CONNS=100 EVENTS=5
#   EVENT_BYTES=100 BENCH_OUT=dir (default /tmp/inlet-bench-fasthttp-<time>)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-3}"
MARGIN="${MARGIN:-0.5}"
CONNS="${CONNS:-100}"
EVENTS="${EVENTS:-5}"
EVENT_BYTES="${EVENT_BYTES:-100}"
OUT="${BENCH_OUT:-/tmp/inlet-bench-fasthttp-$(date +%Y%m%d-%H%M%S)}"
WORK="$(mktemp -d)"
export KAFKA_DIR="$WORK/kafka" # a broker of its own, apart from the tests' one
mkdir -p "$OUT"

log() { echo "bench-fasthttp: $*" >&2; }
die() {
	echo "bench-fasthttp: error: $*" >&2
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
}
trap cleanup EXIT

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
log "load average before: $LOAD_BEFORE; reports go to $OUT"
if awk '{ exit !($1 > 1) }' /proc/loadavg; then
	log "warning: the load average is $LOAD_BEFORE: other work on this machine will skew the figures"
fi
log "building inlet, noop and frontbench"
CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet
CGO_ENABLED=0 go build -o "$WORK/noop" ./cmd/noop
(cd "$HERE" && CGO_ENABLED=0 go build -o "$WORK/frontbench" .)
if [ -n "${BASE:-}" ]; then
	log "building inlet at $BASE"
	git worktree add -q --detach "$WORK/base" "$BASE"
	(cd "$WORK/base" && CGO_ENABLED=0 go build -o "$WORK/inlet-base" ./cmd/inlet)
	git worktree remove --force "$WORK/base"
fi
log "starting Kafka on core 1"
BROKERS="$(taskset -c 1 scripts/kafka.sh start | tail -n 1)"
KAFKA_PID="$(cat "$KAFKA_DIR/kafka.pid")"
HZ="$(getconf CLK_TCK)"

# SERVERS (a space-separated subset, in this order) picks the servers.
read -r -a SERVERS <<<"${SERVERS:-noop-nethttp noop-fasthttp ingest-nethttp ingest-fasthttp inlet-kafka}"
declare -A LABEL=(
	[noop-nethttp]="no-op net/http (cmd/noop)"
	[noop-fasthttp]="no-op fasthttp"
	[ingest-nethttp]="ingest work on net/http"
	[ingest-fasthttp]="ingest work on fasthttp"
	[inlet-kafka]="inlet serve --ack kafka"
	[inlet-spool]="inlet serve --ack spool"
	[inlet-kafka-base]="inlet serve --ack kafka, at ${BASE:-BASE}"
	[inlet-spool-base]="inlet serve --ack spool, at ${BASE:-BASE}"
)
# NAME-gogcN: server NAME with GOGC=N in its environment (inlet serve sets
# 50 unless GOGC is set), to measure the collector's share side by side.
for s in "${SERVERS[@]}"; do
	case "$s" in *-gogc*)
		b="${s%-gogc*}" n="${s##*-gogc}"
		[[ "$n" =~ ^[0-9]+$ ]] || die "$s: GOGC must be a number"
		[ -n "${LABEL[$b]:-}" ] || die "no server $b"
		LABEL[$s]="${LABEL[$b]}, GOGC=$n"
		;;
	esac
	[ -n "${LABEL[$s]:-}" ] || die "no server $s"
	case "$s" in *-base) [ -n "${BASE:-}" ] || die "$s needs BASE=<git revision>" ;; esac
done

# server_cmd NAME PORT RUN: the command line of a server.
server_cmd() {
	local name="$1" port="$2" run="$3"
	case "$name" in
	*-gogc*) echo "env GOGC=${name##*-gogc} $(server_cmd "${name%-gogc*}" "$port" "$run")" ;;
	noop-nethttp) echo "$WORK/noop --listen 127.0.0.1:$port" ;;
	noop-fasthttp) echo "$WORK/frontbench --front fasthttp --handler noop --listen 127.0.0.1:$port" ;;
	ingest-nethttp) echo "$WORK/frontbench --front nethttp --listen 127.0.0.1:$port --brokers $BROKERS --topic bench-ingest-nethttp" ;;
	ingest-fasthttp) echo "$WORK/frontbench --front fasthttp --listen 127.0.0.1:$port --brokers $BROKERS --topic bench-ingest-fasthttp" ;;
	inlet-kafka) echo "$WORK/inlet serve --listen 127.0.0.1:$port --brokers $BROKERS --ack kafka --topic bench-kafka --data-dir $WORK/data-$run --log-level warn" ;;
	inlet-spool) echo "$WORK/inlet serve --listen 127.0.0.1:$port --brokers $BROKERS --ack spool --topic bench-spool --data-dir $WORK/data-$run --log-level warn" ;;
	inlet-kafka-base) echo "$WORK/inlet-base serve --listen 127.0.0.1:$port --brokers $BROKERS --ack kafka --topic bench-kafka --data-dir $WORK/data-$run --log-level warn" ;;
	inlet-spool-base) echo "$WORK/inlet-base serve --listen 127.0.0.1:$port --brokers $BROKERS --ack spool --topic bench-spool --data-dir $WORK/data-$run --log-level warn" ;;
	esac
}

# start_server NAME PORT CMD...: runs CMD on core 0 with GOMAXPROCS=1 and
# waits until it answers /readyz.
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

stop_server() {
	kill -TERM "$SERVER_PID"
	wait "$SERVER_PID" || log "server exited non-zero; see its log"
	SERVER_PID=
}

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# sample: the time, the server's CPU ticks, syscr and syscw, Kafka's and
# the load generator's ticks, and all busy ticks of the machine.
sample() {
	echo "$(date +%s.%N) $(ticks "$SERVER_PID") $(awk '/^syscr/ { r = $2 } /^syscw/ { w = $2 } END { print r, w }' "/proc/$SERVER_PID/io")" \
		"$(ticks "$KAFKA_PID") $(ticks "$LOAD_PID") $(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat)"
}

# measure NAME RUN: one run of server NAME; appends its figures to $OUT/NAME.runs.
measure() {
	local name="$1" run="$2" port a b rps failed rss
	port=$((18700 + run))
	# shellcheck disable=SC2046 # the command line splits into words
	start_server "$name-$run" "$port" $(server_cmd "$name" "$port" "$run")
	taskset -c 1 "$WORK/inlet" bench http --target "http://127.0.0.1:$port/v1/batch" --events "$EVENTS" --event-bytes "$EVENT_BYTES" \
		--concurrency "$CONNS" --warmup "${WARMUP}s" --duration "${DURATION}s" --json "$OUT/$name-$run.json" \
		>"$OUT/$name-$run.txt" 2>>"$OUT/load.log" &
	LOAD_PID=$!
	sleep "$(awk -v w="$WARMUP" -v m="$MARGIN" 'BEGIN { print w + m }')"
	a="$(sample)"
	sleep "$(awk -v d="$DURATION" -v m="$MARGIN" 'BEGIN { print d - 2 * m }')"
	b="$(sample)"
	wait "$LOAD_PID" || die "$name: the load generator failed; see $OUT/$name-$run.txt"
	LOAD_PID=
	rps="$(jq -r .requests_per_s "$OUT/$name-$run.json")"
	failed="$(jq -r '([.status | to_entries[] | select(.key | startswith("2") | not) | .value] | add // 0) + ([.errors[]?.count] | add // 0)' "$OUT/$name-$run.json")"
	rss="$(awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$SERVER_PID/status")"
	stop_server
	awk -v a="$a" -v b="$b" -v rps="$rps" -v hz="$HZ" -v rss="$rss" -v failed="$failed" 'BEGIN {
		split(a, x); split(b, y); t = y[1] - x[1]; n = rps * t
		cpu = (y[2] - x[2]) / hz
		other = ((y[7] - x[7]) - (y[2] - x[2]) - (y[5] - x[5]) - (y[6] - x[6])) / hz
		printf "%.0f %.2f %.0f %.3f %.3f %d %.0f %d\n", rps, cpu / n * 1e6, 100 * cpu / t,
			(y[3] - x[3]) / n, (y[4] - x[4]) / n, rss, 100 * (other > 0 ? other : 0) / t, failed
	}' >>"$OUT/$name.runs"
	log "$name, run $run: $(tail -n 1 "$OUT/$name.runs") (req/s, CPU µs/req, CPU %, syscr/req, syscw/req, RSS MB, other %, failed)"
}

run=0
for round in $(seq 1 "$ROUNDS"); do
	for i in "${!SERVERS[@]}"; do
		name="${SERVERS[$(((i + round - 1) % ${#SERVERS[@]}))]}"
		run=$((run + 1))
		log "round $round: $name"
		measure "$name" "$run"
	done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# median FILE COLUMN: the median of a column of a .runs file.
median() { awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
declare -A RPS CPU
for s in "${SERVERS[@]}"; do
	RPS[$s]="$(median "$OUT/$s.runs" 1)"
	CPU[$s]="$(median "$OUT/$s.runs" 2)"
done

cpu="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
{
	echo "**Machine**: $(nproc --all) vCPU $cpu, Linux $(uname -r), $(go version | awk '{print $3}'), fasthttp $(cd "$HERE" && go list -m -f '{{.Version}}' github.com/valyala/fasthttp), Apache Kafka (single-node KRaft, \`scripts/kafka.sh\`, on core 1). $(date -u +%Y-%m-%d), load average $LOAD_BEFORE before the run, $LOAD_AFTER after."
	echo
	echo '```sh'
	echo "flock /tmp/inlet-bench.lock bench/fasthttp/bench.sh    # ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP MARGIN=$MARGIN CONNS=$CONNS EVENTS=$EVENTS EVENT_BYTES=$EVENT_BYTES"
	echo '```'
	echo
	echo "Each server on core 0 with \`GOMAXPROCS=1\`; Kafka and the load (\`inlet bench http\`, closed loop, $CONNS connections, POST /v1/batch of $EVENTS events of about $EVENT_BYTES bytes) on core 1; $ROUNDS rounds, interleaved, ${WARMUP} s warmup then ${DURATION} s each. Medians of the rounds; CPU and syscalls over the measured time less ${MARGIN} s at either end, per request."
	echo
	echo "| server | req/s | vs no-op | server CPU µs/req | vs no-op | server CPU | read syscalls/req | write syscalls/req | peak RSS | req/s per round | other work | failed |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for s in "${SERVERS[@]}"; do
		f="$OUT/$s.runs"
		# vs no-op: "-" when the no-op server was not run
		printf '| %s | %.0f | %s | %.1f | %s | %.0f%% | %.2f | %.2f | %s MB | %s | %s | %s |\n' "${LABEL[$s]}" "${RPS[$s]}" \
			"$(awk -v a="${RPS[$s]}" -v b="${RPS[noop-nethttp]:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')" "${CPU[$s]}" \
			"$(awk -v a="${CPU[$s]}" -v b="${CPU[noop-nethttp]:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')" "$(median "$f" 3)" \
			"$(median "$f" 4)" "$(median "$f" 5)" "$(median "$f" 6)" "$(awk '{ printf "%s%s", (NR > 1 ? " " : ""), $1 }' "$f")" \
			"$(awk '{ printf "%s%s%%", (NR > 1 ? " " : ""), $7 }' "$f")" "$(awk '{ n += $8 } END { print n }' "$f")"
	done
	echo
	if [ -n "${CPU[ingest-nethttp]:-}" ] && [ -n "${CPU[ingest-fasthttp]:-}" ] && [ -n "${CPU[inlet-kafka]:-}" ]; then
		awk -v i="${CPU[inlet-kafka]}" -v n="${CPU[ingest-nethttp]}" -v f="${CPU[ingest-fasthttp]}" -v o="${CPU[noop-nethttp]}" \
			-v ri="${RPS[inlet-kafka]}" -v ro="${RPS[noop-nethttp]}" 'BEGIN {
			printf "The fasthttp front saves %.1f µs of server CPU per request on the same ingest work (%.1f on net/http, %.1f on fasthttp: %.0f%%).", n - f, n, f, 100 * (n - f) / n
			e = i - (n - f)
			printf " Taken off inlet serve --ack kafka (%.1f µs), that is %.1f µs per request: about %.2fx the net/http no-op'"'"'s req/s, against %.2fx measured (goal: 0.45x).\n", i, e, o / e, ri / ro
		}'
	fi
	for m in kafka spool; do
		if [ -n "${CPU[inlet-$m]:-}" ] && [ -n "${CPU[inlet-$m-base]:-}" ]; then
			awk -v m="$m" -v b="$BASE" -v f="${CPU[inlet-$m]}" -v n="${CPU[inlet-$m-base]}" -v rf="${RPS[inlet-$m]}" -v rn="${RPS[inlet-$m-base]}" 'BEGIN {
				printf "inlet serve --ack %s: %.1f µs of server CPU per request against %.1f at %s (%.2fx); %.0f req/s against %.0f (%.2fx).\n", m, f, n, b, f / n, rf, rn, rf / rn
			}'
		fi
	done
	echo
	echo "\"other work\": CPU that processes other than the server, Kafka and the load generator took during each round's window, in % of a core. \"failed\": answers other than 2xx and client errors, over the rounds."
	echo
	echo "Reports: $OUT"
} | tee "$OUT/summary.md"
