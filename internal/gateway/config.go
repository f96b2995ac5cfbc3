package gateway

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/catalogrpc"
	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/devbroker"
	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/spool"
	"github.com/inlet-dev/inlet/internal/webui"
)

// Ack modes: when a request's events count as taken (see ackmode.go).
const (
	AckSpool = "spool" // 200 once the events are fsynced to the local spool (the default)
	AckKafka = "kafka" // 200 once Kafka acknowledged every event
	AckNone  = "none"  // 202 once the events are enqueued in memory
)

// Values of the removed --http-front flag (Config.HTTPFront), still
// accepted for one release so that command lines keep working.
const (
	FrontFast    = "fasthttp"
	FrontNetHTTP = "nethttp"
)

// Reply modes: how request-reply replies come back to this instance.
const (
	ReplyKafka = "kafka" // a reply topic per instance
	ReplyRedis = "redis" // a Redis pub/sub channel per instance
)

// Config is everything a gateway needs. Start from DefaultConfig.
type Config struct {
	Listen string // HTTP listen address: plain (HTTP/1.1 and h2c), or HTTPS with TLSCert and no TLSListen
	// TLSCert and TLSKey are the PEM certificate (with its chain) and key
	// of HTTPS (HTTP/1.1 and HTTP/2 by ALPN, TLS 1.2 at least), reloaded
	// when the files change (TLSReloadInterval, and SIGHUP: Reload).
	TLSCert, TLSKey string
	// TLSListen is the HTTPS listen address; with it, Listen stays plain.
	// Empty: Listen serves HTTPS when TLSCert is set.
	TLSListen string
	// TLSReloadInterval is how often the files are checked for a change
	// (written, touched or replaced); 0: only on SIGHUP.
	TLSReloadInterval time.Duration
	// OpsListen is the operators' listen address (plain HTTP): /metrics,
	// /debug/pprof/ and the live page /ui/ are served there and no longer
	// on Listen (404); both serve /healthz and /readyz. Empty: Listen
	// serves everything.
	OpsListen string
	Brokers   []string // Kafka seed brokers; empty starts the development broker
	Ack       string   // AckSpool, AckKafka or AckNone
	DataDir   string   // the spool (<DataDir>/spool) and the development broker's data

	Broker    devbroker.Config // without Brokers; its DataDir defaults to DataDir
	Kafka     kafka.Config     // the events producer; its Brokers are set by Start
	Ingest    ingest.Config    // AckStatus is set by Start from Ack
	Spool     spool.Config     // with AckSpool; Dir empty means <DataDir>/spool
	Forwarder spool.ForwarderConfig
	UI        webui.Config // the browser side: /sdk/inlet.js, /ui, /example/
	// Enrich: UA parsing, geo-IP and bots (--parse-ua, --geoip-db, --bots).
	Enrich enrich.Config

	// The event catalog (--catalog: codes and the tracking plan at ingest);
	// its RedisAddr defaults to RedisAddr (--redis), its Path to
	// <DataDir>/catalog.db.
	Catalog catalog.Config
	// Client credentials (--clients; --auth requires them on HTTP ingest).
	Auth auth.Config
	// The catalog's gRPC and Thrift servers (--grpc-listen,
	// --thrift-listen); they need Auth.ClientsFile.
	CatalogRPC catalogrpc.Config

	// Request-reply (POST /v1/rpc/{service}); off while RPC.Services is empty.
	RPC reply.Config
	// RPCCompression and RPCLinger configure the producer of requests, a
	// Kafka client of its own (BENCHMARKS.md, "request-reply", says why).
	RPCCompression string
	RPCLinger      time.Duration
	Reply          string // ReplyKafka or ReplyRedis
	RedisAddr      string // with ReplyRedis
	ReplyTopic     string // default inlet.replies.<instance>
	ReplyChannel   string // default inlet:replies:<instance>
	InstanceID     string // default <hostname>-<port>
	// Version is inlet's version, shown by GET / with the operators'
	// endpoints (set by inlet serve; not a flag).
	Version string

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration // the whole request, body included
	IdleTimeout       time.Duration
	HTTP2MaxStreams   int // concurrent requests on one HTTP/2 (h2c) connection
	// MaxRequests bounds the requests served at once, on all connections,
	// each class of requests within its share (classLimits; 503 with
	// Retry-After past it); 0 sizes it to the body budget, one request per
	// RequestBytes of Ingest.MaxInflightBytes.
	MaxRequests int
	// MaxHeaderBytes bounds a request's header (HTTP/1 and HTTP/2): 431
	// past it. With MaxConns it bounds the memory that clients hold before
	// any credential is checked: about 11 KB per idle connection and 30 KB
	// per connection sending a 16 KiB header (BENCHMARKS.md, issue 27).
	MaxHeaderBytes int
	// MaxConns bounds the connections open at once on each HTTP listener:
	// past it a new connection waits in the kernel's accept queue until
	// one closes. 0: no bound but the file-descriptor limit.
	MaxConns int
	// ResponseWriteTimeout is the time a client has to read an answer
	// once its first byte is written; 0 leaves only the server's
	// write timeout.
	ResponseWriteTimeout time.Duration
	Pprof                bool // net/http/pprof under /debug/pprof/
	// HTTPFront is what --http-front said: "", FrontNetHTTP or FrontFast.
	// net/http serves every listener whatever it is; FrontFast (the
	// fasthttp front, removed) is logged as a warning at start.
	//
	// Deprecated: to be removed with the flag in the next release.
	HTTPFront string

	// ShutdownTimeout bounds Shutdown, and the teardown after a failed Start.
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long Drain keeps serving, unready, before the
	// shutdown starts (0: none), so that load balancers take the instance
	// out first. It is not part of ShutdownTimeout.
	ShutdownDelay time.Duration
	// ReadyInterval is how often /readyz re-checks the brokers.
	ReadyInterval time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:               "127.0.0.1:8080",
		Ack:                  AckSpool,
		DataDir:              ".inlet",
		Broker:               devbroker.DefaultConfig(),
		Kafka:                kafka.DefaultConfig(),
		Ingest:               ingest.DefaultConfig(),
		Enrich:               enrich.DefaultConfig(),
		Spool:                spool.DefaultConfig(),
		Forwarder:            spool.DefaultForwarderConfig(),
		UI:                   webui.DefaultConfig(),
		Catalog:              catalog.DefaultConfig(),
		Auth:                 auth.DefaultConfig(),
		CatalogRPC:           catalogrpc.DefaultConfig(),
		RPC:                  reply.DefaultConfig(),
		RPCCompression:       "none",
		RPCLinger:            time.Millisecond,
		Reply:                ReplyKafka,
		ReadHeaderTimeout:    5 * time.Second,
		ReadTimeout:          30 * time.Second,
		IdleTimeout:          120 * time.Second,
		HTTP2MaxStreams:      128,
		MaxHeaderBytes:       16 << 10,
		ResponseWriteTimeout: 5 * time.Second,
		ShutdownTimeout:      30 * time.Second,
		ReadyInterval:        5 * time.Second,
		TLSReloadInterval:    10 * time.Second,
	}
}

