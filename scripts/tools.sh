#!/usr/bin/env bash
# Installs the tools the tests need beyond Go: the protobuf and Thrift
# compilers (Debian's protobuf-compiler, protoc-gen-go, protoc-gen-go-grpc,
# thrift-compiler), for the test that checks the committed generated code.
# Quiet when everything is there already.
#
# Usage: scripts/tools.sh
set -euo pipefail

log() { printf 'tools.sh: %s\n' "$*" >&2; }
die() {
	printf 'tools.sh: error: %s\n' "$*" >&2
	exit 1
}

need=()
for pair in protoc:protobuf-compiler protoc-gen-go:protoc-gen-go protoc-gen-go-grpc:protoc-gen-go-grpc thrift:thrift-compiler; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
	sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "need root or sudo to apt-get install ${need[*]}"
		sudo=(sudo)
	fi
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install ${need[*]} by hand"
	log "apt-get install ${need[*]}"
	"${sudo[@]}" apt-get update -qq </dev/null >&2 || die "apt-get update failed"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >&2 ||
		die "apt-get install ${need[*]} failed"
fi
