#!/usr/bin/env bash
# Provision a real single-node Apache Kafka broker (KRaft mode) for
# integration tests, from jars fetched off Maven Central (no Docker, no
# tarball download).
#
# Usage: scripts/kafka.sh start|stop|status|fetch|halt|resume|wipe
#        scripts/kafka.sh cluster-start|cluster-stop|cluster-status|node-stop ID|node-start ID|node-kill ID
#
#   The cluster-* and node-* verbs run scripts/kafka-cluster.sh: an N-node
#   (default 3) KRaft cluster with PLAINTEXT, SASL_SSL (SCRAM) and SSL
#   (client auth) listeners; see that script. Its KAFKA_DIR defaults to
#   $INLET_CACHE/kafka-cluster, apart from the single broker's.
#
#   fetch   download kafka_2.13:$KAFKA_VERSION + runtime deps + Log4j 2 binding
#           into $INLET_CACHE/kafka-$KAFKA_VERSION/libs (skipped when present)
#   start   fetch if needed, start the broker on free loopback ports, wait until
#           it answers a metadata request, print "127.0.0.1:PORT" as the last
#           stdout line and write it to $KAFKA_DIR/bootstrap. If a broker from
#           this KAFKA_DIR is already running and answering, just print it.
#   stop    SIGTERM (then SIGKILL after 30 s) and delete the data dir; OK when
#           nothing is running
#   status  exit 0 (and print the address) if running and answering, else 1
#           (a halted broker counts as not running)
#   halt    stop the broker (SIGTERM, SIGKILL after 30 s) but keep its data
#           dir, config, ports and bootstrap file so that "resume" brings back
#           the same broker with the same topics and data; OK when already
#           halted; prints nothing on stdout. For fault tests.
#   resume  restart a halted broker from the same config/data/ports (no
#           re-format), wait until it answers a metadata request and print
#           "127.0.0.1:PORT" as the last stdout line; fails if there is nothing
#           to resume, if a port was taken meanwhile, or on timeout. If the
#           broker is already running and answering, just print it.
#   wipe    stop the broker, delete its data, format the storage again with a
#           new cluster id and start it on the same ports: a broker wiped and
#           re-formatted at the same address, for fault tests. Prints
#           "127.0.0.1:PORT" as the last stdout line; fails like resume when
#           there is no broker state or a port was taken meanwhile.
#
# Environment:
#   INLET_CACHE          cache root (default: <repo>/.cache, gitignored)
#   KAFKA_VERSION        org.apache.kafka:kafka_2.13 version (default 4.4.0)
#   KAFKA_DIR            runtime dir (default: $INLET_CACHE/kafka-run)
#   KAFKA_HEAP_OPTS      JVM heap (default: -Xmx512m -Xms256m)
#   KAFKA_START_TIMEOUT  seconds to wait for readiness (default 90)
#   KAFKA_NUM_PARTITIONS default partitions of auto-created topics (default 3)
#   KAFKA_MVN_ARGS       extra arguments for mvn (e.g. -Dmaven.repo.local=...)
#   KAFKA_EXTRA_PROPS    lines appended to the broker's server.properties
#                        (later keys win), e.g. retention for a broker in memory
#
# Progress goes to stderr; stdout carries only the address.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INLET_CACHE="${INLET_CACHE:-$REPO/.cache}"
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
KAFKA_DIR="${KAFKA_DIR:-$INLET_CACHE/kafka-run}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_NUM_PARTITIONS="${KAFKA_NUM_PARTITIONS:-3}"
KAFKA_MVN_ARGS="${KAFKA_MVN_ARGS:-}"
KAFKA_EXTRA_PROPS="${KAFKA_EXTRA_PROPS:-}"

DIST_DIR="$INLET_CACHE/kafka-$KAFKA_VERSION"
LIBS="$DIST_DIR/libs"
MARKER="$DIST_DIR/.fetched"
POM="$REPO/scripts/kafka/pom.xml"
LOG4J_CONF="$REPO/scripts/kafka/log4j2.properties"
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

PID_FILE="$KAFKA_DIR/kafka.pid"
ADDR_FILE="$KAFKA_DIR/bootstrap"
PORTS_FILE="$KAFKA_DIR/ports"
DATA_DIR="$KAFKA_DIR/data"
PROPS="$KAFKA_DIR/server.properties"
SERVER_LOG="$KAFKA_DIR/server.log"
HALTED_FILE="$KAFKA_DIR/halted"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() {
	printf 'kafka.sh: error: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------- installs --

APT_UPDATED=0
apt_install() {
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 || die "need root or sudo to apt-get install $*"
		sudo=(sudo)
	fi
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* manually"
	if [[ $APT_UPDATED -eq 0 ]]; then
		log "apt-get update"
		"${sudo[@]}" apt-get update -qq </dev/null >&2 || die "apt-get update failed"
		APT_UPDATED=1
	fi
	log "apt-get install $*"
	local out
	if ! out="$("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "$@" 2>&1 </dev/null)"; then
		printf '%s\n' "$out" >&2
		die "apt-get install $* failed"
	fi
}

