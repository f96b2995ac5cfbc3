#!/usr/bin/env bash
# The fleet proof: HAProxy (deploy/haproxy/haproxy.cfg, as it is) in front
# of 3 inlet instances on a private 3-node Kafka cluster
# (scripts/kafka-cluster.sh: replication 3, min.insync.replicas=2; inlet's
# producers use acks=all and idempotence by default), with `inlet verify`
# sending its load through HAProxy. For --ack spool, then --ack kafka, two
# phases, each one `inlet verify` run:
#
#   rolling  each instance in turn, as a rolling deploy does: SIGTERM
#            (inlet drains for --shutdown-delay, then stops), wait for its
#            exit, start it again on the same data dir, wait until HAProxy
#            has it up again;
#   crash    kill -9 of one instance; once HAProxy has it down, start it
#            again on the same data dir and wait until it is up.
#
# It fails when an acknowledged event was lost (or verify or an instance
# failed), printing every instance's and HAProxy's log. It prints a
# Markdown summary (also in $FLEET_OUT/summary.md): events sent,
# acknowledged, lost, duplicates, requests not answered 2xx, and verify's
# ack_gaps, the longest time without a 2xx answer at HAProxy. Gaps are
# reported, not judged (the goal is none of 1 s or more while rolling).
#
# Usage: scripts/fleet.sh [--containers]
#   --containers  the instances are podman containers of the image (built
#                 with `make image` unless FLEET_IMAGE names one), each with
#                 a volume of its own, run with scripts/image.sh's options;
#                 restarts are `podman stop -t N`, `podman kill -s KILL` and
#                 `podman start`.
#
# Environment: FLEET_ACKS ("spool kafka"), FLEET_RATE (events/s, 5 per
# request; 200), FLEET_DELAY (--shutdown-delay; 2s), FLEET_ROLLING and
# FLEET_CRASH (seconds of load of each phase; 30 and 15), FLEET_OUT
# (reports and logs; default /tmp/inlet-fleet-<time>, kept), FLEET_IMAGE,
# FLEET_HAPROXY_CFG (another HAProxy configuration, for experiments).
# Installs HAProxy (Debian's) when it is missing. make test runs it (about
# 2 to 4 minutes on 2 cores, starting Kafka included).
set -euo pipefail

FLEET_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=kafka.sh
source "$FLEET_REPO/scripts/kafka.sh" # helpers only: apt_install, free_port, alive
cd "$FLEET_REPO"

log() { printf 'fleet.sh: %s\n' "$*" >&2; }
die() {
	printf 'fleet.sh: error: %s\n' "$*" >&2
	exit 1
}

MODE=processes
case "${1:-}" in
"") ;;
--containers) MODE=containers ;;
*) die "usage: scripts/fleet.sh [--containers]" ;;
esac
ACKS="${FLEET_ACKS:-spool kafka}"
RATE="${FLEET_RATE:-200}"
DELAY="${FLEET_DELAY:-2s}"
ROLLING="${FLEET_ROLLING:-30}"
CRASH="${FLEET_CRASH:-15}"
OUT="${FLEET_OUT:-/tmp/inlet-fleet-$(date +%Y%m%d-%H%M%S)}"
SHUTDOWN_TIMEOUT=20s
LEAD=3 # seconds of load before the first restart of a phase
CFG="${FLEET_HAPROXY_CFG:-$FLEET_REPO/deploy/haproxy/haproxy.cfg}"
for v in RATE ROLLING CRASH; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "FLEET_$v must be a positive whole number, not '${!v}'"
done
for a in $ACKS; do [[ $a == spool || $a == kafka ]] || die "FLEET_ACKS: spool and kafka only, not '$a'"; done

command -v curl >/dev/null || apt_install curl
command -v jq >/dev/null || apt_install jq
command -v haproxy >/dev/null || apt_install haproxy
if [ "$MODE" = containers ]; then
	command -v podman >/dev/null || apt_install podman runc
fi
# docs/fleet.md's commands, as written.
scripts/doc-commands.sh docs/fleet.md | bash -euo pipefail >/dev/null

mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/inlet-fleet-work.XXXXXX)"
FAILED=1 # until the end is reached
HAPROXY_PID=
declare -A PID=() CONTAINER=()
declare -A RETRIED=()
ACK= TOPIC= STOPPER= RC= LINE= RETRIES0=

