package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/catalog"
	"github.com/inlet-dev/inlet/internal/devbroker"
	"github.com/inlet-dev/inlet/internal/enrich"
	"github.com/inlet-dev/inlet/internal/ingest"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/membudget"
	"github.com/inlet-dev/inlet/internal/reply"
	"github.com/inlet-dev/inlet/internal/routes"
	"github.com/inlet-dev/inlet/internal/spool"
)

// Gateway is a running `inlet serve`. Start it with Start and stop it with
// Shutdown; its methods are safe for concurrent use.
type Gateway struct {
	cfg Config
	log *slog.Logger
	reg *prometheus.Registry
	lc  lifecycle

	broker *devbroker.Broker // nil with Brokers
	ingest *ingest.Server
	prod   *kafka.Producer // events (and, with ack=spool, the forwarder)
	// batchMax is prod's batch limit: the topics' max.message.bytes when
	// smaller than the configured one.
	batchMax int32
	spool    *spool.Spool     // ack=spool only
	fwd      *spool.Forwarder // ack=spool only
	kafka    *kafkaCheck
	router   *reply.Router
	replies  reply.Transport // nil without request-reply services
	srv      *http.Server
	servers  []*http.Server // srv, and the --ops-listen one
	ln       net.Listener   // --listen
	opsLn    net.Listener   // --ops-listen; nil without it
	tlsLn    net.Listener   // the HTTPS one (ln itself without --tls-listen); nil without --tls-cert
	certs    *certReloader  // nil without --tls-cert
	// kafkaCert is why the Kafka client certificate is not valid now
	// (expired, or not yet valid): serve starts anyway, unready.
	kafkaCert string

	// The catalog (catalog.go): nil when neither --catalog nor an RPC
	// listener is on; auth nil without --clients.
	auth         *auth.Authenticator
	catalog      *catalog.Catalog
	catalogCheck *catalogCheck
	routeTable   *routes.Watcher  // nil without --routes
	enrich       *enrich.Enricher // nil without enrichment
	grpcLn       net.Listener
	thriftLn     net.Listener

	// catalogOnly is `inlet catalog serve` (StartCatalog): the catalog's
	// RPC servers alone.
	catalogOnly bool

	stopping     atomic.Bool
	shutdownOnce atomic.Bool
	served       chan error
}

// Shares of the shutdown budget (lifecycle.stop). The HTTP drain may wait
// for requests that wait for Kafka (--produce-timeout); the spool drain
// sends what the spool holds; the flush sends what the producer holds.
// The catalog's RPC servers let their calls (each bounded by
// --catalog-rpc-timeout) finish.
const (
	weightHTTP       = 4
	weightCatalogRPC = 2
	weightRPC        = 1
	weightSpoolRead  = 4 // drain, then stop the forwarder
	weightProducer   = 2
)

