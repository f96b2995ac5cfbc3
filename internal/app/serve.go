package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/http2"

	"github.com/inlet-dev/inlet/internal/devbroker"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/spool"
)

// Ack modes.
const (
	AckKafka = "kafka" // answer 200 once Kafka acknowledged every event
	AckNone  = "none"  // answer 202 once the events are enqueued in memory
	AckSpool = "spool" // answer 200 once the events are fsynced to the local spool
)

// ServeConfig is everything `inlet serve` needs.
type ServeConfig struct {
	Listen  string
	Brokers []string // empty: start the development broker
	Ack     string
	DataDir string

	Broker    devbroker.Config
	Kafka     kafka.Config
	Ingest    ingest.Config
	Spool     spool.Config // Dir empty: <DataDir>/spool
	Forwarder spool.ForwarderConfig
	RPC       reply.Config
	// RPCCompression and RPCLinger configure the producer of request-reply
	// requests, a Kafka client of its own (see rpcKafka).
	RPCCompression string
	RPCLinger      time.Duration

	// Reply is how replies come back: "kafka" (a reply topic per instance)
	// or "redis" (a pub/sub channel per instance, on RedisAddr).
	Reply        string
	RedisAddr    string
	ReplyTopic   string // default inlet.replies.<instance>
	ReplyChannel string // default inlet:replies:<instance>
	InstanceID   string // default <hostname>-<port>
	// HTTP2MaxStreams bounds concurrent requests on one HTTP/2 connection.
	HTTP2MaxStreams int

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	// ReadyInterval is how often /readyz re-checks the brokers.
	ReadyInterval time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/ on the HTTP listener.
	Pprof bool
}