inst_log() { echo "$OUT/$ACK-inlet$1.log"; }
dump_logs() {
	local f
	log "logs (the last 150 lines of each; all in $OUT):"
	for f in "$OUT"/*.log; do
		[ -f "$f" ] || continue
		printf '\n===== %s =====\n' "$f" >&2
		tail -n 150 "$f" >&2
	done
}
cleanup() {
	local i
	for i in "${!PID[@]}"; do kill -KILL "${PID[$i]}" 2>/dev/null || true; done
	for i in "${!CONTAINER[@]}"; do save_container_log "$i"; done
	for i in "${!CONTAINER[@]}"; do podman rm -f "${CONTAINER[$i]}" >/dev/null 2>&1 || true; done
	for i in "${!CONTAINER[@]}"; do podman volume rm -f "${CONTAINER[$i]}" >/dev/null 2>&1 || true; done
	[ -n "$HAPROXY_PID" ] && kill "$HAPROXY_PID" 2>/dev/null || true
	if [ "$FAILED" = 1 ]; then dump_logs; fi
	KAFKA_DIR="$WORK/kafka" "$FLEET_REPO/scripts/kafka-cluster.sh" cluster-stop >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# ------------------------------------------------------------ build, Kafka --

log "building inlet ($MODE); reports and logs go to $OUT"
CGO_ENABLED=0 go build -o "$WORK/inlet" ./cmd/inlet
INLET="$WORK/inlet"
IMAGE="${FLEET_IMAGE:-}"
if [ "$MODE" = containers ] && [ -z "$IMAGE" ]; then
	make image VERSION=fleet-proof >"$OUT/image-build.log" 2>&1 || die "make image failed; see $OUT/image-build.log"
	IMAGE=inlet:fleet-proof
fi

log "starting a 3-node Kafka cluster"
t0="$(now)"
BROKERS="$(KAFKA_DIR="$WORK/kafka" scripts/kafka-cluster.sh cluster-start | sed -n 's/^PLAINTEXT=//p')"
[ -n "$BROKERS" ] || die "the cluster printed no PLAINTEXT addresses"
log "Kafka cluster at $BROKERS, up in $(since "$t0") s"

# ----------------------------------------------------------------- HAProxy --

declare -A PORT=()
used=" "
port() {
	local p
	p="$(free_port)"
	while [[ $used == *" $p "* ]]; do p="$(free_port)"; done
	used+="$p "
	echo "$p"
}
LB="$(port)"
STATS="$(port)"
for i in 1 2 3; do PORT[$i]="$(port)"; done
export INLET_LB_LISTEN="127.0.0.1:$LB" INLET_LB_STATS="127.0.0.1:$STATS"
export INLET_1="127.0.0.1:${PORT[1]}" INLET_2="127.0.0.1:${PORT[2]}" INLET_3="127.0.0.1:${PORT[3]}"
haproxy -c -q -f "$CFG" || die "haproxy -c -f $CFG failed"
haproxy -db -f "$CFG" >"$OUT/haproxy.log" 2>&1 &
HAPROXY_PID=$!

# state NAME: the HAProxy status of server NAME (UP, DOWN, "UP 1/2", ...).
state() {
	curl -sf -m 2 "http://127.0.0.1:$STATS/stats;csv" | awk -F, -v s="$1" '$1 == "inlet" && $2 == s { print $18 }'
}
for ((j = 0; ; j++)); do
	curl -sf -o /dev/null -m 2 "http://127.0.0.1:$STATS/stats;csv" && break
	alive "$HAPROXY_PID" || die "haproxy exited at start; see $OUT/haproxy.log"
	((j < 100)) || die "haproxy's stats page did not answer within 10 s"
	sleep 0.1
done

# retries: HAProxy's retries on the same instance and on another one
# (redispatches) so far: "wretr wredis" of the backend.
retries() {
	curl -sf -m 2 "http://127.0.0.1:$STATS/stats;csv" | awk -F, '$1 == "inlet" && $2 == "BACKEND" { print $16 + 0, $17 + 0 }'
}

# wait_up NAME SECONDS: until HAProxy has NAME fully up.
wait_up() {
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		[ "$(state "$1")" = UP ] && return 0
		sleep 0.05
	done
	die "HAProxy did not have $1 up within $2 s (its state: $(state "$1"))"
}

# ---------------------------------------------------------------- instances --

# One abstraction over both modes: start, stop (SIGTERM, in the
# background: STOPPER is its pid), kill -9, exit status, log.
inst_args() {
	local data=()
	[ "$MODE" = processes ] && data=(--data-dir "$WORK/$ACK-$1")
	echo serve --listen "127.0.0.1:${PORT[$1]}" "${data[@]}" --brokers "$BROKERS" --topic "$TOPIC" --ack "$ACK" \
		--shutdown-delay "$DELAY" --shutdown-timeout "$SHUTDOWN_TIMEOUT"
}
inst_start() {
	local i="$1"
	# shellcheck disable=SC2046 # the arguments hold no spaces
	if [ "$MODE" = processes ]; then
		printf '\n===== fleet.sh: start %s =====\n' "$(date '+%T.%N')" >>"$(inst_log "$i")"
		"$INLET" $(inst_args "$i") >>"$(inst_log "$i")" 2>&1 &
		PID[$i]=$!
	elif [ -n "${CONTAINER[$i]:-}" ]; then
		podman start "${CONTAINER[$i]}" >/dev/null
	else
		CONTAINER[$i]="inlet-fleet-$ACK-$i-$$"
		scripts/image.sh run -d --name "${CONTAINER[$i]}" -v "${CONTAINER[$i]}:/var/lib/inlet" "$IMAGE" $(inst_args "$i") >/dev/null
	fi
}
inst_stop() {
	if [ "$MODE" = processes ]; then
		kill -TERM "${PID[$1]}"
		STOPPER="${PID[$1]}"
	else
		# podman stop sends SIGTERM, then SIGKILL after -t seconds.
		podman stop -t 30 "${CONTAINER[$1]}" >/dev/null &
		STOPPER=$!
	fi
}
inst_kill() {
	if [ "$MODE" = processes ]; then
		kill -KILL "${PID[$1]}"
	else
		podman kill -s KILL "${CONTAINER[$1]}" >/dev/null
	fi
}
# inst_exit I: waits for instance I to end; RC is its exit status. (Not
# in a subshell: wait needs the shell that started it.)
inst_exit() {
	RC=0
	if [ "$MODE" = processes ]; then
		{ wait "${PID[$1]}" || RC=$?; } 2>/dev/null # no "Killed" line from bash
		unset "PID[$1]"
	else
		[ -z "${STOPPER:-}" ] || wait "$STOPPER" || true
		podman wait "${CONTAINER[$1]}" >/dev/null 2>&1 || true
		RC="$(podman inspect -f '{{.State.ExitCode}}' "${CONTAINER[$1]}")"
	fi
	STOPPER=
}
save_container_log() {
	[ -n "${CONTAINER[$1]:-}" ] && podman logs "${CONTAINER[$1]}" >"$OUT/$ACK-inlet$1.log" 2>&1 || true
}

# restart I: a rolling deploy's step for instance I; LINE says what it saw.
restart() {
	local i="$1" t down= exited up
	t="$(now)"
	inst_stop "$i"
	while alive "$STOPPER"; do
		[ -z "$down" ] && [ "$(state "inlet$i")" = DOWN ] && down="$(since "$t")"
		sleep 0.05
	done
	exited="$(since "$t")"
	inst_exit "$i"
	[ "$RC" = 0 ] || die "inlet$i exited $RC after SIGTERM, want 0"
	if [ -n "$down" ]; then
		down="HAProxy had it DOWN after ${down} s"
	else
		down="HAProxy had it $(state "inlet$i") still"
	fi
	inst_start "$i"
	wait_up "inlet$i" 120
	up="$(since "$t")"
	LINE="inlet$i: SIGTERM, exited 0 after ${exited} s ($down), UP again after ${up} s"
}

# crash I: kill -9 of instance I, started again once HAProxy has it down;
# LINE says what it saw.
crash() {
	local i="$1" t down= up j
	t="$(now)"
	inst_kill "$i"
	inst_exit "$i"
	for ((j = 0; j < 200; j++)); do
		[ "$(state "inlet$i")" = DOWN ] && { down="$(since "$t")"; break; }
		sleep 0.05
	done
	[ -n "$down" ] || die "HAProxy did not have inlet$i down within 10 s of its kill -9"
	inst_start "$i"
	wait_up "inlet$i" 120
	up="$(since "$t")"
	LINE="inlet$i: kill -9 (exit $RC), HAProxy had it DOWN after ${down} s, started again, UP after ${up} s"
}

# verify_start NAME SECONDS: inlet verify through HAProxy in the background
# (VERIFY is its pid), its report in $OUT/NAME.json.
verify_start() {
	"$INLET" verify --target "http://127.0.0.1:$LB" --brokers "$BROKERS" --topic "$TOPIC" \
		--duration "${2}s" --rate "$RATE" --batch 5 --concurrency 16 --timeout 20s --settle 60s \
		>"$OUT/$1.json" 2>"$OUT/$1-verify.log" &
	VERIFY=$!
	VERIFY_T0="$(now)"
	RETRIES0="$(retries)"
}
# verify_end NAME SECONDS: waits for it; fails on loss, or without a report.
verify_end() {
	local rc=0 took
	took="$(since "$VERIFY_T0")"
	awk -v a="$took" -v b="$2" 'BEGIN { exit !(a > b) }' &&
		log "warning: $1: the restarts ended ${took} s into the load of $2 s: raise the phase's seconds"
	wait "$VERIFY" || rc=$?
	jq -e .sent "$OUT/$1.json" >/dev/null 2>&1 || die "$1: inlet verify printed no report (exit $rc); see $OUT/$1-verify.log"
	log "$1: $(jq -c '{sent, acknowledged, lost, duplicates, status, ack_gaps: .ack_gaps.longest, after: .ack_gaps.longest_after}' "$OUT/$1.json")"
	[ "$(jq .lost "$OUT/$1.json")" = 0 ] || die "$1: $(jq .lost "$OUT/$1.json") acknowledged events lost: $(jq -c .lost_ids "$OUT/$1.json")"
	[ "$rc" = 0 ] || die "$1: inlet verify exited $rc; see $OUT/$1-verify.log"
	local r0 d0 r1 d1
	read -r r0 d0 <<<"$RETRIES0"
	read -r r1 d1 <<<"$(retries)"
	RETRIED[$1]="$((r1 - r0 + d1 - d0))"
}

SUMMARY=()
NOTES=()
for ACK in $ACKS; do
	TOPIC="fleet-$ACK"
	log "--ack $ACK: starting inlet1..3 (--shutdown-delay $DELAY) behind HAProxy on 127.0.0.1:$LB"
	for i in 1 2 3; do inst_start "$i"; done
	for i in 1 2 3; do wait_up "inlet$i" 120; done
	# The topic is made by the first records (3 replicas): before the load.
	for ((j = 0; ; j++)); do
		curl -sf -o /dev/null -m 15 -H 'Content-Type: application/json' --data '[{"event":"fleet_warm"}]' \
			"http://127.0.0.1:$LB/v1/batch" && break
		((j < 60)) || die "--ack $ACK: nothing acknowledged through HAProxy within a minute"
		sleep 1
	done

	name="$MODE-$ACK-rolling"
	log "$name: inlet verify at $RATE events/s for $ROLLING s through HAProxy; restarting inlet1, inlet2, inlet3 in turn"
	verify_start "$name" "$ROLLING"
	sleep "$LEAD"
	for i in 1 2 3; do
		restart "$i"
		log "$name: $LINE"
		NOTES+=("$name: $LINE")
	done
	verify_end "$name" "$ROLLING"
	SUMMARY+=("$name")

	name="$MODE-$ACK-crash"
	log "$name: inlet verify at $RATE events/s for $CRASH s through HAProxy; kill -9 of inlet2"
	verify_start "$name" "$CRASH"
	sleep "$LEAD"
	crash 2
	log "$name: $LINE"
	NOTES+=("$name: $LINE")
	verify_end "$name" "$CRASH"
	SUMMARY+=("$name")

	for i in 1 2 3; do
		inst_stop "$i"
		inst_exit "$i"
		[ "$RC" = 0 ] || die "--ack $ACK: inlet$i exited $RC at the end, want 0"
		if [ "$MODE" = containers ]; then
			save_container_log "$i"
			podman rm -f "${CONTAINER[$i]}" >/dev/null
			podman volume rm -f "${CONTAINER[$i]}" >/dev/null
			unset "CONTAINER[$i]"
		fi
	done
done

{
	echo "Fleet proof, $MODE: HAProxy $(haproxy -v | awk 'NR == 1 { print $3 }') (deploy/haproxy/haproxy.cfg) in front of 3 inlet instances (--shutdown-delay $DELAY), a 3-node Kafka cluster (replication 3, min.insync.replicas=2), \`inlet verify --rate $RATE --batch 5 --concurrency 16\` through HAProxy; $(date -u +%Y-%m-%d), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
	echo
	echo '```sh'
	echo "scripts/fleet.sh$([ "$MODE" = containers ] && echo " --containers")    # FLEET_RATE=$RATE FLEET_DELAY=$DELAY FLEET_ROLLING=$ROLLING FLEET_CRASH=$CRASH"
	echo '```'
	echo
	echo "| run | sent | acknowledged | lost | duplicates | not 2xx | longest gap without a 2xx (from) | gaps of 1 s or more | requests HAProxy sent again |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for name in "${SUMMARY[@]}"; do
		jq -r --arg n "$name" --arg r "${RETRIED[$name]}" '"| \($n) | \(.sent) | \(.acknowledged) | \(.lost) | \(.duplicates) | \([.status | to_entries[] | select(.key | test("^2[0-9][0-9]$") | not) | .value] | add // 0) | \(.ack_gaps.longest) (\(.ack_gaps.longest_after)) | \(.ack_gaps.at_least_1s) | \($r) |"' "$OUT/$name.json"
	done
	echo
	for n in "${NOTES[@]}"; do echo "- $n"; done
} | tee "$OUT/summary.md"
FAILED=0
log "no acknowledged event lost; took $SECONDS s; reports and logs in $OUT"