ensure_java() { command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless; }
ensure_mvn() { command -v mvn >/dev/null 2>&1 || apt_install maven; }
ensure_kcat() { command -v kcat >/dev/null 2>&1 || apt_install kcat; }

# ------------------------------------------------------------------- fetch --

do_fetch() {
	if [[ -f $MARKER && -f $LIBS/kafka_2.13-$KAFKA_VERSION.jar ]]; then
		return 0
	fi
	ensure_java
	ensure_mvn
	[[ -f $POM ]] || die "missing $POM"
	log "fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and dependencies via Maven into $LIBS"
	mkdir -p "$DIST_DIR"
	local tmp="$DIST_DIR/libs.tmp.$$"
	rm -rf "$tmp"
	local -a extra=()
	# shellcheck disable=SC2206 # deliberate word splitting of user-provided args
	[[ -n $KAFKA_MVN_ARGS ]] && extra=($KAFKA_MVN_ARGS)
	# Output goes to a log (Debian's Maven 3.8 prints stray ANSI resets even
	# in batch mode); it is shown only on failure.
	local mvnlog="$DIST_DIR/mvn.log"
	if ! mvn -B -q -f "$POM" "${extra[@]}" \
		-Dkafka.version="$KAFKA_VERSION" \
		"$DEP_PLUGIN:copy-dependencies" \
		-DincludeScope=runtime \
		-DoutputDirectory="$tmp" </dev/null >"$mvnlog" 2>&1; then
		sed 's/\x1b\[[0-9;]*m//g' "$mvnlog" >&2
		rm -rf "$tmp"
		die "mvn could not fetch Kafka $KAFKA_VERSION (is it on Maven Central? try KAFKA_VERSION=4.1.1)"
	fi
	[[ -f $tmp/kafka_2.13-$KAFKA_VERSION.jar ]] || {
		rm -rf "$tmp"
		die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn copy-dependencies"
	}
	rm -rf "$LIBS"
	mv "$tmp" "$LIBS"
	touch "$MARKER"
	log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars ($(du -sh "$LIBS" | cut -f1))"
}

# ----------------------------------------------------------------- helpers --

# Print a currently free TCP port on 127.0.0.1.
free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()' && return 0
	fi
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 30000))
		if ! (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "could not find a free port"
}

# True when TCP port $1 on 127.0.0.1 can be bound by a new listener. Like the
# JVM's server sockets, use SO_REUSEADDR so TIME_WAIT leftovers of the previous
# broker do not count as "taken".
port_bindable() {
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$1" <<'PYEOF' 2>/dev/null
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen(1)
except OSError:
    sys.exit(1)
finally:
    s.close()
PYEOF
		return
	fi
	! (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null
}

# 22-char URL-safe base64 of 16 random bytes: the Kafka cluster id format.
# One that starts with '-' would be read as an option by kafka-storage
# (1 in 64): draw again.
random_cluster_id() {
	local id
	while :; do
		id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
		[[ $id != -* ]] && break
	done
	printf '%s\n' "$id"
}

# True while $1 is a live process (a zombie awaiting its reaper counts as dead).
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	[[ ${stat:0:1} != Z ]]
}

# Pid of our broker if it is alive, else empty (and exit status 1).
running_pid() {
	[[ -f $PID_FILE ]] || return 1
	local pid
	pid="$(cat "$PID_FILE" 2>/dev/null || true)"
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	alive "$pid" || return 1
	# Guard against pid reuse: it must be a JVM running kafka.Kafka.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
	echo "$pid"
}

# True when the broker at $1 answers a metadata request and lists itself.
answering() {
	local addr="$1" out
	out="$(kcat -b "$addr" -L -m 3 2>/dev/null)" || return 1
	grep -q "^ *1 brokers:" <<<"$out" && grep -q "broker 1 at $addr" <<<"$out"
}

java_opts() {
	# shellcheck disable=SC2206 # KAFKA_HEAP_OPTS is a space-separated list
	local heap=($KAFKA_HEAP_OPTS)
	JAVA_OPTS=(
		"${heap[@]}"
		-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
		-XX:+ExplicitGCInvokesConcurrent
		-Djava.awt.headless=true
		-Dlog4j2.configurationFile="$LOG4J_CONF"
		-Dkafka.logs.dir="$KAFKA_DIR"
	)
}