// DefaultServeConfig returns the documented defaults.
func DefaultServeConfig() ServeConfig {
	return ServeConfig{
		Listen:            "127.0.0.1:8080",
		Ack:               AckSpool,
		DataDir:           ".inlet",
		Spool:             spool.DefaultConfig(),
		Forwarder:         spool.DefaultForwarderConfig(),
		RPC:               reply.DefaultConfig(),
		RPCCompression:    "none",
		RPCLinger:         time.Millisecond,
		Reply:             "kafka",
		HTTP2MaxStreams:   1000,
		Broker:            devbroker.DefaultConfig(),
		Kafka:             kafka.DefaultConfig(),
		Ingest:            ingest.DefaultConfig(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ShutdownTimeout:   30 * time.Second,
		ReadyInterval:     5 * time.Second,
	}
}

// rpcKafka is how request-reply requests are produced: like events (same
// brokers, buffer bounds, delivery timeout; client id with "-rpc"), but by
// default uncompressed (they are small, and a compressed batch costs the
// broker CPU to validate: 43% of a core against 25% in the request-reply
// benchmark), to one partition at a time (fuller batches, fewer requests),
// and with a linger of 1 ms: with no delay at 1,000 calls/s, the p99 was
// 9.4-10.2 ms against 11.1-11.2 ms with 2 ms lingers (here and in the
// worker), for a few % more broker CPU.
func (c ServeConfig) rpcKafka(brokers []string) kafka.Config {
	k := c.Kafka
	k.Brokers = brokers
	k.ClientID += "-rpc"
	k.Compression, k.Linger, k.Sticky = c.RPCCompression, c.RPCLinger, true
	return k
}

// Validate reports the first invalid setting.
func (c ServeConfig) Validate() error {
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
	switch c.Reply {
	case "kafka":
	case "redis":
		if c.RedisAddr == "" && len(c.RPC.Services) > 0 {
			return errors.New("--reply redis needs --redis host:port")
		}
	default:
		return fmt.Errorf("--reply %q: want kafka or redis", c.Reply)
	}
	if err := c.RPC.Validate(); err != nil {
		return err
	}
	if _, err := kafka.Codec(c.RPCCompression); err != nil {
		return fmt.Errorf("--rpc-compression: %w", err)
	}
	if c.RPCLinger < 0 {
		return errors.New("--rpc-linger must not be negative")
	}
	if c.HTTP2MaxStreams < 1 {
		return errors.New("--http2-max-streams must be at least 1")
	}
	if c.ShutdownTimeout <= 0 || c.ReadTimeout <= 0 || c.ReadHeaderTimeout <= 0 {
		return errors.New("timeouts must be positive")
	}
	return c.Ingest.Validate()
}

// Gateway is a running `inlet serve`: HTTP ingest, producer and, without
// brokers, the development broker. Start it with StartGateway and stop it
// with Shutdown.
type Gateway struct {
	cfg     ServeConfig
	log     *slog.Logger
	broker  *devbroker.Broker
	prod    *kafka.Producer
	spool   *spool.Spool
	fwd     *spool.Forwarder
	router  *reply.Router
	replies reply.Transport
	rpc     *reply.Handler
	rpcProd *kafka.Producer // nil without request-reply services
	srv     *http.Server
	ln      net.Listener

	ready     atomic.Bool  // Kafka answered the last metadata request
	readyErr  atomic.Value // string: why not
	stopping  atomic.Bool
	stopReady context.CancelFunc
	wg        sync.WaitGroup
	served    chan error
}

// StartGateway starts every component; the gateway serves when it returns.
func StartGateway(cfg ServeConfig, log *slog.Logger) (g *Gateway, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	gw := &Gateway{cfg: cfg, log: log, served: make(chan error, 1)}
	g = gw
	defer func() {
		if err != nil {
			gw.closeBackends(context.Background())
		}
	}()
	brokers := cfg.Brokers
	if len(brokers) == 0 {
		bc := cfg.Broker
		if bc.DataDir == "" {
			bc.DataDir = cfg.DataDir
		}
		if g.broker, err = devbroker.Start(bc, log); err != nil {
			return nil, err
		}
		brokers = []string{g.broker.Addr()}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	kc := cfg.Kafka
	kc.Brokers = brokers
	if g.prod, err = kafka.NewProducer(kc, log, kafka.NewMetrics(producerMetrics(reg, "events"))); err != nil {
		return nil, err
	}
	ic := cfg.Ingest
	ic.AckStatus = http.StatusOK
	var sink ingest.Sink
	switch cfg.Ack {
	case AckKafka:
		sink = syncSink{g.prod}
	case AckNone:
		ic.AckStatus = http.StatusAccepted
		sink = enqueueSink{g.prod}
	case AckSpool:
		sc := cfg.Spool
		if sc.Dir == "" {
			sc.Dir = filepath.Join(cfg.DataDir, "spool")
		}
		if g.spool, err = spool.Open(sc, log, spool.NewMetrics(reg)); err != nil {
			return nil, err
		}
		g.fwd = spool.StartForwarder(g.spool, forwarding{g.prod}, cfg.Forwarder, log)
		sink = spoolSink{g.spool}
	}
	in, err := ingest.New(ic, sink, log, reg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	in.Register(mux)
	if err := gw.startRPC(cfg, brokers, reg, mux); err != nil {
		return nil, err
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", g.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}

	if g.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	g.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		// An answer may wait for the body, then for Kafka.
		WriteTimeout:   cfg.ReadTimeout + ic.WriteTimeout + 5*time.Second,
		IdleTimeout:    cfg.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// HTTP/1.1 and HTTP/2 without TLS (h2c): a caller with many
		// requests in flight needs few connections.
		Protocols: new(http.Protocols),
	}
	g.srv.Protocols.SetHTTP1(true)
	g.srv.Protocols.SetUnencryptedHTTP2(true)
	// net/http's HTTP/2 write scheduler (round robin) scans every open
	// stream of a connection for each frame it writes: with thousands of
	// calls waiting for replies on a connection, that took 46% of the CPU
	// (measured, 2,000 streams per connection). The random scheduler keeps
	// only the streams that have frames to send. (From Go 1.27, x/net
	// hands HTTP/2 to net/http and ignores this option.)
	if err := http2.ConfigureServer(g.srv, &http2.Server{
		MaxConcurrentStreams: uint32(cfg.HTTP2MaxStreams),
		IdleTimeout:          cfg.IdleTimeout,
		NewWriteScheduler:    func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() },
	}); err != nil {
		return nil, fmt.Errorf("configuring HTTP/2: %w", err)
	}
	readyCtx, stop := context.WithCancel(context.Background())
	g.stopReady = stop
	g.readyErr.Store("no metadata request has succeeded yet")
	g.wg.Add(2)
	go func() { defer g.wg.Done(); g.checkReady(readyCtx) }()
	go func() {
		defer g.wg.Done()
		if err := g.srv.Serve(g.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.served <- err
		}
		close(g.served)
	}()
	log.Info("serving", "addr", g.Addr(), "brokers", brokers, "ack", cfg.Ack, "topic", ic.Topic)
	return g, nil
}

// Addr is the address the HTTP server listens on.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Done is closed when the HTTP server stops; it carries the error that stopped it, if any.
func (g *Gateway) Done() <-chan error { return g.served }

// checkReady pings the brokers: quickly until the first success, then every
// ReadyInterval, so that /readyz follows the brokers' reachability.
func (g *Gateway) checkReady(ctx context.Context) {
	wait := 250 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := g.prod.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if g.ready.Swap(false) {
				g.log.Warn("not ready: kafka unreachable", "err", err)
			}
			g.readyErr.Store(err.Error())
		} else {
			if !g.ready.Swap(true) {
				g.log.Info("ready: kafka answered a metadata request")
			}
			wait = g.cfg.ReadyInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// readiness is the body of /readyz.
type readiness struct {
	Ready bool        `json:"ready"`
	Ack   string      `json:"ack"`
	Kafka string      `json:"kafka"` // "ok" or why not
	Error string      `json:"error,omitempty"`
	Spool *spoolState `json:"spool,omitempty"`
	RPC   *rpcState   `json:"rpc,omitempty"`
}

type rpcState struct {
	Replies  string `json:"replies"`
	Healthy  string `json:"healthy"` // "ok" or why not
	InFlight int    `json:"in_flight"`
	Peak     int    `json:"in_flight_peak"`
}

type spoolState struct {
	Bytes                    int64   `json:"bytes"`
	MaxBytes                 int64   `json:"max_bytes"`
	Segments                 int     `json:"segments"`
	Unforwarded              uint64  `json:"unforwarded_records"`
	OldestUnforwardedSeconds float64 `json:"oldest_unforwarded_seconds"`
	Forwarder                string  `json:"forwarder"`
	Failed                   string  `json:"failed,omitempty"`
}

// Ready reports whether the gateway takes events now, and why not. With
// ack=spool that needs a writable spool with room, not Kafka: the spool
// absorbs broker outages. Otherwise Kafka must have answered a metadata
// request.
func (g *Gateway) Ready() readiness {
	rd := readiness{Ack: g.cfg.Ack, Kafka: "ok"}
	if !g.ready.Load() {
		rd.Kafka = g.readyErr.Load().(string)
	}
	if g.replies != nil {
		rd.RPC = &rpcState{Replies: g.replies.Address().String(), Healthy: "ok", InFlight: g.router.InFlight(), Peak: g.router.Peak()}
		if err := g.replies.Healthy(); err != nil {
			rd.RPC.Healthy = err.Error()
		}
	}
	switch {
	case g.stopping.Load():
		rd.Error = "shutting down"
	case g.spool != nil:
		st := g.spool.Stats()
		rd.Spool = &spoolState{Bytes: st.Bytes, MaxBytes: st.MaxBytes, Segments: st.Segments, Unforwarded: st.Unforwarded,
			OldestUnforwardedSeconds: g.fwd.OldestAge().Seconds(), Forwarder: g.fwd.State(), Failed: st.Failed}
		switch {
		case st.Failed != "":
			rd.Error = "the spool cannot write: " + st.Failed
		case st.Bytes >= st.MaxBytes*95/100:
			rd.Error = "the spool is full"
		default:
			rd.Ready = true
		}
	case !g.ready.Load():
		rd.Error = "kafka: " + rd.Kafka
	default:
		rd.Ready = true
	}
	return rd
}

func (g *Gateway) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	rd := g.Ready()
	if !rd.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}

// Shutdown stops accepting requests, waits for those in flight (each waits
// for its acknowledgement), flushes what the producer holds, and stops the
// development broker. It returns an error if ctx ended first, in which case
// records buffered with ack=none may be lost (they are logged).
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.stopping.Store(true)
	err := g.srv.Shutdown(ctx)
	if err != nil {
		g.log.Error("requests still in flight at the shutdown deadline; closing their connections", "err", err)
		_ = g.srv.Close()
	}
	if g.fwd != nil {
		g.drainSpool(ctx)
	}
	if cerr := g.closeBackends(ctx); err == nil {
		err = cerr
	}
	g.wg.Wait()
	return err
}

// drainSpool lets the forwarder send what the spool holds, so that a
// container restarted without its volume loses nothing. It gives up at 90%
// of the time ctx leaves: the rest stays in the spool, durable, and is sent
// on the next start from the same data dir.
func (g *Gateway) drainSpool(ctx context.Context) {
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)*9/10))
		defer cancel()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n := g.spool.Stats().Unforwarded
		if n == 0 {
			g.log.Info("spool drained: every acknowledged event is in kafka")
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			g.log.Warn("shutting down with events still in the spool; they are sent on the next start with the same --data-dir (keep it on a persistent volume)",
				"records", n, "dir", g.spool.Dir(), "forwarder", g.fwd.State())
			return
		}
	}
}

