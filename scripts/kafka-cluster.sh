#!/usr/bin/env bash
# Provision a real N-node Apache Kafka cluster (KRaft, each node a combined
# broker+controller) on loopback ports for integration tests, from the jars
# scripts/kafka.sh fetches off Maven Central. Every node has four listeners:
#
#   PLAINTEXT   no security (also the inter-broker listener)
#   SASL_SSL    TLS (server certificate only) + SASL SCRAM-SHA-256,
#               SCRAM-SHA-512 and PLAIN; the SCRAM user is created at format
#               time (kafka-storage format --add-scram)
#   SSL         TLS with client authentication (ssl.client.auth=required)
#   CONTROLLER  the KRaft quorum (plaintext)
#
# Topics get replication 3 (default.replication.factor, the offsets and
# transaction topics; capped at N) and min.insync.replicas=2 (N-1, at least 1).
#
# Usage: scripts/kafka-cluster.sh VERB   (scripts/kafka.sh VERB does the same)
#
#   cluster-start     make the certificates and users, format and start the N
#                     nodes, wait until every node is in the cluster's
#                     metadata; print one line per listener type on stdout:
#                         PLAINTEXT=127.0.0.1:a,127.0.0.1:b,127.0.0.1:c
#                         SASL_SSL=...
#                         SSL=...
#                     and write them, the per-node addresses, the certificate
#                     paths and the SASL users to $KAFKA_DIR/cluster.env
#                     (KEY=VALUE lines). If the cluster of this KAFKA_DIR is
#                     already running and complete, just print the lines.
#   cluster-stop      stop every node (SIGTERM, SIGKILL after 15 s) and delete
#                     the cluster dir's state; OK when nothing is running
#   cluster-status    exit 0 and print the lines when every node runs and the
#                     cluster lists all of them; else exit 1 (per-node state on
#                     stderr)
#   node-stop ID      SIGTERM node ID (SIGKILL after 30 s), keeping its data
#   node-kill ID      SIGKILL node ID, keeping its data
#   node-start ID     start a stopped or killed node ID again from its config
#                     and data, and wait until the cluster lists it again
#
# Environment (besides scripts/kafka.sh's INLET_CACHE, KAFKA_VERSION, ...):
#   KAFKA_DIR                cluster dir (default: $INLET_CACHE/kafka-cluster)
#   KAFKA_CLUSTER_NODES      number of nodes (default 3)
#   KAFKA_CLUSTER_HEAP_OPTS  JVM heap of each node (default: -Xmx384m -Xms128m)
#   KAFKA_START_TIMEOUT      seconds to wait for readiness (default 180: three
#                            JVMs starting together on a busy 2-core box)
#
# Files in $KAFKA_DIR: cluster.env, bootstrap (the printed lines), certs/
# (ca.pem, broker.pem, client.{crt,key}, expired.{crt,key}, other-ca.pem,
# other-client.{crt,key}), node-ID/{server.properties,data,server.log,pid}.
#
# Progress goes to stderr; stdout carries only the bootstrap lines.
set -euo pipefail

CLUSTER_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INLET_CACHE="${INLET_CACHE:-$CLUSTER_REPO/.cache}"
KAFKA_DIR="${KAFKA_DIR:-$INLET_CACHE/kafka-cluster}"
cluster_timeout="${KAFKA_START_TIMEOUT:-180}"
# shellcheck source=kafka.sh
source "$CLUSTER_REPO/scripts/kafka.sh" # helpers only: its verbs run only when executed
KAFKA_START_TIMEOUT="$cluster_timeout"

KAFKA_CLUSTER_NODES="${KAFKA_CLUSTER_NODES:-3}"
KAFKA_HEAP_OPTS="${KAFKA_CLUSTER_HEAP_OPTS:--Xmx384m -Xms128m}"
[[ $KAFKA_CLUSTER_NODES =~ ^[1-9]$ ]] || {
	printf 'kafka-cluster.sh: error: KAFKA_CLUSTER_NODES must be 1 to 9, not %q\n' "$KAFKA_CLUSTER_NODES" >&2
	exit 1
}