// RegisterFlags binds c's fields to the flags of `inlet serve`, each
// package registering its own; the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen address (host:port); HTTPS with --tls-cert unless --tls-listen is given")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate `file` (with its chain) for HTTPS: HTTP/1.1 and HTTP/2, TLS 1.2 at least; reloaded when it changes (looked at every --tls-reload-interval, and on SIGHUP)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key `file` of --tls-cert")
	fs.StringVar(&c.TLSListen, "tls-listen", c.TLSListen, "HTTPS listen address (host:port); --listen then stays plain HTTP (HTTP/1.1 and h2c)")
	fs.DurationVar(&c.TLSReloadInterval, "tls-reload-interval", c.TLSReloadInterval, "how often --tls-cert and --tls-key are checked for changes (0: only on SIGHUP)")
	fs.StringVar(&c.OpsListen, "ops-listen", c.OpsListen, "operators' listen address (host:port, plain HTTP): /metrics, /debug/pprof/ and /ui/ move there from --listen; both serve /healthz and /readyz")
	cliflag.List(fs, &c.Brokers, "brokers", "Kafka seed brokers, comma-separated host:port; empty starts the embedded development broker")
	fs.StringVar(&c.Ack, "ack", c.Ack, "when to answer: spool (200 once fsynced to the local spool), kafka (200 once Kafka acknowledged every event) or none (202 once enqueued in memory)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for local state: the spool (<data-dir>/spool) and the development broker's data")
	c.Spool.RegisterFlags(fs, "spool-")
	c.Broker.RegisterFlags(fs, "broker-")
	c.Ingest.RegisterFlags(fs)
	c.Enrich.RegisterFlags(fs)
	c.Kafka.RegisterFlags(fs)
	c.Kafka.Security.RegisterFlags(fs)
	c.RPC.RegisterFlags(fs)
	c.UI.RegisterFlags(fs)
	c.Catalog.RegisterFlags(fs)
	c.Auth.RegisterFlags(fs)
	c.CatalogRPC.RegisterFlags(fs)
	fs.DurationVar(&c.RPCLinger, "rpc-linger", c.RPCLinger, "how long request-reply requests wait to share a produce request")
	fs.StringVar(&c.RPCCompression, "rpc-compression", c.RPCCompression, "record batch compression of request-reply requests: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&c.Reply, "reply", c.Reply, "how replies come back: kafka (a reply topic per instance) or redis (a pub/sub channel per instance)")
	fs.StringVar(&c.RedisAddr, "redis", c.RedisAddr, "Redis host:port for --reply redis, the catalog's shared store (--catalog-store) and clients' rates shared across instances (--rate-limit-store)")
	fs.StringVar(&c.ReplyTopic, "reply-topic", c.ReplyTopic, "this instance's reply topic (default inlet.replies.<instance-id>)")
	fs.StringVar(&c.ReplyChannel, "reply-channel", c.ReplyChannel, "this instance's reply channel (default inlet:replies:<instance-id>)")
	fs.StringVar(&c.InstanceID, "instance-id", c.InstanceID, "this instance's name in its reply topic or channel (default <hostname>-<port>); keep it stable across restarts")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", c.ReadHeaderTimeout, "time a client has to send the request headers")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", c.ReadTimeout, "time a client has to send the whole request")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.IntVar(&c.HTTP2MaxStreams, "http2-max-streams", c.HTTP2MaxStreams, "concurrent requests on one HTTP/2 (h2c) connection")
	cliflag.Bytes(fs, &c.MaxHeaderBytes, "max-header-bytes", "a request's header, HTTP/1 and HTTP/2 (431 past it)")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "connections open at once on each HTTP listener (a new one waits in the accept queue past it); 0: no bound but the file-descriptor limit")
	fs.IntVar(&c.MaxRequests, "max-requests", c.MaxRequests, "requests served at once, on all connections: half for ingest, a quarter for request-reply calls reading their bodies, a quarter for the rest (503 with Retry-After past a share; calls waiting for replies count against --rpc-max-in-flight only); 0: one per 16 KiB of --max-inflight-bytes")
	fs.DurationVar(&c.ResponseWriteTimeout, "response-write-timeout", c.ResponseWriteTimeout, "time a client has to read an answer once it starts (a client that reads nothing is cut then); 0: only the server's write timeout")
	fs.StringVar(&c.HTTPFront, "http-front", c.HTTPFront, "deprecated, no effect: net/http serves every listener (fasthttp, the removed front, is accepted with a warning)")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "serve Go profiles under /debug/pprof/ (for diagnosis; do not expose publicly)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "on SIGTERM/SIGINT, time to finish requests, drain the spool and flush before exiting")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay", c.ShutdownDelay, "on SIGTERM/SIGINT, time to keep serving with /readyz answering 503 and keep-alives off before the shutdown starts, so that load balancers take this instance out first (a second signal skips the rest); 0: none")
}