// Start starts every part of the gateway, in the order below; it serves
// when Start returns. Shutdown stops them in the reverse order:
//
//  1. the development broker (without Brokers)
//  2. the events producer
//  3. the spool and its forwarder (ack=spool)
//  4. the client credentials (--clients) and the catalog (--catalog, or an
//     RPC listener) with its store check
//  5. request-reply: the reply transport, the request producer, the handler
//  6. the catalog's gRPC and Thrift servers (--grpc-listen, --thrift-listen)
//  7. the Kafka readiness check
//  8. the HTTP server
//
// If a step fails, Start stops what it started, within ShutdownTimeout,
// and returns the error.
func Start(cfg Config, log *slog.Logger) (g *Gateway, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.HTTPFront {
	case FrontFast:
		log.Warn("--http-front fasthttp: the fasthttp front was removed; net/http serves every listener (the flag has no effect and goes in the next release)")
	case FrontNetHTTP:
		log.Info("--http-front nethttp: net/http serves every listener; the flag has no effect and goes in the next release")
	}
	g = &Gateway{cfg: cfg, log: log, lc: lifecycle{log: log}, served: make(chan error, 1)}
	defer g.undoFailedStart(&err)
	g.reg = prometheus.NewRegistry()
	g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	brokers := cfg.Brokers
	if len(brokers) == 0 {
		if brokers, err = g.startBroker(); err != nil {
			return nil, err
		}
	}
	if err := g.startProducer(brokers); err != nil {
		return nil, err
	}
	sink, err := g.startSink()
	if err != nil {
		return nil, err
	}
	ic := cfg.Ingest
	ic.AckStatus = ackStatus(cfg.Ack)
	ic.MaxInflightBytes = cfg.ingestBodyBytes()
	mux := http.NewServeMux()
	sink = g.startUI(mux, sink, cfg.UI) // the live page taps what was acknowledged
	opts, err := g.startCatalog()
	if err != nil {
		return nil, err
	}
	if opts, err = g.startRoutes(opts); err != nil {
		return nil, err
	}
	if opts, err = g.startEnrich(opts); err != nil {
		return nil, err
	}
	ic.DefaultGroup = cfg.Catalog.DefaultGroup
	in, err := ingest.New(ic, sink, log, g.reg, opts...)
	if err != nil {
		return nil, err
	}
	in.Register(mux)
	g.ingest = in
	if n := cfg.rpcBodyBytes(); n > 0 { // request-reply's share of --max-inflight-bytes
		g.cfg.RPC.Budget = membudget.New(n)
	}
	if err := g.startRPC(brokers, mux); err != nil {
		return nil, err
	}
	if err := g.startCatalogRPC(); err != nil {
		return nil, err
	}
	g.startReadiness()
	g.routes(mux)
	if err := g.startHTTP(mux); err != nil {
		return nil, err
	}
	g.reg.MustRegister(g.srv.Handler.(*limited)) // requests in flight and refused, by class
	log.Info("serving", "addr", g.Addr(), "https", g.TLSAddr(), "ops", g.OpsAddr(), "brokers", brokers, "kafka_security", cfg.Kafka.Security.String(), "ack", cfg.Ack, "topic", ic.Topic)
	return g, nil
}

// undoFailedStart stops, within ShutdownTimeout, the parts a start that
// failed (*err not nil) had started.
func (g *Gateway) undoFailedStart(err *error) {
	if *err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	g.stopping.Store(true)
	if serr := g.lc.stop(ctx); serr != nil {
		g.log.Warn("stopping after a failed start", "err", serr)
	}
}

func (g *Gateway) startBroker() ([]string, error) {
	bc := g.cfg.Broker
	if bc.DataDir == "" {
		bc.DataDir = g.cfg.DataDir
	}
	b, err := devbroker.Start(bc, g.log)
	if err != nil {
		return nil, err
	}
	g.broker = b
	g.lc.started("development broker", 0, func(context.Context) error { b.Close(); return nil })
	return []string{b.Addr()}, nil
}

func (g *Gateway) startProducer(brokers []string) error {
	kc := g.cfg.Kafka
	kc.Brokers = brokers
	if len(g.cfg.Brokers) > 0 {
		// A batch Kafka refuses fails every record in it: keep batches
		// within the topics' max.message.bytes, so that one record too
		// large for its topic fails alone. Kafka down: keep the setting.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := kafka.BatchLimit(ctx, brokers, kc.Security, g.cfg.Ingest.Topic, g.cfg.Ingest.DeadLetterTopicName())
		cancel()
		switch {
		case err != nil:
			g.log.Info("could not learn the topics' max.message.bytes; keeping the producer's batch limit", "err", err)
		case n < kc.BatchMaxBytes:
			kc.BatchMaxBytes = n
		}
	}
	g.batchMax = kc.BatchMaxBytes
	if err := kc.Security.Validate(); err != nil && g.cfg.kafkaCertOnlyExpired() {
		// Like a certificate that expires while inlet runs: start, take
		// events (into the spool), and say why Kafka refuses them.
		g.kafkaCert = err.Error()
		kc.AllowExpiredCert = true
		g.log.Error("starting with a Kafka client certificate that is not valid now: the brokers will refuse it (/readyz says so); renew it and restart", "err", err)
	}
	g.cfg.Kafka.AllowExpiredCert = kc.AllowExpiredCert // the request producer and reply consumer too
	p, err := kafka.NewProducer(kc, g.log, kafka.NewMetrics(producerMetrics(g.reg, "events")))
	if err != nil {
		return err
	}
	g.prod = p
	g.lc.started("events producer", weightProducer, g.closeProducer)
	return nil
}