// startRPC sets up POST /v1/rpc/{service}: the router, the reply
// transport (only when some service is enabled) and the handler.
func (g *Gateway) startRPC(cfg ServeConfig, brokers []string, reg *prometheus.Registry, mux *http.ServeMux) error {
	g.router = reply.NewRouter(cfg.RPC.MaxInFlight, reply.NewMetrics(reg))
	var t reply.Transport
	if len(cfg.RPC.Services) > 0 {
		id := cfg.InstanceID
		if id == "" {
			id = defaultInstanceID(cfg.Listen)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		switch cfg.Reply {
		case "kafka":
			topic := cfg.ReplyTopic
			if topic == "" {
				topic = "inlet.replies." + id
			}
			t, err = reply.StartKafka(ctx, brokers, topic, g.router, g.log)
		case "redis":
			channel := cfg.ReplyChannel
			if channel == "" {
				channel = "inlet:replies:" + id
			}
			t, err = reply.StartRedis(ctx, cfg.RedisAddr, channel, g.router, g.log)
		}
		if err != nil {
			return err
		}
		g.replies = t
		if g.rpcProd, err = kafka.NewProducer(cfg.rpcKafka(brokers), g.log, kafka.NewMetrics(producerMetrics(reg, "rpc"))); err != nil {
			return err
		}
		g.log.Info("request-reply enabled", "services", cfg.RPC.Services, "replies", t.Address().String())
	}
	var p reply.Producer // none without services: every call is answered 404 first
	if g.rpcProd != nil {
		p = reply.ProducerFunc(g.rpcProd.ProduceFunc)
	}
	h, err := reply.NewHandler(cfg.RPC, g.router, t, p, g.log)
	if err != nil {
		return err
	}
	h.Register(mux)
	g.rpc = h
	return nil
}

// defaultInstanceID names this instance for its reply topic or channel:
// the host name and the HTTP port, so that two instances on one host differ.
func defaultInstanceID(listen string) string {
	host, _ := os.Hostname()
	_, port, _ := net.SplitHostPort(listen)
	if port == "" || port == "0" {
		port = event.NewID()[24:] // a free port picked at start: be unique
	}
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, host+"-"+port)
	return id
}

