#!/usr/bin/env bash
# Checks the checker (issue 4): a tool check, not a CI gate; make test does
# not run it.
#
# 1. inlet bench http agrees with wrk (Debian's): both load the no-op server
#    (cmd/noop, core 0, GOMAXPROCS=1) from core 1, one thread each, closed
#    loop with the same connections (CONNS_LIST) and the same body (EVENTS
#    events of about 100 bytes), interleaved, ROUNDS times. Prints the ratio
#    of inlet bench's req/s to wrk's; fails (exit 1) if one is outside
#    0.9-1.1.
# 2. Open-loop latency grows when the server stalls: the no-op server stalls
#    for STALL every STALL_EVERY requests (as in a stop-the-world pause).
#    inlet bench http --rate RATE, an open loop, must show it in its p99
#    (at least half of STALL, else exit 1): at RATE, about RATE*STALL of
#    every STALL_EVERY requests are due during a stall. A closed loop on the
#    same connections hides it: only the requests in flight (STALL_CONNS of
#    every STALL_EVERY) wait, so inlet bench's closed-loop p99 stays low.
#    wrk's is printed beside: wrk 4 corrects its closed-loop histogram after
#    the run (stats_correct: for each answer that took more than twice the
#    mean interval per connection, it adds the samples the requests it could
#    not send would have had), so its p99 shows the stall, as an estimate.
#
# Usage: scripts/check-bench.sh
# Environment: DURATION=10s WARMUP=2s CONNS_LIST="10 50 100" ROUNDS=3 EVENTS=5
#   STALL=200ms STALL_EVERY=20000 STALL_CONNS=100 RATE=10000
#   BENCH_OUT=dir for the reports (default /tmp/inlet-check-bench-<time>)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-2s}"
CONNS_LIST="${CONNS_LIST:-10 50 100}"
ROUNDS="${ROUNDS:-3}"
EVENTS="${EVENTS:-5}"
STALL="${STALL:-200ms}"
STALL_EVERY="${STALL_EVERY:-20000}"
STALL_CONNS="${STALL_CONNS:-100}"
RATE="${RATE:-10000}"
OUT="${BENCH_OUT:-/tmp/inlet-check-bench-$(date +%Y%m%d-%H%M%S)}"
WORK="$(mktemp -d)"
mkdir -p "$OUT"

log() { echo "check-bench: $*" >&2; }
die() {
	echo "check-bench: error: $*" >&2
	exit 1
}
if ! command -v wrk >/dev/null; then
	log "installing wrk"
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	"${sudo[@]}" apt-get install -y -q wrk >/dev/null 2>&1 ||
		{ "${sudo[@]}" apt-get update -q >/dev/null && "${sudo[@]}" apt-get install -y -q wrk >/dev/null; }
fi
for tool in wrk taskset jq curl; do
	command -v "$tool" >/dev/null || die "$tool is needed (Debian: apt-get install wrk util-linux jq curl)"
done

SERVER_PID=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
	rm -rf "$WORK"
}
trap cleanup EXIT

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
log "load average before: $LOAD_BEFORE; reports go to $OUT"
if awk '{ exit !($1 > 1) }' /proc/loadavg; then
	log "warning: the load average is $LOAD_BEFORE: other work on this machine will skew the figures"
fi
CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet
CGO_ENABLED=0 go build -o "$WORK/noop" ./cmd/noop

# The body: EVENTS events of about 100 bytes, the same for both tools.
body="["
for i in $(seq 1 "$EVENTS"); do
	[ "$i" -gt 1 ] && body+=","
	body+="{\"event\":\"page_view\",\"id\":\"check-$i\",\"uid\":\"user-$i\",\"props\":{\"path\":\"/products/12$i\",\"ref\":\"home\"}}"
done
body+="]"
printf %s "$body" >"$WORK/body.json"
cat >"$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$body'
LUA
log "body: $(wc -c <"$WORK/body.json") bytes, $EVENTS events"

noop() {
	local port="$1"
	shift
	taskset -c 0 env GOMAXPROCS=1 "$WORK/noop" --listen "127.0.0.1:$port" "$@" >"$OUT/noop-$port.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 1 100); do
		curl -sf -o /dev/null "http://127.0.0.1:$port/" && return 0
		sleep 0.1
	done
	die "the no-op server did not start; see $OUT/noop-$port.log"
}
stop_noop() {
	kill -TERM "$SERVER_PID"
	wait "$SERVER_PID" || true
	SERVER_PID=
}