write_props() {
	local port="$1" cport="$2"
	cat >"$PROPS" <<EOF
# Generated by scripts/kafka.sh: throwaway single-node KRaft test broker.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$DATA_DIR
metadata.log.dir=$DATA_DIR

auto.create.topics.enable=true
num.partitions=$KAFKA_NUM_PARTITIONS
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=5
group.initial.rebalance.delay.ms=0
delete.topic.enable=true

# Keep it light on a 2-core CI box.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=1
EOF
	if [[ -n $KAFKA_EXTRA_PROPS ]]; then
		printf '\n# KAFKA_EXTRA_PROPS\n%s\n' "$KAFKA_EXTRA_PROPS" >>"$PROPS"
	fi
}

# ---------------------------------------------------------------- commands --

do_status() {
	local pid addr
	pid="$(running_pid)" || {
		if [[ -f $HALTED_FILE ]]; then
			log "halted (not running); \"resume\" brings it back at $(cat "$ADDR_FILE" 2>/dev/null || echo '?')"
		else
			log "not running"
		fi
		return 1
	}
	addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
	[[ -n $addr ]] || {
		log "pid $pid alive but $ADDR_FILE missing (still starting?)"
		return 1
	}
	ensure_kcat
	if answering "$addr"; then
		log "running (pid $pid) at $addr"
		echo "$addr"
		return 0
	fi
	log "pid $pid alive but $addr not answering"
	return 1
}

# SIGTERM the broker if running, SIGKILL after 30 s; wait until it is gone.
kill_broker() {
	local pid i
	pid="$(running_pid)" || return 1
	log "stopping broker (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "broker did not exit within 30 s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
	fi
	alive "$pid" && die "broker (pid $pid) still alive after SIGKILL"
	return 0
}

do_stop() {
	kill_broker || log "not running"
	rm -rf "$DATA_DIR"
	rm -f "$PID_FILE" "$ADDR_FILE" "$PORTS_FILE" "$HALTED_FILE"
}

# Launch kafka.Kafka on $PROPS in the background (log appended to $SERVER_LOG)
# and wait until $1 answers. On failure print the log tail and die; on timeout
# run $2 (a cleanup function) first.
launch_and_wait() {
	local addr="$1" cleanup="$2" pid
	local -a JAVA_OPTS
	java_opts
	java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$PROPS" \
		</dev/null >>"$SERVER_LOG" 2>&1 &
	pid=$!
	echo "$pid" >"$PID_FILE"

	local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
	until answering "$addr"; do
		if ! alive "$pid"; then
			log "broker exited during start-up; last log lines:"
			tail -n 40 "$SERVER_LOG" >&2 || true
			rm -f "$PID_FILE"
			if tail -n 200 "$SERVER_LOG" | grep -q 'Address already in use'; then
				die "kafka failed to start: a listener port (broker $addr or its controller) is in use by another process"
			fi
			die "kafka failed to start"
		fi
		if ((SECONDS >= deadline)); then
			log "broker not ready after ${KAFKA_START_TIMEOUT}s; last log lines:"
			tail -n 40 "$SERVER_LOG" >&2 || true
			"$cleanup" 2>/dev/null || true
			die "kafka start timed out"
		fi
		sleep 0.5
	done
	echo "$addr" >"$ADDR_FILE"
	log "ready (pid $pid); log: $SERVER_LOG"
}

# Leave the broker halted (process gone, state kept) after a failed resume.
rehalt() {
	kill_broker || true
	rm -f "$PID_FILE"
	touch "$HALTED_FILE"
}

do_halt() {
	if kill_broker; then
		:
	elif [[ -f $HALTED_FILE ]]; then
		log "already halted"
	fi
	rm -f "$PID_FILE"
	if [[ ! -f $PORTS_FILE || ! -f $DATA_DIR/meta.properties ]]; then
		rm -f "$HALTED_FILE"
		die "no broker state in $KAFKA_DIR to halt (run start first)"
	fi
	touch "$HALTED_FILE"
	log "halted; data kept in $DATA_DIR"
}

