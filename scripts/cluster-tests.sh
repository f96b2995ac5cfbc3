#!/usr/bin/env bash
# Runs the tests that start a 3-node Kafka cluster (TLS, SASL, failover;
# testkit.ClusterTests in internal/testkit/cluster.go), one package at a
# time, so that one cluster at most runs at once. `make test` runs it after
# the other tests; `make test-cluster` runs it alone (it needs Java and
# Maven, like scripts/kafka.sh, and fetches Kafka the first time).
#
# Usage: scripts/cluster-tests.sh [go test flags...]   (default: -race -count=1)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export INLET_TEST_KAFKA_SCRIPT="${INLET_TEST_KAFKA_SCRIPT:-$REPO/scripts/kafka.sh}"
export INLET_TEST_REQUIRE_KAFKA="${INLET_TEST_REQUIRE_KAFKA:-1}"
unset INLET_TEST_CLUSTER
tests="$(sed -n 's/^const ClusterTests = "\(.*\)"$/\1/p' internal/testkit/cluster.go)"
pkgs="$(sed -n 's/^var ClusterPackages = \[\]string{\(.*\)}$/\1/p' internal/testkit/cluster.go | tr -d '",')"
[ -n "$tests" ] && [ -n "$pkgs" ] || { echo "cluster-tests.sh: ClusterTests/ClusterPackages not found in internal/testkit/cluster.go" >&2; exit 1; }
[ $# -eq 0 ] && set -- -race -count=1
# shellcheck disable=SC2086
go test "$@" -p 1 -timeout 40m -run "$tests" $pkgs