ENV_FILE="$KAFKA_DIR/cluster.env"
BOOT_FILE="$KAFKA_DIR/bootstrap"
CERTS="$KAFKA_DIR/certs"
SCRAM_USER=inlet
PLAIN_USER=inlet-plain

log() { printf 'kafka-cluster.sh: %s\n' "$*" >&2; }
die() {
	printf 'kafka-cluster.sh: error: %s\n' "$*" >&2
	exit 1
}

node_dir() { echo "$KAFKA_DIR/node-$1"; }

check_id() {
	[[ ${1:-} =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= KAFKA_CLUSTER_NODES)) ||
		die "node id must be 1..$KAFKA_CLUSTER_NODES, not '${1:-}'"
	[[ -f $(node_dir "$1")/server.properties ]] || die "no node $1 in $KAFKA_DIR (run cluster-start first)"
}

# Pid of node $1's JVM if alive, else exit status 1.
node_pid() {
	local f pid
	f="$(node_dir "$1")/pid"
	[[ -f $f ]] || return 1
	pid="$(cat "$f" 2>/dev/null || true)"
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	alive "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
	echo "$pid"
}

# "PLAINTEXT SASL_SSL SSL CONTROLLER" ports of node $1.
node_ports() { cat "$(node_dir "$1")/ports"; }

# The metadata as node $1's PLAINTEXT listener answers it (kcat -L), or fail.
metadata() {
	local p
	read -r p _ <<<"$(node_ports "$1")"
	kcat -b "127.0.0.1:$p" -L -m 3 2>/dev/null
}

# True when node $1 answers and the metadata it serves lists every broker in
# $2 (space-separated ids) at its PLAINTEXT address.
lists() {
	local out id p
	out="$(metadata "$1")" || return 1
	for id in $2; do
		read -r p _ <<<"$(node_ports "$id")"
		grep -q "broker $id at 127.0.0.1:$p" <<<"$out" || return 1
	done
}

all_ids() { seq 1 "$KAFKA_CLUSTER_NODES"; }

# Ids of the nodes whose JVM is alive.
live_ids() {
	local id out=()
	for id in $(all_ids); do
		node_pid "$id" >/dev/null && out+=("$id")
	done
	echo "${out[*]:-}"
}

# ------------------------------------------------------------ certificates --

