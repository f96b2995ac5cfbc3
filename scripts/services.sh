#!/usr/bin/env bash
# Start/stop every real service the integration tests need (Kafka + Redis).
#
# Usage: scripts/services.sh start|stop|status
#
# `start` prints shell assignments on stdout, so a CI script can do:
#
#   eval "$(scripts/services.sh start)"     # sets INLET_KAFKA_BROKERS, INLET_REDIS_ADDR
#   trap 'scripts/services.sh stop' EXIT
#
# Environment is passed through to scripts/kafka.sh and scripts/redis.sh
# (INLET_CACHE, KAFKA_VERSION, ...). Progress goes to stderr.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

case "${1:-}" in
start)
	kafka="$("$DIR/kafka.sh" start | tail -n 1)"
	redis="$("$DIR/redis.sh" start | tail -n 1)"
	printf 'export INLET_KAFKA_BROKERS=%q\n' "$kafka"
	printf 'export INLET_REDIS_ADDR=%q\n' "$redis"
	;;
stop)
	rc=0
	"$DIR/kafka.sh" stop || rc=1
	"$DIR/redis.sh" stop || rc=1
	exit "$rc"
	;;
status)
	rc=0
	"$DIR/kafka.sh" status >/dev/null || rc=1
	"$DIR/redis.sh" status >/dev/null || rc=1
	exit "$rc"
	;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