# The machine is shared: each run measures the CPU that other work took
# meanwhile, all CPU time (/proc/stat) less that of the server and the load
# generator, and reports it.
HZ="$(getconf CLK_TCK)"
pid_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# snapshot: the CPU counters now, in SNAP: all busy time (ticks), the
# server's (ticks), this script's finished children's (s), the time.
snapshot() {
	times >"$WORK/times" # in this shell: a subshell has no children of ours
	SNAP="$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat) $(pid_ticks "${SERVER_PID:-0}")"
	SNAP+=" $(awk 'function s(t) { split(t, a, "m"); return a[1] * 60 + a[2] } NR == 2 { print s($1) + s($2) }' "$WORK/times") $(date +%s.%N)"
}
# other_cpu BEFORE AFTER: the CPU other work took between two snapshots, in % of a core.
other_cpu() {
	awk -v hz="$HZ" -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y)
		o = ((y[1] - x[1]) - (y[2] - x[2])) / hz - (y[3] - x[3])
		printf "%.0f", (o > 0 ? o : 0) / (y[4] - x[4]) * 100 }'
}
declare -A OTHER
# measure NAME CMD...: runs CMD, and the other work meanwhile into OTHER[NAME].
measure() {
	local name="$1" before rc=0
	shift
	snapshot
	before="$SNAP"
	"$@" || rc=$?
	snapshot
	OTHER[$name]="$(other_cpu "$before" "$SNAP")"
	return "$rc"
}

# wrk_run NAME CONNS URL: a warmup, then the measured run.
wrk_run() {
	taskset -c 1 wrk -t 1 -c "$2" -d "$WARMUP" -s "$WORK/post.lua" "$3" >/dev/null
	measure "$1" taskset -c 1 wrk -t 1 -c "$2" -d "$DURATION" --latency -s "$WORK/post.lua" "$3" >"$OUT/$1.txt"
}
wrk_rps() { awk '/^Requests\/sec/ {print $2}' "$1"; }
# wrk_p99 FILE: wrk's p99 in ms.
wrk_p99() {
	awk '$1 == "99%" { v = $2; u = v; sub(/[a-z]+$/, "", v); sub(/^[0-9.]+/, "", u)
		if (u == "us") v /= 1000; else if (u == "s") v *= 1000; else if (u == "m") v *= 60000
		print v }' "$1"
}
# inlet_run NAME ARGS...: inlet bench http on core 1 with the same body.
inlet_run() {
	local name="$1"
	shift
	measure "$name" taskset -c 1 "$WORK/inlet" bench http --body-file "$WORK/body.json" --events "$EVENTS" \
		--warmup "$WARMUP" --duration "$DURATION" --json "$OUT/$name.json" --html "$OUT/$name.html" "$@" \
		>"$OUT/$name.txt" 2>>"$OUT/load.log" || die "$name: inlet bench http failed; see $OUT/$name.txt"
}

status=0
port=18680
noop "$port"
url="http://127.0.0.1:$port/v1/batch"
declare -A WRK INLET
table="| connections | wrk req/s | inlet bench req/s | ratio | wrk p99 | inlet bench p99 | other work |
|---|---|---|---|---|---|---|"
for c in $CONNS_LIST; do
	w_sum=0 i_sum=0 w_p99="" i_p99="" other=""
	for r in $(seq 1 "$ROUNDS"); do
		# Interleaved, and each tool first in every other round.
		if [ $((r % 2)) -eq 1 ]; then
			log "$c connections, round $r: wrk, then inlet bench"
			wrk_run "wrk-c$c-r$r" "$c" "$url"
			inlet_run "inlet-c$c-r$r" --target "$url" --concurrency "$c"
		else
			log "$c connections, round $r: inlet bench, then wrk"
			inlet_run "inlet-c$c-r$r" --target "$url" --concurrency "$c"
			wrk_run "wrk-c$c-r$r" "$c" "$url"
		fi
		w="$(wrk_rps "$OUT/wrk-c$c-r$r.txt")"
		i="$(jq -r .requests_per_s "$OUT/inlet-c$c-r$r.json")"
		other+="${OTHER[wrk-c$c-r$r]}% ${OTHER[inlet-c$c-r$r]}% "
		log "  wrk $w req/s, inlet bench $i req/s; other work took ${OTHER[wrk-c$c-r$r]}% and ${OTHER[inlet-c$c-r$r]}% of a core"
		w_sum="$(awk -v a="$w_sum" -v b="$w" 'BEGIN { print a + b }')"
		i_sum="$(awk -v a="$i_sum" -v b="$i" 'BEGIN { print a + b }')"
		w_p99+="$(wrk_p99 "$OUT/wrk-c$c-r$r.txt") "
		i_p99+="$(jq -r .latency.p99_ms "$OUT/inlet-c$c-r$r.json") "
	done
	WRK[$c]="$(awk -v s="$w_sum" -v n="$ROUNDS" 'BEGIN { print s / n }')"
	INLET[$c]="$(awk -v s="$i_sum" -v n="$ROUNDS" 'BEGIN { print s / n }')"
	ratio="$(awk -v a="${INLET[$c]}" -v b="${WRK[$c]}" 'BEGIN { printf "%.3f", a / b }')"
	verdict="ok"
	if awk -v x="$ratio" 'BEGIN { exit !(x < 0.9 || x > 1.1) }'; then
		verdict="OUTSIDE 0.9-1.1"
		status=1
	fi
	table+="