// RequestBytes is the share of the body budget (--max-inflight-bytes) that
// sizes the default --max-requests: 4,096 requests at the default 64 MiB,
// each holding a goroutine and its buffers (about 24 KiB: 100 MiB at most).
const RequestBytes = 16 << 10

// maxRequests is MaxRequests, or its default.
func (c Config) maxRequests() int {
	if c.MaxRequests > 0 {
		return c.MaxRequests
	}
	return int(max(c.Ingest.MaxInflightBytes/RequestBytes, 1))
}

// rpcBodyBytes is request-reply's share of the in-flight body budget
// (--max-inflight-bytes): a quarter, but at least one body of
// --rpc-max-body-bytes; none without services (every call is answered 404,
// no body read). Ingest has the rest, so that stalled request-reply
// uploads cannot take the memory ingest needs, nor the other way round.
func (c Config) rpcBodyBytes() int64 {
	if len(c.RPC.Services) == 0 {
		return 0
	}
	return max(c.Ingest.MaxInflightBytes/4, c.RPC.MaxBodyBytes)
}

// ingestBodyBytes is ingest's share of the in-flight body budget: what
// request-reply's leaves.
func (c Config) ingestBodyBytes() int64 { return c.Ingest.MaxInflightBytes - c.rpcBodyBytes() }

// rpcKafka is the configuration of the request producer: the events
// producer's (brokers, buffer bounds, delivery timeout; client id with
// "-rpc"), with its own compression and linger, to one partition at a time.
func (c Config) rpcKafka(brokers []string) kafka.Config {
	k := c.Kafka
	k.Brokers = brokers
	k.ClientID += "-rpc"
	k.Compression, k.Linger, k.Sticky = c.RPCCompression, c.RPCLinger, true
	return k
}

