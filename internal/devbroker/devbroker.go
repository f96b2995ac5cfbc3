// Package devbroker runs franz-go's kfake Kafka broker in process, with its
// data persisted on disk, so that inlet works on a laptop with nothing else
// installed. It is a single-node development broker: no replication, no
// production guarantees.
package devbroker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config configures the development broker.
type Config struct {
	// Listen is the host:port to listen on; port 0 picks a free port.
	Listen string
	// DataDir is where topics and offsets persist; empty keeps them in memory.
	DataDir string
	// Partitions is the partition count of topics created on demand.
	Partitions int
	// SyncWrites fsyncs every produced batch before acknowledging it.
	SyncWrites bool
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:9092", Partitions: 3, SyncWrites: true}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("devbroker: listen address %q: %w", c.Listen, err)
	}
	if c.Partitions < 1 {
		return errors.New("devbroker: partitions must be at least 1")
	}
	return nil
}

// Broker is a running development broker.
type Broker struct {
	c    *kfake.Cluster
	addr string
}

// Start starts the broker; it listens when Start returns. Stop it with Close.
func Start(cfg Config, log *slog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// kfake always binds 127.0.0.1:<port>; ListenFn binds where we are told.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("devbroker: listening on %s: %w", cfg.Listen, err)
	}
	_, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	used := false
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			if used {
				return nil, errors.New("devbroker: one listener only")
			}
			used = true
			return ln, nil
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(cfg.Partitions),
		kfake.ClusterID("inlet-dev"),
		kfake.WithLogger(kfakeLogger{log}),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(filepath.Join(cfg.DataDir, "broker")))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("devbroker: starting: %w", err)
	}
	return &Broker{c: c, addr: ln.Addr().String()}, nil
}

// Addr is the broker's host:port, to use as a seed broker.
func (b *Broker) Addr() string { return b.addr }

// Close stops the broker and writes its state to disk. It is safe to call more than once.
func (b *Broker) Close() { b.c.Close() }

type kfakeLogger struct{ l *slog.Logger }

func (k kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	if level == kfake.LogLevelError {
		k.l.Error("devbroker: " + fmt.Sprintf(msg, args...))
	} else if level == kfake.LogLevelWarn {
		k.l.Debug("devbroker: " + fmt.Sprintf(msg, args...))
	}
}
