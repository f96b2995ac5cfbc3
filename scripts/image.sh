#!/usr/bin/env bash
# Builds the inlet image from the Containerfile and ./inlet (`make build`),
# and runs it with the options podman needs on our CI VM.
#
# Usage: scripts/image.sh build          tags inlet:$VERSION and inlet:latest
#        scripts/image.sh run ARGS...     podman run $PODMAN_RUN ARGS...
#
# Environment: VERSION (default: git describe), COMMIT (git rev-parse HEAD),
# PODMAN (default: podman;
# docker works too), PODMAN_RUN (the run options, default below).
#
# The build context is a temporary directory holding only what goes in the
# image: rootfs/ (the binary, Debian's CA bundle, /var/lib) and an empty data/.
# Building runs no container (the Containerfile has no RUN), so it needs
# neither runc nor the ulimits that running does.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PODMAN="${PODMAN:-podman}"
# crun and podman's default ulimits are refused on the CI VM; runc with
# explicit limits works there and anywhere else. The limits are this
# shell's hard limits, as a container may not raise them (nproc also at
# most kernel.pid_max: past it runc's setrlimit is refused on the VM, seen
# with a hard limit of 96367 and pid_max 32768). Host networking reaches
# brokers on 127.0.0.1 without a port mapping.
limit() {
	local v
	v="$(ulimit -H "$1")"
	[ "$v" = unlimited ] && v=1048576
	[ -n "${2:-}" ] && [ "$v" -gt "$2" ] && v="$2"
	echo "$v:$v"
}
PODMAN_RUN="${PODMAN_RUN:---runtime runc --ulimit nofile=$(limit -n) --ulimit nproc=$(limit -u "$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)") --network host}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

need_podman() {
	if ! command -v "$PODMAN" >/dev/null 2>&1; then
		echo "image.sh: $PODMAN is not installed: on Debian or Ubuntu, apt-get install podman runc (or PODMAN=docker with Docker)" >&2
		exit 1
	fi
}

case "${1:-}" in
build)
	need_podman
	cd "$REPO"
	VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
	COMMIT="${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
	[ -x inlet ] || { echo "image.sh: ./inlet is missing: run make build (make image does)" >&2; exit 1; }
	[ -s "$CA_BUNDLE" ] || { echo "image.sh: no CA bundle at $CA_BUNDLE: apt-get install ca-certificates" >&2; exit 1; }
	ctx="$(mktemp -d)"
	trap 'rm -rf "$ctx"' EXIT
	mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/var/lib" "$ctx/data"
	install -m 0755 inlet "$ctx/rootfs/inlet"
	install -m 0644 "$CA_BUNDLE" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
	chmod -R go-w,a+rX "$ctx"
	chmod 0700 "$ctx/data"
	# The image inlet:latest names now, removed after the build if no tag
	# names it any more (make test would pile one up per run otherwise).
	previous="$("$PODMAN" image inspect --format '{{.Id}}' inlet:latest 2>/dev/null || true)"
	# podman: --layers=false, one layer and no cache (buildah 1.28's layer
	# cache ignores --chown: a cached data/ layer kept its old owner when the
	# Containerfile's --chown was removed), no intermediate image per step;
	# OCI format (its default, unless BUILDAH_FORMAT says otherwise).
	# Docker has neither option: --no-cache.
	opts=(--layers=false --format oci)
	case "$(basename "$PODMAN")" in docker*) opts=(--no-cache) ;; esac
	"$PODMAN" build "${opts[@]}" -f "$REPO/Containerfile" \
		--build-arg VERSION="$VERSION" --build-arg REVISION="$COMMIT" \
		--build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
		-t "inlet:$VERSION" -t inlet:latest "$ctx"
	if [ -n "$previous" ] && [ "$("$PODMAN" image inspect --format '{{len .RepoTags}}' "$previous" 2>/dev/null)" = 0 ]; then
		"$PODMAN" rmi "$previous" >/dev/null 2>&1 || true # kept while a container uses it
	fi
	;;
run)
	need_podman
	shift
	# shellcheck disable=SC2086 # PODMAN_RUN is a list of options
	exec "$PODMAN" run $PODMAN_RUN "$@"
	;;
*)
	echo "usage: scripts/image.sh build | run ARGS..." >&2
	exit 2
	;;
esac