// kafkaCertOnlyExpired reports whether the Kafka security settings are
// valid but for the client certificate's dates.
func (c Config) kafkaCertOnlyExpired() bool {
	k := c.Kafka
	k.AllowExpiredCert = true
	_, err := k.SecurityOpts(nil)
	return err == nil
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch c.Ack {
	case AckKafka, AckNone:
	case AckSpool:
		sc := c.Spool
		if sc.Dir == "" {
			sc.Dir = "spool" // only for validation
		}
		if err := sc.Validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--ack %q: want spool, kafka or none", c.Ack)
	}
	switch c.HTTPFront {
	case FrontFast, FrontNetHTTP, "": // net/http serves all; Start warns of fasthttp
	default:
		return fmt.Errorf("--http-front %q: the flag is deprecated and has no effect (net/http serves every listener); drop it", c.HTTPFront)
	}
	switch c.Reply {
	case ReplyKafka:
	case ReplyRedis:
		if c.RedisAddr == "" && len(c.RPC.Services) > 0 {
			return errors.New("--reply redis needs --redis host:port")
		}
	default:
		return fmt.Errorf("--reply %q: want kafka or redis", c.Reply)
	}
	if err := c.RPC.Validate(); err != nil {
		return err
	}
	if in := c.ingestBodyBytes(); in < c.Ingest.MaxDecompressedBytes {
		return fmt.Errorf("--max-inflight-bytes %d leaves ingest %d bytes beside request-reply's share (%d: a quarter, at least --rpc-max-body-bytes), below --max-decompressed-bytes (%d)",
			c.Ingest.MaxInflightBytes, in, c.rpcBodyBytes(), c.Ingest.MaxDecompressedBytes)
	}
	if _, err := kafka.Codec(c.RPCCompression); err != nil {
		return fmt.Errorf("--rpc-compression: %w", err)
	}
	if c.RPCLinger < 0 {
		return errors.New("--rpc-linger must not be negative")
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if len(c.Brokers) == 0 && (c.Kafka.Security.TLSEnabled() || c.Kafka.Security.SASL != "") {
		return errors.New("--kafka-tls and --kafka-sasl need --brokers: the development broker speaks plaintext only")
	}
	if err := c.Kafka.Security.Validate(); err != nil && !c.kafkaCertOnlyExpired() {
		return err
	}
	if c.HTTP2MaxStreams < 1 {
		return errors.New("--http2-max-streams must be at least 1")
	}
	if c.MaxRequests < 0 || c.ResponseWriteTimeout < 0 || c.MaxConns < 0 {
		return errors.New("--max-requests, --max-conns and --response-write-timeout must not be negative")
	}
	if c.MaxHeaderBytes < 1<<10 {
		return errors.New("--max-header-bytes must be at least 1KiB")
	}
	if c.ShutdownTimeout <= 0 || c.ReadTimeout <= 0 || c.ReadHeaderTimeout <= 0 {
		return errors.New("timeouts must be positive")
	}
	if c.ShutdownDelay < 0 {
		return errors.New("--shutdown-delay must not be negative")
	}
	if c.ReadyInterval <= 0 {
		return errors.New("the readiness interval must be positive")
	}
	if err := c.UI.Validate(); err != nil {
		return err
	}
	if err := c.validateCatalog(); err != nil {
		return err
	}
	if err := c.Enrich.Validate(); err != nil {
		return err
	}
	return c.Ingest.Validate()
}

// validateCatalog checks the catalog's part of c: the client credentials,
// the RPC servers and the store (inlet serve's and inlet catalog serve's).
func (c Config) validateCatalog() error {
	if c.CatalogRPC.Enabled() && c.Auth.ClientsFile == "" {
		return errors.New("--grpc-listen and --thrift-listen need --clients FILE: every catalog call carries client credentials (make the file with `inlet clients add --file FILE NAME`)")
	}
	if c.Auth.HTTP && c.Auth.ClientsFile == "" {
		return errors.New("--auth needs --clients FILE (make one with `inlet clients add --file FILE NAME`)")
	}
	if err := c.authConfig().Validate(); err != nil {
		return err
	}
	if err := c.CatalogRPC.Validate(); err != nil {
		return err
	}
	if c.needsCatalog() {
		if err := c.catalogConfig().Validate(); err != nil {
			return err
		}
		if cc := c.catalogConfig(); cc.StoreKind() == catalog.StoreRedis && cc.RedisAddr == "" {
			return errors.New("--catalog-store redis needs --redis host:port")
		}
	}
	return nil
}