// closeProducer flushes what the producer holds within ctx. With ack=spool
// what it holds is also in the spool, so an unfinished flush loses nothing
// (the forwarder sends it again on the next start); with ack=kafka and
// ack=none it is an error: the records may be lost.
func (g *Gateway) closeProducer(ctx context.Context) error {
	err := g.prod.Close(ctx)
	if err != nil && g.cfg.Ack == AckSpool {
		g.log.Info("the producer did not flush in time; what it held is still in the spool", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("flushing the producer: %w", err)
	}
	return nil
}

// startSink opens what the ack mode writes to.
func (g *Gateway) startSink() (ingest.Sink, error) {
	switch g.cfg.Ack {
	case AckKafka:
		return kafkaSink{g.prod}, nil
	case AckNone:
		return enqueueSink{g.prod}, nil
	}
	sc := g.cfg.Spool
	if sc.Dir == "" {
		sc.Dir = filepath.Join(g.cfg.DataDir, "spool")
	}
	s, err := spool.Open(sc, g.log, spool.NewMetrics(g.reg))
	if err != nil {
		return nil, err
	}
	g.spool = s
	g.lc.started("spool", 0, func(context.Context) error {
		if err := s.Close(); err != nil {
			return fmt.Errorf("closing the spool: %w", err)
		}
		return nil
	})
	g.fwd = spool.StartForwarder(s, forwarding{g.prod}, g.forwarderConfig(), g.log)
	g.lc.started("spool forwarder", weightSpoolRead, func(ctx context.Context) error {
		g.drainSpool(ctx)
		g.fwd.Stop(ctx)
		return nil
	})
	return spoolSink{s}, nil
}

// drainSpool lets the forwarder send what the spool holds, so that a
// container restarted without its volume loses nothing, until ctx has a
// tenth of its time left (for the forwarder to stop). What is left stays in
// the spool, durable, and is sent on the next start from the same data
// dir: that is not a failure, and it is logged with its count.
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
			g.log.Warn("stopping with events still in the spool; they are sent on the next start with the same --data-dir (keep it on a persistent volume)",
				"records", n, "dir", g.spool.Dir(), "forwarder", g.fwd.State())
			return
		}
	}
}

// checkLimits warns once, when Kafka first answers, if events inlet accepts
// (--max-event-bytes) could be larger than a topic takes: Kafka would
// refuse them (413 with ack=kafka; dead-lettered with ack=spool).
func (g *Gateway) checkLimits(ctx context.Context) {
	for _, topic := range []string{g.cfg.Ingest.Topic, g.cfg.Ingest.DeadLetterTopicName()} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w, err := g.prod.CheckLimits(cctx, topic, g.cfg.Ingest.MaxEventBytes)
		cancel()
		switch {
		case err != nil:
			g.log.Debug("checking the topic's max.message.bytes", "topic", topic, "err", err)
		case w != "":
			g.log.Warn(w, "topic", topic)
		}
	}
}

func (g *Gateway) startReadiness() {
	g.kafka = newKafkaCheck(g.prod, g.cfg.Ingest.Topic, g.cfg.ReadyInterval, g.cfg.Kafka.Security, g.kafkaCert)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.kafka.run(ctx, g) }()
	g.lc.started("readiness check", 0, func(context.Context) error { cancel(); <-done; return nil })
	g.reg.MustRegister(g.readyMetric())
}

// Addr is the address the HTTP server listens on (--listen): plain HTTP,
// or HTTPS with --tls-cert and no --tls-listen.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// OpsAddr is the address of the operators' listener (--ops-listen), or ""
// without one.
func (g *Gateway) OpsAddr() string { return addrOf(g.opsLn) }

// TLSAddr is the address HTTPS is served on: --tls-listen's, else Addr
// with --tls-cert; "" without HTTPS.
func (g *Gateway) TLSAddr() string { return addrOf(g.tlsLn) }