$(printf '| %s | %.0f | %.0f | %s (%s) | %s ms | %s ms | %s |' "$c" "${WRK[$c]}" "${INLET[$c]}" "$ratio" "$verdict" "${w_p99% }" "${i_p99% }" "${other% }")"
done
stop_noop

# Part 2: a stalling server.
port=$((port + 1))
url="http://127.0.0.1:$port/v1/batch"
log "stalling server: $STALL every $STALL_EVERY requests; $STALL_CONNS connections"
noop "$port" --stall-every "$STALL_EVERY" --stall "$STALL"
log "  wrk (closed loop, corrected)"
wrk_run wrk-stall "$STALL_CONNS" "$url"
log "  inlet bench, closed loop"
inlet_run inlet-stall-closed --target "$url" --concurrency "$STALL_CONNS"
log "  inlet bench, open loop at $RATE req/s"
inlet_run inlet-stall-open --target "$url" --rate "$RATE" --connections "$STALL_CONNS"
stop_noop
stall_ms="$(awk -v s="$STALL" 'BEGIN { v = s; sub(/[a-z]+$/, "", v); if (s ~ /ms$/) print v; else if (s ~ /s$/) print v * 1000; else print v }')"
open_p99="$(jq -r .latency.p99_ms "$OUT/inlet-stall-open.json")"
stall_verdict="ok: the open loop sees the stalls"
if awk -v p="$open_p99" -v s="$stall_ms" 'BEGIN { exit !(p < s / 2) }'; then
	stall_verdict="FAILED: the open loop's p99 is under half the stall"
	status=1
fi
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

{
	echo "Machine: $(nproc --all) vCPU $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), Linux $(uname -r), $(go version | awk '{print $3}'), $(wrk -v 2>&1 | head -n 1 | awk '{print $1, $2}'). $(date -u +%Y-%m-%d), load average $LOAD_BEFORE before, $LOAD_AFTER after."
	echo
	echo '```sh'
	echo "scripts/check-bench.sh    # DURATION=$DURATION WARMUP=$WARMUP CONNS_LIST=\"$CONNS_LIST\" ROUNDS=$ROUNDS STALL=$STALL STALL_EVERY=$STALL_EVERY RATE=$RATE"
	echo '```'
	echo
	echo "1. Closed loop on the no-op server (core 0, GOMAXPROCS=1), both tools on core 1 with one thread, the same $(wc -c <"$WORK/body.json")-byte body, $DURATION after $WARMUP warmup, interleaved, mean of $ROUNDS rounds (p99 per round):"
	echo
	echo "$table"
	echo
	echo "2. The no-op server stalling $STALL every $STALL_EVERY requests, $STALL_CONNS connections:"
	echo
	echo "| load | req/s | p50 | p99 | max | other work |"
	echo "|---|---|---|---|---|---|"
	printf '| wrk (closed loop, its histogram corrected after the run) | %s | %s | %s ms | %s | %s%% |\n' "$(wrk_rps "$OUT/wrk-stall.txt")" \
		"$(awk '$1 == "50%" {print $2}' "$OUT/wrk-stall.txt")" "$(wrk_p99 "$OUT/wrk-stall.txt")" "$(awk '/^ +Latency/ {print $4}' "$OUT/wrk-stall.txt")" "${OTHER[wrk-stall]}"
	for n in closed open; do
		jq -r --arg n "$n" --arg o "${OTHER[inlet-stall-$n]}" '"| inlet bench http (\(if $n == "open" then "open loop at \(.rate) req/s" else "closed loop" end)) | \(.requests_per_s | floor) | \(.latency.p50_ms * 100 | round / 100) ms | \(.latency.p99_ms * 100 | round / 100) ms | \(.latency.max_ms * 100 | round / 100) ms | \($o)% |"' "$OUT/inlet-stall-$n.json"
	done
	echo
	echo "\"other work\": CPU that other processes on this shared machine took during each measured run, in % of a core (all CPU time less the no-op server's and the load generator's); a run with much of it is disturbed."
	echo
	echo "$stall_verdict (p99 $open_p99 ms; stall $stall_ms ms). inlet bench's closed loop shows what a closed loop measures: only the requests in flight during a stall wait. wrk's p99 is its closed-loop histogram after wrk 4's correction (stats_correct adds, for each answer slower than twice the mean interval per connection, the samples of the requests it did not send meanwhile): an estimate of what the open loop measures. Reports: $OUT"
} | tee "$OUT/summary.md"
[ "$status" -eq 0 ] || log "FAILED: see above"
exit "$status"
