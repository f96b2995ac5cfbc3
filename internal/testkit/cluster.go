package testkit

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// KafkaCluster is a real multi-node Kafka cluster of the test's own
// (scripts/kafka.sh cluster-start): every node a KRaft broker and
// controller, with PLAINTEXT, SASL_SSL (SCRAM-SHA-256, SCRAM-SHA-512 and
// PLAIN users) and SSL (client certificate required) listeners, topics
// replicated 3 times with min.insync.replicas=2. The test may stop, kill
// and start nodes by id (1..Nodes).
type KafkaCluster struct {
	// Dir is the cluster's directory: certificates, each node's config,
	// data and server.log.
	Dir   string
	Nodes int
	// Plaintext, SASLSSL and SSL are the bootstrap addresses of each
	// listener type, one per node in id order.
	Plaintext, SASLSSL, SSL []string

	// CAFile signs the brokers' certificates (SAN 127.0.0.1, localhost) and
	// the client ones; ClientCert/ClientKey are valid, ExpiredCert/
	// ExpiredKey expired (signed by the same CA), OtherCAFile an unrelated
	// CA that signs OtherClientCert/OtherClientKey.
	CAFile, ClientCert, ClientKey   string
	ExpiredCert, ExpiredKey         string
	OtherCAFile                     string
	OtherClientCert, OtherClientKey string

	// ScramUser/ScramPassword authenticate with SCRAM-SHA-256 and -512;
	// PlainUser/PlainPassword with PLAIN.
	ScramUser, ScramPassword string
	PlainUser, PlainPassword string

	tb     testing.TB
	script string
	env    map[string]string
	mu     sync.Mutex // one script run at a time
}

// ClusterTests are the tests that start a Cluster, as a go test -run
// pattern, for make test's cluster phase (scripts/test.sh); a new one must
// be added here, and its package to ClusterPackages.
const ClusterTests = "^(TestCluster|TestKafkaSecurity|TestFailover)$"

// ClusterPackages are the packages of ClusterTests.
var ClusterPackages = []string{"./internal/kafka", "./internal/app", "./internal/failover"}

// Cluster starts a 3-node Kafka cluster of the test's own through
// scripts/kafka.sh (INLET_TEST_KAFKA_SCRIPT), in a temporary directory on
// free loopback ports, and stops it and deletes its data at the end of the
// test (after printing the tail of each node's log if the test failed).
// It is skipped with -short and without INLET_TEST_KAFKA_SCRIPT (failed
// then with INLET_TEST_REQUIRE_KAFKA=1). Starting takes about half a
// minute, and the three JVMs about 1 GB: share one cluster between the
// subtests of a test.
func Cluster(tb testing.TB) *KafkaCluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: no 3-node Kafka cluster")
	}
	if os.Getenv("INLET_TEST_CLUSTER") == "later" {
		// make test runs the tests of a cluster after the others, one
		// package at a time (ClusterTests), so that no two clusters of
		// three JVMs share this machine's cores with everything else.
		tb.Skip("INLET_TEST_CLUSTER=later: the cluster tests run in make test's cluster phase")
	}
	script := os.Getenv("INLET_TEST_KAFKA_SCRIPT")
	if script == "" {
		if requireReal() {
			tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but INLET_TEST_KAFKA_SCRIPT is empty: run `make test`")
		}
		tb.Skip("INLET_TEST_KAFKA_SCRIPT is not set: no scripts/kafka.sh to start a cluster with")
	}
	dir, err := os.MkdirTemp("", "inlet-kafka-cluster-")
	if err != nil {
		tb.Fatal(err)
	}
	c := &KafkaCluster{Dir: dir, tb: tb, script: script}
	tb.Cleanup(func() {
		if tb.Failed() {
			c.dumpLogs()
		}
		cmd := exec.Command(script, "cluster-stop")
		cmd.Env = append(os.Environ(), "KAFKA_DIR="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Errorf("stopping the kafka cluster: %v\n%s", err, out)
		}
		os.RemoveAll(dir)
	})
	c.run("cluster-start")
	c.env = readEnv(tb, filepath.Join(dir, "cluster.env"))
	c.Nodes, _ = strconv.Atoi(c.env["NODES"])
	split := func(k string) []string { return strings.Split(c.env[k], ",") }
	c.Plaintext, c.SASLSSL, c.SSL = split("PLAINTEXT"), split("SASL_SSL"), split("SSL")
	c.CAFile, c.ClientCert, c.ClientKey = c.env["CA_FILE"], c.env["CLIENT_CERT"], c.env["CLIENT_KEY"]
	c.ExpiredCert, c.ExpiredKey = c.env["EXPIRED_CERT"], c.env["EXPIRED_KEY"]
	c.OtherCAFile, c.OtherClientCert, c.OtherClientKey = c.env["OTHER_CA_FILE"], c.env["OTHER_CLIENT_CERT"], c.env["OTHER_CLIENT_KEY"]
	c.ScramUser, c.ScramPassword = c.env["SCRAM_USER"], c.env["SCRAM_PASSWORD"]
	c.PlainUser, c.PlainPassword = c.env["PLAIN_USER"], c.env["PLAIN_PASSWORD"]
	if c.Nodes < 1 || len(c.Plaintext) != c.Nodes || c.CAFile == "" || c.ScramPassword == "" {
		tb.Fatalf("incomplete %s/cluster.env: %v", dir, c.env)
	}
	return c
}

// run runs the script's verb on the cluster and returns its stdout.
func (c *KafkaCluster) run(verb string, args ...string) string {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := exec.Command(c.script, append([]string{verb}, args...)...)
	cmd.Env = append(os.Environ(), "KAFKA_DIR="+c.Dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.tb.Fatalf("KAFKA_DIR=%s %s %s %s: %v\n%s", c.Dir, c.script, verb, strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// StopNode stops node id (SIGTERM: a controlled shutdown), keeping its data.
func (c *KafkaCluster) StopNode(id int) { c.run("node-stop", strconv.Itoa(id)) }

// KillNode kills node id with SIGKILL, keeping its data.
func (c *KafkaCluster) KillNode(id int) { c.run("node-kill", strconv.Itoa(id)) }

// StartNode starts node id again from its data and waits until the running
// nodes list it in their metadata.
func (c *KafkaCluster) StartNode(id int) { c.run("node-start", strconv.Itoa(id)) }

// Addr returns node id's address on listener (PLAINTEXT, SASL_SSL, SSL or
// CONTROLLER).
func (c *KafkaCluster) Addr(id int, listener string) string {
	return c.env["NODE_"+strconv.Itoa(id)+"_"+listener]
}

// Log returns node id's server log.
func (c *KafkaCluster) Log(id int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "node-"+strconv.Itoa(id), "server.log"))
	return string(b)
}

// dumpLogs prints the last lines of each node's log.
func (c *KafkaCluster) dumpLogs() {
	for id := 1; id <= c.Nodes; id++ {
		lines := strings.Split(strings.TrimRight(c.Log(id), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		c.tb.Logf("node %d server.log (last %d lines):\n%s", id, len(lines), strings.Join(lines, "\n"))
	}
}

// readEnv reads KEY=VALUE lines.
func readEnv(tb testing.TB, path string) map[string]string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return env
}
