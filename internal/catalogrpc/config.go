package catalogrpc

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/membudget"
)

// Thrift transports (--thrift-transport).
const (
	TransportFramed   = "framed"
	TransportBuffered = "buffered"
)

// Config configures the catalog's RPC front ends.
type Config struct {
	// GRPCListen and ThriftListen are the addresses the gRPC and Thrift
	// servers listen on; "" for none.
	GRPCListen   string
	ThriftListen string
	// ThriftTransport is TransportFramed or TransportBuffered; the protocol
	// is always binary.
	ThriftTransport string
	// MaxMessageBytes is the largest request either front end reads: gRPC's
	// receive limit, Thrift's frame and message size limit. The catalog's
	// requests are small (a lookup is a few hundred bytes): the default is
	// 64 KiB.
	MaxMessageBytes int
	// MaxConns is the most connections each front end keeps open; one over
	// it is closed at once.
	MaxConns int
	// CallTimeout bounds one call: its handler's context (gRPC: unless the
	// client's deadline is sooner) and, over Thrift, reading the request and
	// writing the answer once its first byte has come.
	CallTimeout time.Duration
	// IdleTimeout closes a connection that has had no call for this long
	// (gRPC: MaxConnectionIdle; Thrift: the read deadline between calls).
	IdleTimeout time.Duration
	// GRPCMaxStreams is the most concurrent calls on one gRPC connection
	// (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS: a client queues more).
	GRPCMaxStreams int
	// GRPCKeepaliveMinTime: a client that pings more often than this is
	// disconnected (keepalive enforcement).
	GRPCKeepaliveMinTime time.Duration
	// AuthTimeout closes a connection on which no call has presented valid
	// credentials this long after it was accepted.
	AuthTimeout time.Duration
	// Budget is the in-flight byte budget the front ends' requests draw
	// from before they are read, together holding at most its per-connection
	// share (membudget.NewShared); the gateway passes the one its HTTP
	// bodies draw from. Nil: a budget of DefaultBudgetBytes of the server's
	// own.
	Budget *membudget.Budget
}

// DefaultBudgetBytes is the size of the budget of a server given none.
const DefaultBudgetBytes = 64 << 20

// DefaultConfig returns the defaults the flags have.
func DefaultConfig() Config {
	return Config{
		ThriftTransport:      TransportFramed,
		MaxMessageBytes:      64 << 10,
		MaxConns:             512,
		CallTimeout:          10 * time.Second,
		IdleTimeout:          5 * time.Minute,
		GRPCMaxStreams:       32,
		GRPCKeepaliveMinTime: 10 * time.Second,
		AuthTimeout:          10 * time.Second,
	}
}

// RegisterFlags registers the flags of c on fs, with c's values as the
// defaults (call it on DefaultConfig()).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCListen, "grpc-listen", c.GRPCListen, "serve the catalog over gRPC on this address (inf.Data, inlet.catalog.v1.Catalog, health, reflection); off unless given")
	fs.StringVar(&c.ThriftListen, "thrift-listen", c.ThriftListen, "serve the catalog over Thrift (binary protocol) on this address: inf.Data unmultiplexed, inlet.catalog.v1.Catalog multiplexed; off unless given")
	fs.StringVar(&c.ThriftTransport, "thrift-transport", c.ThriftTransport, "Thrift transport: framed or buffered")
	cliflag.Bytes(fs, &c.MaxMessageBytes, "catalog-rpc-max-message-bytes", "largest gRPC message or Thrift frame the catalog's RPC servers read (KiB, MiB, GiB)")
	fs.IntVar(&c.MaxConns, "catalog-rpc-max-conns", c.MaxConns, "most connections each of the gRPC and Thrift servers keeps open (more are closed at once)")
	fs.DurationVar(&c.CallTimeout, "catalog-rpc-timeout", c.CallTimeout, "longest one catalog RPC call may take")
	fs.DurationVar(&c.IdleTimeout, "catalog-rpc-idle-timeout", c.IdleTimeout, "close a gRPC or Thrift connection that has had no call for this long")
	fs.IntVar(&c.GRPCMaxStreams, "grpc-max-streams", c.GRPCMaxStreams, "most concurrent calls on one gRPC connection")
	fs.DurationVar(&c.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", c.GRPCKeepaliveMinTime, "disconnect gRPC clients that send keepalive pings more often than this")
	fs.DurationVar(&c.AuthTimeout, "catalog-rpc-auth-timeout", c.AuthTimeout, "close a gRPC or Thrift connection on which no call has presented valid credentials this long after it opened")
}

// Enabled reports whether either front end is configured.
func (c *Config) Enabled() bool { return c.GRPCListen != "" || c.ThriftListen != "" }

// Validate reports the first bad setting.
func (c *Config) Validate() error {
	switch c.ThriftTransport {
	case TransportFramed, TransportBuffered:
	default:
		return fmt.Errorf("--thrift-transport %q: want framed or buffered", c.ThriftTransport)
	}
	if c.MaxMessageBytes < 1024 || c.MaxMessageBytes > 1<<30 {
		return fmt.Errorf("--catalog-rpc-max-message-bytes %d: want 1024 to 1073741824", c.MaxMessageBytes)
	}
	if c.MaxConns < 1 {
		return fmt.Errorf("--catalog-rpc-max-conns %d: want at least 1", c.MaxConns)
	}
	if c.CallTimeout <= 0 {
		return errors.New("--catalog-rpc-timeout: want a positive duration")
	}
	if c.IdleTimeout <= 0 {
		return errors.New("--catalog-rpc-idle-timeout: want a positive duration")
	}
	if c.GRPCMaxStreams < 1 {
		return fmt.Errorf("--grpc-max-streams %d: want at least 1", c.GRPCMaxStreams)
	}
	if c.AuthTimeout <= 0 {
		return errors.New("--catalog-rpc-auth-timeout: want a positive duration")
	}
	if c.GRPCKeepaliveMinTime <= 0 {
		return errors.New("--grpc-keepalive-min-time: want a positive duration")
	}
	if c.GRPCListen != "" && c.GRPCListen == c.ThriftListen && !strings.HasSuffix(c.GRPCListen, ":0") {
		return fmt.Errorf("--grpc-listen and --thrift-listen are both %q: give each its own address", c.GRPCListen)
	}
	return nil
}