func (g *Gateway) closeBackends(ctx context.Context) error {
	var err error
	if g.rpc != nil {
		g.rpc.Close() // the HTTP server is down: no call is served any more
	}
	if g.rpcProd != nil {
		// Requests not yet in Kafka get a second: their callers are gone.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = g.rpcProd.Close(pctx)
		cancel()
	}
	if g.replies != nil {
		g.replies.Close()
	}
	if g.stopReady != nil {
		g.stopReady()
	}
	if g.fwd != nil {
		g.fwd.Stop(ctx)
	}
	if g.spool != nil {
		if serr := g.spool.Close(); serr != nil {
			err = fmt.Errorf("closing the spool: %w", serr)
		}
	}
	if g.prod != nil {
		if perr := g.prod.Close(ctx); perr != nil && err == nil {
			err = fmt.Errorf("flushing the producer: %w", perr)
		}
	}
	if g.broker != nil {
		g.broker.Close()
	}
	return err
}

// syncSink answers once Kafka acknowledged every record (ack=kafka).
type syncSink struct{ p *kafka.Producer }

func (s syncSink) Write(ctx context.Context, recs []event.Record) error {
	return sinkErr(s.p.ProduceSync(ctx, recs))
}

// enqueueSink answers once the records are in the producer's buffer (ack=none).
type enqueueSink struct{ p *kafka.Producer }

