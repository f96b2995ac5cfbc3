#!/usr/bin/env bash
# Runs every test of inlet against real services, on a fresh machine too:
# checks that go.mod and go.sum are tidy, installs and starts Apache Kafka
# (single-node KRaft, from Maven Central) and Redis (Debian's
# redis-server), runs gofmt, go vet and go test -race,
# then the 3-node cluster tests (scripts/cluster-tests.sh), then the web
# tests, and stops the services, whether the tests passed or not.
#
# Usage: scripts/test.sh [go test flags...]     (default: -race -count=1 ./...)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

if ! command -v go >/dev/null 2>&1; then
	echo "test.sh: Go is not installed; install Go 1.26 or newer (https://go.dev/doc/install)" >&2
	exit 1
fi

echo "== go mod tidy -diff" >&2
for mod in . bench/fasthttp deploy/kubecheck internal/enrich/testdata/mkuseragents interop/segment/go; do
	if ! (cd "$mod" && go mod tidy -diff) >&2; then
		echo "test.sh: go.mod or go.sum in $mod is not tidy (the diff above): run 'go mod tidy' there and commit the result" >&2
		exit 1
	fi
done

echo "== tools: protobuf and Thrift compilers" >&2
scripts/tools.sh
export INLET_TEST_REQUIRE_GENERATORS=1
echo "== tools: a Python venv with thrift and grpcio-tools (catalog interop tests)" >&2
scripts/python.sh >/dev/null

echo "== starting Kafka and Redis" >&2
trap 'echo "== stopping Kafka and Redis" >&2; scripts/services.sh stop' EXIT
eval "$(scripts/services.sh start)"
export INLET_TEST_BROKERS="$INLET_KAFKA_BROKERS"
export INLET_TEST_REDIS="$INLET_REDIS_ADDR"
export INLET_TEST_REQUIRE_KAFKA=1
export INLET_TEST_KAFKA_SCRIPT="$REPO/scripts/kafka.sh" # private brokers for outage tests
echo "== Kafka at $INLET_TEST_BROKERS, Redis at $INLET_TEST_REDIS" >&2

echo "== gofmt and go vet" >&2
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*'))"
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...

echo "== go test" >&2
# Packages run in parallel: tests that stop Kafka start private brokers
# of their own (testkit.HaltableKafka, through INLET_TEST_KAFKA_SCRIPT), so
# none stops the broker the others share.
cluster_phase=0
if [ $# -eq 0 ]; then
	set -- -race -count=1 -timeout 20m ./...
	cluster_phase=1
fi
# The tests that start a 3-node cluster (testkit.ClusterTests) run after the
# others, one package at a time: three clusters of three JVMs beside every
# other package overload a two-core machine (load 50 seen), and the timing
# of everything suffers.
INLET_TEST_CLUSTER=later go test "$@"
if [ "$cluster_phase" = 1 ]; then
	# Allocation budgets are skipped under -race (its sync.Pool drops what
	# is put in it at random): counted once more without it.
	echo "== go test: allocation budgets, without -race" >&2
	go test -count=1 -run 'TestBatchAllocs' ./internal/event/
	# bench/fasthttp is a module of its own (fasthttp for the yardstick
	# servers only), outside ./... above.
	echo "== go vet and go test: bench/fasthttp" >&2
	(cd bench/fasthttp && go vet ./... && go test -count=1 ./...)
	echo "== image: make image, then the image on Kafka (scripts/image-check.sh)" >&2
	scripts/image-check.sh
	# The Helm chart, the Kubernetes manifests and the systemd unit: helm
	# lint and template, strict decoding into client-go's types
	# (deploy/kubecheck, a module of its own), systemd-analyze verify.
	echo "== deploy: scripts/kube-check.sh" >&2
	scripts/kube-check.sh
fi
if [ "$cluster_phase" = 1 ]; then
	echo "== go test: the 3-node cluster tests (TLS, SASL, failover), one package at a time" >&2
	scripts/cluster-tests.sh
	echo "== the fleet proof: HAProxy, 3 instances, rolling restarts and a kill -9 under load (scripts/fleet.sh)" >&2
	scripts/fleet.sh
	echo "== the fleet proof once more, the instances as podman containers of the image (--ack spool)" >&2
	FLEET_ACKS=spool scripts/fleet.sh --containers
fi

echo "== ops: Prometheus rules and their tests (promtool), the Grafana dashboard, docs/operating.md" >&2
scripts/ops-check.sh

echo "== routing: docs/routing.md run as written (scripts/routing-check.sh)" >&2
scripts/routing-check.sh

echo "== docs: the runnable blocks of README.md and docs/ run as written (scripts/docs-check.sh)" >&2
scripts/docs-check.sh
echo "== segment: docs/segment.md run as written (scripts/segment-check.sh)" >&2
scripts/segment-check.sh
echo "== configuration: docs/configuration.md run as written (scripts/config-check.sh)" >&2
scripts/config-check.sh
echo "== privacy: docs/privacy.md run as written (scripts/privacy-check.sh)" >&2
scripts/privacy-check.sh
echo "== enrichment: docs/enrichment.md run as written (scripts/enrich-check.sh)" >&2
scripts/enrich-check.sh

echo "== web: inlet.js and the browser tests (headless Chromium)" >&2
if ! command -v npm >/dev/null 2>&1; then
	echo "test.sh: Node.js 20+ and npm are needed for web/ (inlet.js and its browser tests)" >&2
	exit 1
fi
CHROMIUM="$(scripts/chromium.sh)"
(cd web && npm ci --no-audit --no-fund --loglevel=error)
mkdir -p "$REPO/.cache"
go build -o "$REPO/.cache/inlet-web-test" ./cmd/inlet
(cd web && CHROMIUM="$CHROMIUM" INLET_BIN="$REPO/.cache/inlet-web-test" INLET_TEST_REQUIRE_BROWSER=1 npm test)

echo "== segment: the Segment-API SDKs from PyPI, npm and Go, and analytics-next in Chromium (scripts/segment-interop.sh)" >&2
scripts/segment-interop.sh