// Reloadable reports whether the gateway reads files while it runs, which
// Reload looks at now: the HTTPS certificate and key (--tls-cert), the routes
// file (--routes), the clients file and session key (--clients), the
// geo-IP database (--geoip-db).
func (g *Gateway) Reloadable() bool {
	return g.certs != nil || g.routeTable != nil || g.auth != nil || g.enrich.GeoDB() != nil
}

// Reload looks at every file the gateway reads while it runs now, rather
// than at its next poll (on SIGHUP), and loads those that changed: new
// HTTPS handshakes get a new certificate, open connections keep theirs; a
// changed routes file, clients file or geo-IP database replaces the one in
// use. An unchanged file is not read again (a geo-IP database is tens of
// MB). A file that does not load leaves the one in use serving; its error
// is logged and returned with the others'.
func (g *Gateway) Reload() error {
	var errs []error
	if g.certs != nil {
		errs = append(errs, g.certs.reload("SIGHUP", false))
	}
	if g.routeTable != nil {
		errs = append(errs, g.routeTable.Check())
	}
	if g.auth != nil {
		errs = append(errs, g.auth.Check())
	}
	if db := g.enrich.GeoDB(); db != nil {
		errs = append(errs, db.Check())
	}
	return errors.Join(errs...)
}

// BrokerAddr is the development broker's address; "" with Brokers.
func (g *Gateway) BrokerAddr() string {
	if g.broker == nil {
		return ""
	}
	return g.broker.Addr()
}

// Done is closed when the HTTP server stops; it carries the error that
// stopped it, if any. Of StartCatalog's, it carries the error of the first
// server that failed.
func (g *Gateway) Done() <-chan error { return g.served }

// Drain is the first step of a graceful stop behind a load balancer, for
// ShutdownDelay (--shutdown-delay): /readyz answers 503 ("shutting down")
// at once, and the HTTP servers stop keeping connections alive (HTTP/1.1
// answers carry "Connection: close", idle connections close, an HTTP/2
// connection gets a GOAWAY once it is idle), so that load balancers take
// the instance out and clients and proxies move their connections to the
// other instances; every request is still served as before. It blocks
// until ShutdownDelay has passed or ctx is done (a second signal), then
// returns; Shutdown stops the gateway. With a ShutdownDelay of 0 it
// returns at once and changes nothing. Safe to call more than once.
func (g *Gateway) Drain(ctx context.Context) {
	delay := g.cfg.ShutdownDelay
	if delay <= 0 {
		return
	}
	g.stopping.Store(true)
	for _, s := range g.servers {
		s.SetKeepAlivesEnabled(false)
	}
	g.log.Info("draining: /readyz answers 503 and connections are not kept alive, requests are still served", "delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		g.log.Info("draining cut short")
	}
}

// Shutdown stops the gateway within ctx, in the reverse order of Start:
// /readyz turns 503 at once; the HTTP server stops taking requests and
// waits for those in flight (each waits for its acknowledgement), closing
// what is left at its share of the budget; the catalog's RPC servers let
// their calls finish within theirs; request-reply stops; the catalog and
// the credentials close; the spool
// drains into Kafka and the forwarder stops; the producer flushes; the
// development broker stops.
//
// It returns an error only if an acknowledged event may be lost: with
// ack=kafka or ack=none, records the producer could not flush in time.
// With ack=spool, records still in the spool are not an error (they are
// logged with their count, and sent on the next start). Calls after the
// first return nil at once.
func (g *Gateway) Shutdown(ctx context.Context) error {
	if g.shutdownOnce.Swap(true) {
		return nil
	}
	g.stopping.Store(true)
	return g.lc.stop(ctx)
}

// producerMetrics registers a producer's metrics with the label
// producer="events" (ingest) or "rpc" (request-reply requests).
func producerMetrics(reg prometheus.Registerer, name string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"producer": name}, reg)
}

var errServerClosed = http.ErrServerClosed

func serveErr(err error) error {
	if errors.Is(err, errServerClosed) {
		return nil
	}
	return err
}