func (s enqueueSink) Write(_ context.Context, recs []event.Record) error {
	return sinkErr(s.p.TryProduce(recs))
}

// spoolSink answers once the records are in the spool, fsynced (ack=spool).
type spoolSink struct{ s *spool.Spool }

func (s spoolSink) Write(ctx context.Context, recs []event.Record) error {
	return sinkErr(s.s.Append(ctx, recs))
}

func sinkErr(err error) error {
	if errors.Is(err, kafka.ErrFull) || errors.Is(err, spool.ErrFull) {
		return fmt.Errorf("%w: %w", ingest.ErrSinkFull, err)
	}
	return err
}

var (
	_ ingest.Sink    = syncSink{}
	_ ingest.Sink    = enqueueSink{}
	_ ingest.Sink    = spoolSink{}
	_ spool.Producer = forwarding{}
)

// forwarding adapts the producer to what the spool's forwarder needs.
type forwarding struct{ p *kafka.Producer }

func (f forwarding) Produce(recs []event.Record) (spool.Delivery, error) {
	d, err := f.p.Produce(recs)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return d, nil
}

// registerServe binds cfg's fields to flags.
func registerServe(fs *flag.FlagSet, cfg *ServeConfig, brokers *listFlag, origins *listFlag, proxies *string,
	bodyBytes, decompBytes, eventBytes, bufBytes, inflight, spoolSeg, spoolMax *byteSize, rpcServices *listFlag) {
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "HTTP listen address (host:port)")
	fs.Var(brokers, "brokers", "Kafka seed brokers, comma-separated host:port; empty starts the embedded development broker")
	fs.StringVar(&cfg.Ack, "ack", cfg.Ack, "when to answer: spool (200 once fsynced to the local spool), kafka (200 once Kafka acknowledged every event) or none (202 once enqueued in memory)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for local state: the spool (<data-dir>/spool) and the development broker's data")
	fs.StringVar(&cfg.Spool.Sync, "spool-sync", cfg.Spool.Sync, "always (fsync before answering; survives machine crashes) or interval (fsync every --spool-sync-interval; survives process crashes)")
	fs.DurationVar(&cfg.Spool.SyncInterval, "spool-sync-interval", cfg.Spool.SyncInterval, "fsync period with --spool-sync interval (at most 1s)")
	fs.Var(spoolSeg, "spool-segment-bytes", "size at which a spool segment file is closed and a new one started")
	fs.Var(spoolMax, "spool-max-bytes", "disk the spool may use; past it inlet answers 503 with Retry-After")
	fs.StringVar(&cfg.Broker.Listen, "broker-listen", cfg.Broker.Listen, "listen address of the development broker (without --brokers)")
	fs.IntVar(&cfg.Broker.Partitions, "broker-partitions", cfg.Broker.Partitions, "partitions of topics the development broker creates")

	fs.StringVar(&cfg.Ingest.Topic, "topic", cfg.Ingest.Topic, "topic events are written to")
	fs.StringVar(&cfg.Ingest.DeadLetterTopic, "dead-letter-topic", "", "topic invalid events are written to (default <topic>.invalid)")
	fs.Var(bodyBytes, "max-body-bytes", "largest request body as sent (413 past it)")
	fs.Var(decompBytes, "max-decompressed-bytes", "largest request body after gzip/zstd decompression (413 past it)")
	fs.IntVar(&cfg.Ingest.MaxEvents, "max-events", cfg.Ingest.MaxEvents, "most events in one request (413 past it)")
	fs.Var(inflight, "max-inflight-bytes", "request bodies held in memory at once, across all requests (503 past it)")
	fs.Var(eventBytes, "max-event-bytes", "largest event (rejected and dead-lettered past it)")
	fs.DurationVar(&cfg.Ingest.WriteTimeout, "produce-timeout", cfg.Ingest.WriteTimeout, "how long a request waits for Kafka's acknowledgement before 503 (ack=kafka)")
	fs.DurationVar(&cfg.Ingest.RetryAfter, "retry-after", cfg.Ingest.RetryAfter, "Retry-After sent with 503 answers")
	fs.Var(origins, "cors-origins", "CORS origins allowed, comma-separated scheme://host[:port], or *")
	fs.StringVar(proxies, "trusted-proxies", "", "IPs or CIDR prefixes whose X-Forwarded-For is believed, comma-separated")

	fs.StringVar(&cfg.Kafka.Compression, "compression", cfg.Kafka.Compression, "record batch compression: none, gzip, snappy, lz4, zstd")
	fs.DurationVar(&cfg.Kafka.Linger, "linger", cfg.Kafka.Linger, "how long the producer waits to fill a batch")
	fs.Var(bufBytes, "max-buffered-bytes", "memory for records not yet acknowledged by Kafka (503 past it)")
	fs.IntVar(&cfg.Kafka.MaxBufferedRecords, "max-buffered-records", cfg.Kafka.MaxBufferedRecords, "records not yet acknowledged by Kafka (503 past it)")
	fs.DurationVar(&cfg.Kafka.DeliveryTimeout, "delivery-timeout", cfg.Kafka.DeliveryTimeout, "how long a record may wait for Kafka before it fails")
	fs.StringVar(&cfg.Kafka.ClientID, "client-id", cfg.Kafka.ClientID, "Kafka client id")

	fs.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", cfg.ReadHeaderTimeout, "time a client has to send the request headers")
	fs.DurationVar(&cfg.ReadTimeout, "read-timeout", cfg.ReadTimeout, "time a client has to send the whole request")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "how long an idle keep-alive connection stays open")
	fs.Var(rpcServices, "rpc-services", "services POST /v1/rpc/{service} may call, comma-separated, or *; empty disables request-reply")
	fs.StringVar(&cfg.RPC.TopicPrefix, "rpc-topic-prefix", cfg.RPC.TopicPrefix, "a service's request topic is this prefix and its name")
	fs.DurationVar(&cfg.RPC.Timeout, "rpc-timeout", cfg.RPC.Timeout, "how long a call waits for its reply when it sends no Inlet-Timeout (504 past it)")
	fs.DurationVar(&cfg.RPC.MaxTimeout, "rpc-max-timeout", cfg.RPC.MaxTimeout, "the most a caller's Inlet-Timeout may ask for")
	fs.IntVar(&cfg.RPC.MaxInFlight, "rpc-max-in-flight", cfg.RPC.MaxInFlight, "calls waiting for replies at once (503 past it)")
	fs.DurationVar(&cfg.RPCLinger, "rpc-linger", cfg.RPCLinger, "how long request-reply requests wait to share a produce request")
	fs.StringVar(&cfg.RPCCompression, "rpc-compression", cfg.RPCCompression, "record batch compression of request-reply requests: none, gzip, snappy, lz4, zstd")
	fs.StringVar(&cfg.Reply, "reply", cfg.Reply, "how replies come back: kafka (a reply topic per instance) or redis (a pub/sub channel per instance)")
	fs.StringVar(&cfg.RedisAddr, "redis", "", "Redis host:port for --reply redis")
	fs.StringVar(&cfg.ReplyTopic, "reply-topic", "", "this instance's reply topic (default inlet.replies.<instance-id>)")
	fs.StringVar(&cfg.ReplyChannel, "reply-channel", "", "this instance's reply channel (default inlet:replies:<instance-id>)")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "this instance's name in its reply topic or channel (default <hostname>-<port>); keep it stable across restarts")
	fs.IntVar(&cfg.HTTP2MaxStreams, "http2-max-streams", cfg.HTTP2MaxStreams, "concurrent requests on one HTTP/2 (h2c) connection")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go profiles under /debug/pprof/ (for diagnosis; do not expose publicly)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "on SIGTERM/SIGINT, time to finish requests and flush before exiting")
}

