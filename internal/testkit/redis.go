package testkit

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisCtl is a Redis server of the test's own that it may stop and start.
type RedisCtl struct {
	Addr string
	// Stop kills the server (SIGKILL: nothing is saved); Start starts it
	// again on the same port, empty.
	Stop  func()
	Start func()
}

// PrivateRedis starts a real redis-server of the test's own on a free
// loopback port (no persistence), for tests that stop Redis: never the
// one other tests share (Redis). It is stopped at the end of the test.
// Without redis-server the test is skipped (failed under `make test`,
// INLET_TEST_REQUIRE_KAFKA=1).
func PrivateRedis(tb testing.TB) RedisCtl {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if requireReal() {
			tb.Fatal("INLET_TEST_REQUIRE_KAFKA=1 but redis-server is not installed: run `make test`")
		}
		tb.Skip("redis-server is not installed (`make test` installs it)")
	}
	dir := tb.TempDir()
	addr := FreeAddr(tb)
	_, port, _ := net.SplitHostPort(addr)
	var (
		mu  sync.Mutex
		cmd *exec.Cmd
	)
	start := func() {
		tb.Helper()
		mu.Lock()
		defer mu.Unlock()
		if cmd != nil {
			return
		}
		log, err := os.OpenFile(filepath.Join(dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			tb.Fatal(err)
		}
		c := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
			"--dir", dir, "--protected-mode", "no")
		c.Stdout, c.Stderr = log, log
		if err := c.Start(); err != nil {
			log.Close()
			tb.Fatal(err)
		}
		go func() { _ = c.Wait(); log.Close() }()
		cmd = c
		deadline := time.Now().Add(10 * time.Second)
		for {
			if redisPing(addr) {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				tb.Fatalf("private redis-server on %s did not answer PING within 10s:\n%s", addr, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		if cmd == nil {
			return
		}
		_ = cmd.Process.Kill()
		for i := 0; i < 500 && redisPing(addr); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		cmd = nil
	}
	tb.Cleanup(stop)
	start()
	return RedisCtl{Addr: addr, Stop: stop, Start: start}
}

// redisPing reports whether a Redis server answers PING at addr.
func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}
