#!/usr/bin/env bash
# Checks the container image against the real Kafka at $INLET_TEST_BROKERS
# (scripts/test.sh runs it after the Go tests): installs podman and runc
# with apt-get when missing, builds the image with `make image`, and asserts
#   - the binary links no text/template (it would add 10 MB: Makefile, TAGS);
#   - the image's files are exactly /inlet, the CA bundle and the data
#     directory, in one layer, under 50 MB;
#   - its labels carry the version and commit `inlet version` prints in it;
#   - it runs as 65532:65532, the data directory is a volume it owns;
#   - run with --read-only and --ack spool, it takes events over HTTP into
#     Kafka (read back with `inlet tail`), keeps its spool in the volume,
#     and exits 0 on SIGTERM within --shutdown-timeout;
#   - the commands docs/container.md marks <!-- run --> run as written.
# The container's logs are printed when a check fails.
#
# Usage: INLET_TEST_BROKERS=host:port scripts/image-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
: "${INLET_TEST_BROKERS:?image-check.sh: set INLET_TEST_BROKERS to a Kafka broker host:port}"
start=$SECONDS
name="inlet-image-check-$$"
topic="inlet-image-check-$$-$RANDOM"
log="$(mktemp)"

fail() {
	echo "image-check.sh: $*" >&2
	exit 1
}
cleanup() {
	local rc=$?
	if [ "$rc" != 0 ] && podman container exists "$name" 2>/dev/null; then
		echo "== image-check.sh failed: logs of container $name" >&2
		podman logs "$name" >&2 || true
	fi
	podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
	podman volume rm -f "$name" >/dev/null 2>&1 || true
	rm -f "$log"
}
trap cleanup EXIT

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v curl >/dev/null 2>&1 || missing+=(curl)
[ -s /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ ${#missing[@]} -gt 0 ]; then
	echo "== image: apt-get install ${missing[*]}" >&2
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi
t_apt=$((SECONDS - start))

tags="$(sed -n 's/^TAGS *:= *//p' Makefile)"
if go list -tags "$tags" -deps ./cmd/inlet | grep -qx text/template; then
	go list -tags "$tags" -f '{{.ImportPath}}: {{join .Imports " "}}' -deps ./cmd/inlet | grep -E ' (text|html)/template( |$)' | cut -d: -f1 >&2
	fail "the binary links text/template (through the packages above): its reflection keeps every exported method in the binary, 10 MB more"
fi

echo "== image: make image" >&2
t0=$SECONDS
make image >"$log" 2>&1 || { cat "$log" >&2; fail "make image failed"; }
t_build=$((SECONDS - t0))
version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
commit="$(git rev-parse HEAD)"
image="inlet:$version"
inspect() { podman image inspect --format "$1" "$image"; }
[ "$(inspect '{{.Id}}')" = "$(podman image inspect --format '{{.Id}}' inlet:latest)" ] || fail "inlet:latest is not $image"

echo "== image: files, layers, size, labels, user" >&2
mnt="$(podman image mount "$image")"
files="$(cd "$mnt" && find . -mindepth 1 -printf '%y %m %U:%G %p\n' | sort -k4)"
podman image umount "$image" >/dev/null
want="d 755 0:0 ./etc
d 755 0:0 ./etc/ssl
d 755 0:0 ./etc/ssl/certs
f 644 0:0 ./etc/ssl/certs/ca-certificates.crt
f 755 0:0 ./inlet
d 755 0:0 ./var
d 755 0:0 ./var/lib
d 755 65532:65532 ./var/lib/inlet"
[ "$files" = "$want" ] || fail "the image's files are not the binary, the CA bundle and the data directory:
$files
want:
$want"
echo "$files" | sed 's/^/  /' >&2
layers="$(inspect '{{len .RootFS.Layers}}')"
[ "$layers" = 1 ] || fail "$layers layers, want 1 (podman build --layers=false, scripts/image.sh)"
size="$(inspect '{{.Size}}')"
[ "$size" -lt 50000000 ] || fail "the image weighs $size bytes, over 50 MB"
label() { inspect "{{index .Labels \"org.opencontainers.image.$1\"}}"; }
[ "$(label version)" = "$version" ] || fail "label version $(label version), want $version"
[ "$(label revision)" = "$commit" ] || fail "label revision $(label revision), want $commit"
[ -n "$(label created)" ] && [ "$(label source)" = https://github.com/inlet-dev/inlet ] || fail "labels created or source missing"
[ "$(inspect '{{.Config.User}}')" = 65532:65532 ] || fail "user $(inspect '{{.Config.User}}'), want 65532:65532"
[ "$(inspect '{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{json .Config.Volumes}}')" = '["/inlet"] ["serve"] {"/var/lib/inlet":{}}' ] ||
	fail "entrypoint, command or volume: $(inspect '{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{json .Config.Volumes}}')"
inspect '{{join .Config.Env "\n"}}' | grep -qx 'INLET_LISTEN=0.0.0.0:8080' || fail "no INLET_LISTEN=0.0.0.0:8080 in the image's environment"
inspect '{{join .Config.Env "\n"}}' | grep -qx 'INLET_DATA_DIR=/var/lib/inlet' || fail "no INLET_DATA_DIR=/var/lib/inlet in the image's environment"
echo "  layers: $layers, $size bytes, version $version, commit $commit, user 65532:65532" >&2

got="$(scripts/image.sh run --rm "$image" version)"
case "$got" in
"inlet $version (commit $commit"[,\;]*) echo "  $got" >&2 ;;
*) fail "inlet version in the image says \"$got\", the labels $version and $commit" ;;
esac

echo "== image: serve --ack spool, read-only, on Kafka at $INLET_TEST_BROKERS" >&2
podman volume create "$name" >/dev/null
# Port 0: the kernel picks a free one, read back from the log (host network).
scripts/image.sh run -d --name "$name" --read-only -v "$name:/var/lib/inlet" \
	-e INLET_BROKERS="$INLET_TEST_BROKERS" -e INLET_LISTEN=127.0.0.1:0 \
	"$image" serve --ack spool --topic "$topic" --shutdown-timeout 10s >/dev/null
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$name")" = true ] || fail "the root file system is not read-only"
addr=""
for _ in $(seq 150); do
	addr="$(podman logs "$name" 2>&1 | sed -n 's/.*msg=serving addr=\([^ ]*\) .*/\1/p' | head -1)"
	[ -n "$addr" ] && curl -fsS -o /dev/null "http://$addr/readyz" 2>/dev/null && break
	[ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
	sleep 0.2
done
curl -fsS -o /dev/null "http://$addr/readyz" || fail "not ready after 30 s (addr \"$addr\")"
n=200
for half in 0 1; do
	batch="$(seq $((half * n / 2 + 1)) $(((half + 1) * n / 2)) | sed "s/.*/{\"event\":\"image_check\",\"id\":\"$name-&\"}/" | paste -sd, -)"
	answer="$(curl -sS -w ' %{http_code}' -H 'Content-Type: application/json' "http://$addr/v1/batch" -d "[$batch]" | tr -d '\n')"
	[ "$answer" = "{\"accepted\":$((n / 2)),\"rejected\":[]} 200" ] || fail "POST /v1/batch answered: $answer"
done
got="$(timeout 90 ./inlet tail --brokers "$INLET_TEST_BROKERS" --topic "$topic" --from beginning -n "$n" --idle 30s |
	grep -o "\"inlet-event-id\":\"$name-[0-9]*\"" | sort -u | wc -l)"
