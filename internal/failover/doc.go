// Package failover holds end-to-end tests of inlet's promise, no
// acknowledged event lost, across broker failures on a real replicated
// Kafka: a 3-node KRaft cluster of the tests' own (testkit.Cluster,
// replication 3, min.insync.replicas=2), the built `inlet serve` binary with
// --ack kafka and --ack spool side by side, and the load and loss check of
// `inlet verify` (internal/verify) sent through a recording proxy that
// measures what the clients saw: answers by status, 503s without
// Retry-After, the slowest answer and the gaps in acknowledgements.
//
// The scenarios run one after the other on one cluster, every node
// restored between them:
//
//   - leader kill: the leader of the busiest partition of the events topic
//     killed with SIGKILL three times, each time restarted after 10 s;
//   - two down: two of the three nodes killed for 20 s (fewer replicas than
//     min.insync.replicas, and no controller quorum): --ack kafka answers
//     503 with Retry-After within its produce timeout, --ack spool answers
//     200 and delivers everything after recovery, and /readyz says which;
//   - rolling restart: every node stopped (SIGTERM) and started in turn,
//     each back in the ISR before the next.
//
// Each scenario logs a line starting "failover summary:" per gateway (lost,
// duplicates, longest time without a 2xx, answers); with
// INLET_FAILOVER_SUMMARY=FILE the lines are also appended to FILE.
// (scripts/bench-cluster.sh measures its leader-kill figures with inlet
// verify's own report instead, on its own cluster.)
//
// The package has no non-test code. TestRecorder checks the proxy against
// a fake gateway in a few seconds; TestFailover, the scenarios, is skipped
// with -short and without INLET_TEST_KAFKA_SCRIPT (make test sets it).
// Its time is mostly Kafka nodes starting again (8 restarts, 20 s to over
// a minute each on a busy machine): an estimated 6 to 8 minutes on a quiet
// 2-core machine; 13 minutes measured, twice, at a load average of 50
// (leader kill 209-250 s, two down 128-132 s, rolling restart 267-284 s,
// the cluster's start the rest). It needs three JVMs of up to 384 MB heap
// each. Give it -timeout 20m (make test's), e.g.
//
//	source /tmp/inlet-test-env.sh
//	go test -race -count=1 -timeout 20m -v ./internal/failover/
package failover