make_certs() {
	local d="$CERTS"
	rm -rf "$d"
	mkdir -p "$d"
	local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	(
		cd "$d"
		ossl() { openssl "$@" 2>>openssl.log >>openssl.log || die "openssl $1 failed (see $d/openssl.log)"; }
		for ca in ca other-ca; do
			ossl req -x509 "${ec[@]}" -keyout "$ca.key" -out "$ca.pem" -days 3650 \
				-subj "/CN=inlet test $ca" \
				-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
		done
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >broker.ext
		printf 'extendedKeyUsage=clientAuth\n' >client.ext
		# name CA CN ext
		sign() {
			ossl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$3"
			ossl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
				-days 3650 -out "$1.crt" -extfile "$4"
		}
		sign broker ca localhost broker.ext
		sign client ca inlet-client client.ext
		sign other-client other-ca inlet-other-client client.ext
		# An expired client certificate of the right CA: openssl x509 cannot
		# back-date, openssl ca can.
		mkdir -p expired-ca
		: >expired-ca/index.txt
		echo 1000 >expired-ca/serial
		cat >expired-ca/ca.cnf <<EOF
[ca]
default_ca = test
[test]
dir = $d/expired-ca
database = \$dir/index.txt
serial = \$dir/serial
new_certs_dir = \$dir
certificate = $d/ca.pem
private_key = $d/ca.key
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = client
unique_subject = no
[any]
commonName = supplied
[client]
extendedKeyUsage = clientAuth
EOF
		ossl req "${ec[@]}" -keyout expired.key -out expired.csr -subj "/CN=inlet-expired-client"
		ossl ca -batch -notext -config expired-ca/ca.cnf -in expired.csr -out expired.crt \
			-startdate 20200101000000Z -enddate 20200102000000Z
		# Kafka's PEM key store: the (unencrypted PKCS#8) key and the chain.
		cat broker.key broker.crt ca.pem >broker.pem
		rm -f ./*.csr ./*.srl
	) || exit 1
	grep -q 'BEGIN PRIVATE KEY' "$d/broker.key" || die "openssl wrote no PKCS#8 key"
}

# --------------------------------------------------------------- configure --

# write_node_props ID VOTERS PLAIN_PASSWORD
write_node_props() {
	local id="$1" voters="$2" plainpw="$3" p s t c
	read -r p s t c <<<"$(node_ports "$id")"
	local dir rf isr
	dir="$(node_dir "$id")"
	rf=$((KAFKA_CLUSTER_NODES < 3 ? KAFKA_CLUSTER_NODES : 3))
	isr=$((rf > 1 ? rf - 1 : 1))
	cat >"$dir/server.properties" <<EOF
# Generated by scripts/kafka-cluster.sh: node $id of a throwaway $KAFKA_CLUSTER_NODES-node KRaft test cluster.
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$p,SASL_SSL://127.0.0.1:$s,SSL://127.0.0.1:$t,CONTROLLER://127.0.0.1:$c
advertised.listeners=PLAINTEXT://127.0.0.1:$p,SASL_SSL://127.0.0.1:$s,SSL://127.0.0.1:$t
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$dir/data
metadata.log.dir=$dir/data

# TLS: one PEM key store for every node (SAN IP:127.0.0.1, DNS:localhost).
ssl.keystore.type=PEM
ssl.keystore.location=$CERTS/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.pem
ssl.enabled.protocols=TLSv1.2,TLSv1.3
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_ssl.ssl.client.auth=none

# SASL on SASL_SSL: SCRAM users live in the cluster metadata (--add-scram at
# format time); the PLAIN user is in the JAAS config.
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$PLAIN_USER="$plainpw";

auto.create.topics.enable=true
num.partitions=$KAFKA_NUM_PARTITIONS
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
share.coordinator.state.topic.num.partitions=5
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
delete.topic.enable=true

# Keep it light: $KAFKA_CLUSTER_NODES JVMs beside the tests on a small box.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
background.threads=2
log.retention.hours=1
EOF
}

# ------------------------------------------------------------------ launch --

# Start node $1's JVM in the background; do not wait.
launch_node() {
	local id="$1" dir pid
	dir="$(node_dir "$id")"
	local -a JAVA_OPTS
	KAFKA_DIR="$dir" java_opts
	printf '\n===== kafka-cluster.sh start node %s %s =====\n' "$id" "$(date '+%F %T')" >>"$dir/server.log"
	java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
		</dev/null >>"$dir/server.log" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/pid"
}

# wait_listed "IDS": until every node in IDS is alive and lists all of IDS.
# On a node's death or timeout, print its log tail and fail.
wait_listed() {
	local ids="$1" id pending deadline=$((SECONDS + KAFKA_START_TIMEOUT))
	while :; do
		pending=""
		for id in $ids; do
			if ! node_pid "$id" >/dev/null; then
				log "node $id exited during start-up; last log lines:"
				tail -n 40 "$(node_dir "$id")/server.log" >&2 || true
				return 1
			fi
			lists "$id" "$ids" || pending+=" $id"
		done
		[[ -z $pending ]] && return 0
		if ((SECONDS >= deadline)); then
			for id in $pending; do
				log "node $id not ready after ${KAFKA_START_TIMEOUT}s; last log lines:"
				tail -n 30 "$(node_dir "$id")/server.log" >&2 || true
			done
			return 1
		fi
		sleep 0.5
	done
}

# SIGTERM (or $2) node $1 and wait until it is gone, SIGKILL after $3 s.
kill_node() {
	local id="$1" sig="${2:-TERM}" grace="${3:-30}" pid i
	pid="$(node_pid "$id")" || return 0
	kill "-$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		log "node $id (pid $pid) did not exit within ${grace} s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
	fi
	alive "$pid" && die "node $id (pid $pid) still alive after SIGKILL"
	return 0
}

# ---------------------------------------------------------------- commands --

print_lines() { cat "$BOOT_FILE"; }

cluster_status() {
	local id ok=0 live
	[[ -f $ENV_FILE && -f $BOOT_FILE ]] || {
		log "no cluster in $KAFKA_DIR"
		return 1
	}
	ensure_kcat
	live="$(live_ids)"
	for id in $(all_ids); do
		if [[ " $live " == *" $id "* ]]; then
			if lists "$id" "$id"; then
				log "node $id: running (pid $(node_pid "$id"))"
			else
				log "node $id: running (pid $(node_pid "$id")) but not answering"
				ok=1
			fi
		else
			log "node $id: stopped"
			ok=1
		fi
	done
	((ok == 0)) || return 1
	local first
	first="$(all_ids | head -n 1)"
	lists "$first" "$(all_ids | tr '\n' ' ')" || {
		log "not every node is in the cluster's metadata yet"
		return 1
	}
	print_lines
}

cluster_stop() {
	local id pid pids=()
	for id in $(all_ids); do
		if pid="$(node_pid "$id")"; then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$id")
		fi
	done
	# Stopped together, the last nodes wait for a quorum that is gone: give
	# them 15 s, then SIGKILL.
	for id in "${pids[@]}"; do
		kill_node "$id" TERM 15
	done
	if [[ -d $KAFKA_DIR ]]; then
		rm -rf "$CERTS" "$ENV_FILE" "$BOOT_FILE"
		for id in $(seq 1 9); do rm -rf "$(node_dir "$id")"; done
	fi
	return 0
}

cluster_start() {
	if [[ -f $BOOT_FILE ]] && cluster_status >/dev/null 2>&1; then
		log "already running in $KAFKA_DIR"
		print_lines
		return 0
	fi
	cluster_stop
	"$CLUSTER_REPO/scripts/kafka.sh" fetch
	ensure_java
	ensure_kcat
	command -v openssl >/dev/null 2>&1 || apt_install openssl
	mkdir -p "$KAFKA_DIR"

	local t0=$SECONDS
	make_certs
	log "certificates made in $((SECONDS - t0)) s"

	# Ports: four per node, all distinct.
	local id i p used=" " ports voters="" n=$KAFKA_CLUSTER_NODES
	for id in $(all_ids); do
		mkdir -p "$(node_dir "$id")/data"
		ports=()
		for ((i = 0; i < 4; i++)); do
			p="$(free_port)"
			while [[ $used == *" $p "* ]]; do p="$(free_port)"; done
			used+="$p "
			ports+=("$p")
		done
		echo "${ports[*]}" >"$(node_dir "$id")/ports"
		voters+="${voters:+,}$id@127.0.0.1:${ports[3]}"
	done

	local scrampw plainpw
	scrampw="scram-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
	plainpw="plain-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
	local plain="" sasl="" ssl="" nodes=""
	local s t c
	for id in $(all_ids); do
		write_node_props "$id" "$voters" "$plainpw"
		read -r p s t c <<<"$(node_ports "$id")"
		plain+="${plain:+,}127.0.0.1:$p"
		sasl+="${sasl:+,}127.0.0.1:$s"
		ssl+="${ssl:+,}127.0.0.1:$t"
		nodes+="NODE_${id}_PLAINTEXT=127.0.0.1:$p
NODE_${id}_SASL_SSL=127.0.0.1:$s
NODE_${id}_SSL=127.0.0.1:$t
NODE_${id}_CONTROLLER=127.0.0.1:$c
"
	done

	local -a JAVA_OPTS
	java_opts
	local cluster_id
	cluster_id="$(random_cluster_id)"
	log "formatting $n nodes (cluster id $cluster_id, SCRAM user $SCRAM_USER)"
	local -A fmtpid=()
	for id in $(all_ids); do
		java "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
			-t "$cluster_id" -c "$(node_dir "$id")/server.properties" \
			--add-scram "SCRAM-SHA-256=[name=\"$SCRAM_USER\",password=\"$scrampw\"]" \
			--add-scram "SCRAM-SHA-512=[name=\"$SCRAM_USER\",password=\"$scrampw\"]" \
			</dev/null >"$(node_dir "$id")/format.log" 2>&1 &
		fmtpid[$id]=$!
	done
	for id in $(all_ids); do
		if ! wait "${fmtpid[$id]}"; then
			cat "$(node_dir "$id")/format.log" >&2
			die "kafka storage format of node $id failed"
		fi
	done

	printf 'PLAINTEXT=%s\nSASL_SSL=%s\nSSL=%s\n' "$plain" "$sasl" "$ssl" >"$BOOT_FILE"
	cat >"$ENV_FILE" <<EOF
NODES=$n
PLAINTEXT=$plain
SASL_SSL=$sasl
SSL=$ssl
${nodes}CA_FILE=$CERTS/ca.pem
CLIENT_CERT=$CERTS/client.crt
CLIENT_KEY=$CERTS/client.key
EXPIRED_CERT=$CERTS/expired.crt
EXPIRED_KEY=$CERTS/expired.key
OTHER_CA_FILE=$CERTS/other-ca.pem
OTHER_CLIENT_CERT=$CERTS/other-client.crt
OTHER_CLIENT_KEY=$CERTS/other-client.key
SCRAM_USER=$SCRAM_USER
SCRAM_PASSWORD=$scrampw
PLAIN_USER=$PLAIN_USER
PLAIN_PASSWORD=$plainpw
EOF

	log "formatted in $((SECONDS - t0)) s; starting $n nodes of Kafka $KAFKA_VERSION (heap $KAFKA_HEAP_OPTS each)"
	for id in $(all_ids); do launch_node "$id"; done
	if ! wait_listed "$(all_ids | tr '\n' ' ')"; then
		cluster_stop 2>/dev/null || true
		die "kafka cluster start failed"
	fi
	log "ready in $((SECONDS - t0)) s; $ENV_FILE"
	print_lines
}

node_stop() {
	check_id "$1"
	node_pid "$1" >/dev/null || {
		log "node $1 is not running"
		return 0
	}
	log "stopping node $1 (SIGTERM)"
	kill_node "$1" TERM 30
}

node_kill() {
	check_id "$1"
	node_pid "$1" >/dev/null || {
		log "node $1 is not running"
		return 0
	}
	log "killing node $1 (SIGKILL)"
	kill_node "$1" KILL 5
}

node_start() {
	check_id "$1"
	ensure_java
	ensure_kcat
	local id="$1" live
	if node_pid "$id" >/dev/null; then
		log "node $id is already running"
	else
		local p
		for p in $(node_ports "$id"); do
			port_bindable "$p" || die "cannot start node $id: port $p was taken by another process meanwhile"
		done
		log "starting node $id"
		launch_node "$id"
	fi
	# It is back when it is in the metadata that it and the others serve.
	live="$(live_ids)"
	wait_listed "$live" || die "node $id did not rejoin the cluster"
	log "node $id is in the cluster"
}

case "${1:-}" in
cluster-start) cluster_start ;;
cluster-stop) cluster_stop ;;
cluster-status) cluster_status ;;
node-stop) node_stop "${2:-}" ;;
node-kill) node_kill "${2:-}" ;;
node-start) node_start "${2:-}" ;;
*)
	echo "usage: $0 cluster-start|cluster-stop|cluster-status|node-stop ID|node-start ID|node-kill ID" >&2
	exit 2
	;;
esac
