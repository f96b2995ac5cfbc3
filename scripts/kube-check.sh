#!/usr/bin/env bash
# Checks inlet's deployment files with the real tools (make test runs it):
# builds helm from deploy/kubecheck's go.mod and inlet, runs the helm lint
# and helm template commands docs/kubernetes.md shows, go vet and the tests
# of deploy/kubecheck (every rendered object decoded strictly into
# client-go's types; probes, grace period, security context, INLET_* names
# against inlet serve -h; deploy/kubernetes/inlet.yaml current), and
# systemd-analyze verify on deploy/systemd/inlet.service (skipped, saying
# so, where systemd-analyze is missing).
#
# Usage: scripts/kube-check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
start=$SECONDS
bin="$REPO/.cache/kube-check"
mkdir -p "$bin"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "== kube-check: building helm (deploy/kubecheck's tool directive) and inlet" >&2
(cd deploy/kubecheck && go build -o "$bin/helm" helm.sh/helm/v4/cmd/helm)
CGO_ENABLED=0 go build -o "$bin/inlet" ./cmd/inlet
export PATH="$bin:$PATH" HELM="$bin/helm" INLET_BIN="$bin/inlet"

echo "== kube-check: the commands of docs/kubernetes.md" >&2
# In a directory of their own, as a reader's checkout: the page writes a
# values file.
ln -s "$REPO/deploy" "$tmp/deploy"
scripts/doc-commands.sh docs/kubernetes.md | (cd "$tmp" && bash -euo pipefail)

echo "== kube-check: go vet and go test in deploy/kubecheck" >&2
(cd deploy/kubecheck && go vet ./... && go test -count=1 ./...)

echo "== kube-check: systemd-analyze verify deploy/systemd/inlet.service" >&2
if command -v systemd-analyze >/dev/null 2>&1 && [ -d /usr/lib/systemd/system ]; then
	# verify checks that ExecStart's program exists: give it a root of its
	# own holding the unit, systemd's units and inlet at /usr/local/bin.
	root="$tmp/root"
	mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
	cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
	cp "$INLET_BIN" "$root/usr/local/bin/inlet"
	cp deploy/systemd/inlet.service "$root/etc/systemd/system/"
	# It exits 0 on some warnings (an unknown key): clean means silent.
	if ! out="$(systemd-analyze verify --root="$root" --generators=no "$root/etc/systemd/system/inlet.service" 2>&1)" || [ -n "$out" ]; then
		echo "$out" >&2
		echo "kube-check: systemd-analyze verify deploy/systemd/inlet.service is not clean (above)" >&2
		exit 1
	fi
else
	echo "kube-check: skipping systemd-analyze verify: systemd-analyze is not installed (no systemd on this machine)" >&2
fi
echo "== kube-check: passed in $((SECONDS - start)) s" >&2