// ParseServe parses `inlet serve` arguments and environment into a config.
func ParseServe(args []string, env Env) (ServeConfig, *logConfig, error) {
	cfg := DefaultServeConfig()
	fs := newFlags("serve", env)
	brokers := listFlag{}
	origins := listFlag(cfg.Ingest.AllowedOrigins)
	var proxies string
	bodyBytes := byteSize(cfg.Ingest.MaxBodyBytes)
	decompBytes := byteSize(cfg.Ingest.MaxDecompressedBytes)
	eventBytes := byteSize(cfg.Ingest.MaxEventBytes)
	bufBytes := byteSize(cfg.Kafka.MaxBufferedBytes)
	inflight := byteSize(cfg.Ingest.MaxInflightBytes)
	spoolSeg := byteSize(cfg.Spool.SegmentBytes)
	spoolMax := byteSize(cfg.Spool.MaxBytes)
	rpcServices := listFlag{}
	registerServe(fs, &cfg, &brokers, &origins, &proxies, &bodyBytes, &decompBytes, &eventBytes, &bufBytes, &inflight, &spoolSeg, &spoolMax, &rpcServices)
	lc := &logConfig{}
	lc.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, nil, err
	}
	cfg.Brokers = brokers
	cfg.Ingest.AllowedOrigins = origins
	cfg.Ingest.MaxBodyBytes = int64(bodyBytes)
	cfg.Ingest.MaxDecompressedBytes = int64(decompBytes)
	cfg.Ingest.MaxEventBytes = int(eventBytes)
	cfg.Kafka.MaxBufferedBytes = int(bufBytes)
	cfg.Ingest.MaxInflightBytes = int64(inflight)
	cfg.Spool.SegmentBytes = int64(spoolSeg)
	cfg.Spool.MaxBytes = int64(spoolMax)
	cfg.RPC.Services = rpcServices
	var err error
	if cfg.Ingest.TrustedProxies, err = ingest.ParseProxies(proxies); err != nil {
		return cfg, nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return cfg, lc, nil
}