do_resume() {
	local addr pid port cport
	if pid="$(running_pid)"; then
		addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
		ensure_kcat
		if [[ -n $addr ]] && answering "$addr"; then
			log "already running (pid $pid) at $addr"
			rm -f "$HALTED_FILE"
			echo "$addr"
			return 0
		fi
		die "broker (pid $pid) is running but not answering; halt it first"
	fi
	if [[ ! -f $HALTED_FILE || ! -f $PORTS_FILE || ! -f $PROPS || ! -f $DATA_DIR/meta.properties ]]; then
		die "nothing to resume in $KAFKA_DIR (no halted broker; run start)"
	fi
	read -r port cport <"$PORTS_FILE" || true
	[[ $port =~ ^[0-9]+$ && $cport =~ ^[0-9]+$ ]] || die "bad $PORTS_FILE"
	addr="127.0.0.1:$port"
	local p
	for p in "$port" "$cport"; do
		port_bindable "$p" || die "cannot resume: port $p (from $PORTS_FILE) was taken by another process meanwhile"
	done

	do_fetch
	ensure_java
	ensure_kcat
	log "resuming Kafka $KAFKA_VERSION on $addr (controller 127.0.0.1:$cport)"
	printf '\n===== kafka.sh resume %s =====\n' "$(date '+%F %T')" >>"$SERVER_LOG"
	launch_and_wait "$addr" rehalt
	rm -f "$HALTED_FILE"
	echo "$addr"
}

do_wipe() {
	local addr port cport
	if [[ ! -f $PORTS_FILE || ! -f $PROPS ]]; then
		die "nothing to wipe in $KAFKA_DIR (run start first)"
	fi
	kill_broker || true
	rm -f "$PID_FILE"
	read -r port cport <"$PORTS_FILE" || true
	[[ $port =~ ^[0-9]+$ && $cport =~ ^[0-9]+$ ]] || die "bad $PORTS_FILE"
	addr="127.0.0.1:$port"
	rm -rf "$DATA_DIR"
	rm -f "$HALTED_FILE"
	local p
	for p in "$port" "$cport"; do
		port_bindable "$p" || die "cannot wipe: port $p (from $PORTS_FILE) was taken by another process meanwhile"
	done

	do_fetch
	ensure_java
	ensure_kcat
	local -a JAVA_OPTS
	java_opts
	local cluster_id
	cluster_id="$(random_cluster_id)"
	log "wiped; formatting storage again (cluster id $cluster_id)"
	if ! java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool \
		format -t "$cluster_id" -c "$PROPS" >"$KAFKA_DIR/format.log" 2>&1; then
		cat "$KAFKA_DIR/format.log" >&2
		die "kafka storage format failed"
	fi
	log "starting the wiped Kafka $KAFKA_VERSION on $addr (controller 127.0.0.1:$cport)"
	printf '\n===== kafka.sh wipe %s =====\n' "$(date '+%F %T')" >>"$SERVER_LOG"
	launch_and_wait "$addr" do_stop
	echo "$addr"
}

do_start() {
	local addr pid
	if pid="$(running_pid)"; then
		addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
		ensure_kcat
		if [[ -n $addr ]] && answering "$addr"; then
			log "already running (pid $pid) at $addr"
			echo "$addr"
			return 0
		fi
		log "stale broker (pid $pid) not answering; restarting it"
	fi
	do_stop 2>/dev/null

	do_fetch
	ensure_java
	ensure_kcat
	mkdir -p "$KAFKA_DIR"

	local port cport
	port="$(free_port)"
	cport="$(free_port)"
	while [[ $cport == "$port" ]]; do cport="$(free_port)"; done
	addr="127.0.0.1:$port"
	echo "$port $cport" >"$PORTS_FILE"
	write_props "$port" "$cport"

	local -a JAVA_OPTS
	java_opts
	local cluster_id
	cluster_id="$(random_cluster_id)"
	log "formatting storage (cluster id $cluster_id)"
	if ! java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool \
		format -t "$cluster_id" -c "$PROPS" >"$KAFKA_DIR/format.log" 2>&1; then
		cat "$KAFKA_DIR/format.log" >&2
		die "kafka storage format failed"
	fi

	log "starting Kafka $KAFKA_VERSION on $addr (controller 127.0.0.1:$cport)"
	: >"$SERVER_LOG"
	launch_and_wait "$addr" do_stop
	echo "$addr"
}

# Sourced (by scripts/kafka-cluster.sh, for the helpers above), run no verb.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case "${1:-}" in
cluster-start | cluster-stop | cluster-status | node-stop | node-start | node-kill)
	exec "$REPO/scripts/kafka-cluster.sh" "$@"
	;;
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
fetch) do_fetch ;;
halt) do_halt ;;
resume) do_resume ;;
wipe) do_wipe ;;
*)
	echo "usage: $0 start|stop|status|fetch|halt|resume|wipe|cluster-start|cluster-stop|cluster-status|node-stop ID|node-start ID|node-kill ID" >&2
	exit 2
	;;
esac