[ "$got" = "$n" ] || fail "read $got of the $n events back from Kafka topic $topic"
vol="$(podman volume inspect --format '{{.Mountpoint}}' "$name")"
seg="$(find "$vol/spool" -name '*.seg' -size +0 | head -1)"
[ -n "$seg" ] || fail "no spool segment in the volume ($vol): $(ls -lR "$vol")"
[ "$(stat -c %u:%g "$seg")" = 65532:65532 ] || fail "the spool belongs to $(stat -c %u:%g "$seg"), not 65532:65532"
echo "  $n events in, $got read back from Kafka; spool in the volume: ${seg#"$vol"/}" >&2

t0=$SECONDS
podman stop -t 30 "$name" >/dev/null
took=$((SECONDS - t0))
code="$(podman inspect --format '{{.State.ExitCode}}' "$name")"
[ "$code" = 0 ] || fail "exit code $code after SIGTERM"
[ "$took" -le 15 ] || fail "took ${took}s to stop after SIGTERM (--shutdown-timeout 10s)"
podman logs "$name" 2>&1 | grep -q 'msg=stopped' || fail "no 'stopped' in the log after SIGTERM"
echo "  SIGTERM: exit 0 in ${took}s" >&2
podman rm "$name" >/dev/null
podman volume rm "$name" >/dev/null

echo "== image: the commands of docs/container.md" >&2
# They name their container inlet and volume inlet-data, and listen on 8080.
if podman container exists inlet || podman volume exists inlet-data; then
	fail "a container inlet or a volume inlet-data exists already: the commands of docs/container.md create them (remove them)"
fi
if (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then
	fail "127.0.0.1:8080 is taken: the commands of docs/container.md listen there"
fi
if ! scripts/doc-commands.sh docs/container.md | INLET_BROKERS="$INLET_TEST_BROKERS" bash -euo pipefail >"$log" 2>&1; then
	cat "$log" >&2
	echo "== logs of container inlet" >&2
	podman logs inlet >&2 || true
	podman rm -f -t 0 inlet >/dev/null 2>&1 || true
	podman volume rm -f inlet-data >/dev/null 2>&1 || true
	fail "a command of docs/container.md failed (output above)"
fi

echo "== image: passed in $((SECONDS - start))s (apt-get ${t_apt}s, make image ${t_build}s)" >&2