// serveGOGC is the garbage collector's target of inlet serve, unless GOGC
// is set in the environment (as Prometheus sets 75). Most of what the
// gateway holds under load is live, not garbage: calls waiting for their
// replies, records waiting for Kafka. With Go's default of 100 the heap
// grows to twice that (plus the goroutine stacks) before a collection;
// with 50, to one and a half times. Measured with 16,000 calls in flight:
// 21.9 → 17.6 KiB per call, for the same CPU (BENCHMARKS.md).
const serveGOGC = 50

func runServe(ctx context.Context, args []string, env Env) error {
	cfg, lc, err := ParseServe(args, env)
	if err != nil {
		return err
	}
	log, err := lc.logger(env.Stderr)
	if err != nil {
		return err
	}
	if env.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	g, err := StartGateway(cfg, log)
	if err != nil {
		return err
	}
	if g.broker != nil {
		printBanner(env.Stdout, g.Addr(), g.broker.Addr(), cfg)
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	case err := <-g.Done():
		if err != nil {
			log.Error("http server failed", "err", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := g.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("stopped")
	return nil
}

func printBanner(w io.Writer, httpAddr, brokerAddr string, cfg ServeConfig) {
	fmt.Fprintf(w, `
inlet is listening on http://%[1]s, writing to topic %[3]q (ack=%[4]s).

  Development broker: %[2]s — a single-node Kafka-compatible broker inside
  this process, data under %[5]s. For development only: use --brokers in production.

  Send events:
    curl -H 'Content-Type: application/json' -d '[{"event":"page_view","uid":"u1","props":{"path":"/"}}]' http://%[1]s/v1/batch
  Read them:
    go run ./cmd/inlet tail --brokers %[2]s --topic %[3]s --from beginning
    kcat -b %[2]s -C -t %[3]s -f '%%k %%s\n'

`, httpAddr, brokerAddr, cfg.Ingest.Topic, cfg.Ack, cfg.DataDir)
}

// producerMetrics registers a producer's metrics with the label
// producer="events" (ingest) or "rpc" (request-reply requests).
func producerMetrics(reg prometheus.Registerer, name string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"producer": name}, reg)
}
