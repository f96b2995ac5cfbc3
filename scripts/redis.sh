#!/usr/bin/env bash
# Provision a real, throwaway Redis server for integration tests.
#
# Usage: scripts/redis.sh start|stop|status
#
#   start   install Debian's redis-server if missing, start it on a free
#           loopback port (no persistence), wait for PING -> PONG, print
#           "127.0.0.1:PORT" as the last stdout line and write it to
#           $REDIS_DIR/addr. If already running and answering, just print it.
#   stop    SHUTDOWN NOSAVE (falls back to SIGTERM/SIGKILL); OK when not running
#   status  exit 0 (and print the address) if running and answering, else 1
#
# Environment:
#   INLET_CACHE          cache root (default: <repo>/.cache, gitignored)
#   REDIS_DIR            runtime dir (default: $INLET_CACHE/redis-run)
#   REDIS_START_TIMEOUT  seconds to wait for readiness (default 30)
#
# Progress goes to stderr; stdout carries only the address. The distro's
# redis-server service (port 6379) is neither used nor required.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INLET_CACHE="${INLET_CACHE:-$REPO/.cache}"
REDIS_DIR="${REDIS_DIR:-$INLET_CACHE/redis-run}"
REDIS_START_TIMEOUT="${REDIS_START_TIMEOUT:-30}"

PID_FILE="$REDIS_DIR/redis.pid"
ADDR_FILE="$REDIS_DIR/addr"
LOG_FILE="$REDIS_DIR/redis.log"

log() { printf 'redis.sh: %s\n' "$*" >&2; }
die() {
	printf 'redis.sh: error: %s\n' "$*" >&2
	exit 1
}

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

ensure_redis() {
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis-server redis-tools
	fi
}

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

# True while $1 is a live process (a zombie awaiting its reaper counts as dead).
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	stat="${stat##*) }"
	[[ ${stat:0:1} != Z ]]
}

# Pid of our redis-server if alive, else empty (and exit status 1).
running_pid() {
	[[ -f $PID_FILE ]] || return 1
	local pid
	pid="$(cat "$PID_FILE" 2>/dev/null || true)"
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	alive "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'redis-server' || return 1
	echo "$pid"
}

port_of() { echo "${1##*:}"; }

answering() {
	local port
	port="$(port_of "$1")"
	[[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]
}

do_status() {
	local pid addr
	pid="$(running_pid)" || {
		log "not running"
		return 1
	}
	addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
	if [[ -n $addr ]] && answering "$addr"; then
		log "running (pid $pid) at $addr"
		echo "$addr"
		return 0
	fi
	log "pid $pid alive but not answering"
	return 1
}

do_stop() {
	local pid addr i
	if pid="$(running_pid)"; then
		log "stopping redis-server (pid $pid)"
		addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
		if [[ -n $addr ]] && command -v redis-cli >/dev/null 2>&1; then
			redis-cli -h 127.0.0.1 -p "$(port_of "$addr")" shutdown nosave >/dev/null 2>&1 || true
		fi
		for ((i = 0; i < 50; i++)); do
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			kill -TERM "$pid" 2>/dev/null || true
			for ((i = 0; i < 100; i++)); do
				alive "$pid" || break
				sleep 0.1
			done
		fi
		if alive "$pid"; then
			log "redis-server did not exit; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	else
		log "not running"
	fi
	rm -f "$PID_FILE" "$ADDR_FILE"
}

do_start() {
	local pid addr
	ensure_redis
	if pid="$(running_pid)"; then
		addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
		if [[ -n $addr ]] && answering "$addr"; then
			log "already running (pid $pid) at $addr"
			echo "$addr"
			return 0
		fi
		log "stale redis-server (pid $pid) not answering; restarting it"
	fi
	do_stop 2>/dev/null

	mkdir -p "$REDIS_DIR"
	local port
	port="$(free_port)"
	addr="127.0.0.1:$port"
	log "starting redis-server on $addr"
	if ! redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes \
		--save '' --appendonly no \
		--daemonize yes --pidfile "$PID_FILE" \
		--logfile "$LOG_FILE" --dir "$REDIS_DIR" </dev/null >&2; then
		tail -n 20 "$LOG_FILE" >&2 2>/dev/null || true
		die "redis-server failed to start"
	fi

	local deadline=$((SECONDS + REDIS_START_TIMEOUT))
	until answering "$addr"; do
		if ((SECONDS >= deadline)); then
			log "redis not answering after ${REDIS_START_TIMEOUT}s; last log lines:"
			tail -n 20 "$LOG_FILE" >&2 2>/dev/null || true
			echo "$addr" >"$ADDR_FILE"
			do_stop 2>/dev/null || true
			die "redis start timed out"
		fi
		sleep 0.1
	done
	echo "$addr" >"$ADDR_FILE"
	pid="$(cat "$PID_FILE" 2>/dev/null || echo '?')"
	log "ready (pid $pid); log: $LOG_FILE"
	echo "$addr"
}

case "${1:-}" in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
