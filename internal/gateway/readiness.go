package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/routes"
	"github.com/inlet-dev/inlet/internal/spool"
)

// Readiness is the body of /readyz: whether the gateway takes events now,
// and the state of each part that decides it.
type Readiness struct {
	Ready bool        `json:"ready"`
	Ack   string      `json:"ack"`
	Kafka string      `json:"kafka"` // "ok" or why not
	Error string      `json:"error,omitempty"`
	Spool *SpoolState `json:"spool,omitempty"`
	RPC   *RPCState   `json:"rpc,omitempty"`
	// Catalog is the catalog's store, for information: it never makes the
	// gateway unready (ingest lets events through without a code).
	Catalog *CatalogState `json:"catalog,omitempty"`
	// Routes is the routes file serving (--routes) and what each route
	// and rule did, for information.
	Routes *routes.State `json:"routes,omitempty"`
	// ProducerTopics is each topic's part of the producer's buffer, by
	// topic, for information: a topic Kafka does not take never makes the
	// gateway unready, as it still takes the other topics' events.
	ProducerTopics map[string]ProducerTopic `json:"producer_topics,omitempty"`
}

// ProducerTopic is one topic in the producer (producerTopics).
type ProducerTopic struct {
	// State is "ok"; "full" while the topic's records take its share of
	// the buffer and its requests are refused (503); "failing" while its
	// records fail in a row.
	State           string `json:"state"`
	Error           string `json:"error,omitempty"`
	BufferedRecords int64  `json:"buffered_records"`
	BufferedBytes   int64  `json:"buffered_bytes"`
	ShareRecords    int64  `json:"share_records"`
	ShareBytes      int64  `json:"share_bytes"`
	RefusedRecords  int64  `json:"refused_records"`
}

// RPCState is the request-reply part of /readyz.
type RPCState struct {
	Replies  string `json:"replies"`
	Healthy  string `json:"healthy"` // "ok" or why not
	InFlight int    `json:"in_flight"`
	Peak     int    `json:"in_flight_peak"`
}

// SpoolState is the spool part of /readyz (ack=spool).
type SpoolState struct {
	Bytes                    int64   `json:"bytes"`
	MaxBytes                 int64   `json:"max_bytes"`
	Segments                 int     `json:"segments"`
	Unforwarded              uint64  `json:"unforwarded_records"`
	OldestUnforwardedSeconds float64 `json:"oldest_unforwarded_seconds"`
	Forwarder                string  `json:"forwarder"` // idle, forwarding, stalled, retrying, stuck, stopped
	Failed                   string  `json:"failed,omitempty"`
	// DiskFull is why appends fail for lack of disk space, while they do.
	DiskFull string `json:"disk_full,omitempty"`
	// Records given up since the start: damaged or missing on disk
	// (quarantined, see <segment>.corrupt), or refused for good by Kafka
	// and the dead-letter topic (parked under <spool dir>/parked/).
	QuarantinedRecords uint64 `json:"quarantined_records,omitempty"`
	ParkedRecords      uint64 `json:"parked_records,omitempty"`
	// Topics is each topic's delivery: a topic Kafka does not take is
	// retrying or stalled while the others go on; Forwarder above is the
	// worst of them. One stuck topic does not make the instance unready
	// (it still takes every topic's events) unless the spool fills.
	Topics []spool.TopicState `json:"topics,omitempty"`
}

// kafkaCheck follows whether Kafka answers: a real metadata request,
// quickly until the first success, then every interval.
type kafkaCheck struct {
	prod     *kafka.Producer
	topic    string // the events topic: ready once it has leaders
	interval time.Duration
	sec      kafka.Security // to describe TLS and SASL failures
	cert     string         // why the client certificate is not valid now; "" when it is
	ok       atomic.Bool
	why      atomic.Pointer[string]
	// refused is set while the brokers refuse the gateway's TLS or SASL
	// settings (refusedBy): a misconfiguration, not an outage.
	refused atomic.Bool
	// topicSeen: the events topic had a leader for every partition once
	// (kafka.Producer.TopicReady); until then the check asks for it too.
	// Later trouble with the topic shows in the produce results
	// (produceFailing).
	topicSeen bool
}

func newKafkaCheck(p *kafka.Producer, topic string, interval time.Duration, sec kafka.Security, cert string) *kafkaCheck {
	c := &kafkaCheck{prod: p, topic: topic, interval: interval, sec: sec, cert: cert}
	why := "no metadata request has succeeded yet"
	c.why.Store(&why)
	return c
}

// describe is why err, a failed ping, says Kafka is not reachable, in one
// line naming the cause (kafka.Security.DescribeConnError), without the
// leading "kafka: " (Ready adds it).
func (c *kafkaCheck) describe(err error) string {
	why := strings.TrimPrefix(c.sec.DescribeConnError(err), "kafka: ")
	if c.cert != "" {
		why = c.cert + "; " + why
	}
	return why
}

// refusedBy reports whether err says the brokers refuse this client's
// TLS or SASL settings, or that they are not the brokers it expects: wrong
// credentials or mechanism, a broker certificate not signed by the CA
// given or not for the name dialed, a client certificate refused (a TLS
// alert from the broker), TLS spoken to a plaintext port. Those do not
// heal on their own, unlike a broker that is down or restarting.
func refusedBy(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		recErr    tls.RecordHeaderError
		alert     tls.AlertError
		opErr     *net.OpError
	)
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState) || errors.As(err, &unknownCA) || errors.As(err, &hostErr) ||
		errors.As(err, &invalid) || errors.As(err, &recErr) || errors.As(err, &alert) ||
		(errors.As(err, &opErr) && opErr.Op == "remote error")
}

// run checks until ctx is done.
func (c *kafkaCheck) run(ctx context.Context, g *Gateway) {
	wait := 250 * time.Millisecond
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.prod.Ping(pctx)
		if err == nil && !c.topicSeen {
			// Ready only once the topic can take records: a gateway that
			// answers before its topic exists buffers what it cannot send
			// yet (with ack=none, memory; with ack=kafka, requests waiting).
			if err = c.prod.TopicReady(pctx, c.topic); err == nil {
				c.topicSeen = true
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			why := c.describe(err)
			c.why.Store(&why)
			refused := refusedBy(err) || c.cert != ""
			wasRefused := c.refused.Swap(refused)
			switch {
			case refused && !wasRefused:
				g.log.Error("not ready: kafka refuses this gateway's TLS or SASL settings; fix them and restart", "err", why)
			case c.ok.Load():
				g.log.Warn("not ready: kafka unreachable", "err", why)
			}
			c.ok.Store(false)
		} else {
			c.refused.Store(false)
			if !c.ok.Swap(true) {
				g.log.Info("ready: kafka answered a metadata request, and the events topic has leaders", "topic", c.topic)
				if first {
					first = false
					g.checkLimits(ctx)
				}
			}
			wait = c.interval
		}
		t.Reset(wait)
	}
}

// state is "ok", or why Kafka is not reachable or does not take records
// (it answers metadata requests, but the last records produced failed: a
// recreated topic, a leader that takes no writes).
func (c *kafkaCheck) state() string {
	if !c.ok.Load() {
		return *c.why.Load()
	}
	if why := produceFailing(c.prod, time.Now()); why != "" {
		return "produces failing: " + why
	}
	return "ok"
}

// spoolReadyRoom is the free room below which a spool counts as full for
// readiness: one more request body of the largest size (so a load balancer
// moves new clients elsewhere before requests are refused), or a twentieth
// of the spool when the spool holds fewer than twenty such bodies.
func (g *Gateway) spoolReadyRoom(maxBytes int64) int64 {
	return min(g.cfg.Ingest.MaxDecompressedBytes, maxBytes/20)
}

// Ready reports whether the gateway takes events now, and why not. With
// ack=spool that needs a spool that can write and has room, not Kafka: the
// spool absorbs broker outages; but not brokers that refuse the gateway's
// TLS or SASL settings (a wrong password, an unknown CA, a client
// certificate refused or expired), which no wait mends: then it is not
// ready, naming the cause, while it still takes events into the spool.
// Otherwise Kafka must have answered the last metadata request. A gateway
// that is shutting down is not ready.
func (g *Gateway) Ready() Readiness {
	rd := Readiness{Ack: g.cfg.Ack, Kafka: g.kafka.state(), ProducerTopics: producerTopics(g.kafka.prod, time.Now())}
	if g.replies != nil {
		rd.RPC = &RPCState{Replies: g.replies.Address().String(), Healthy: "ok", InFlight: g.router.InFlight(), Peak: g.router.Peak()}
		if err := g.replies.Healthy(); err != nil {
			rd.RPC.Healthy = err.Error()
		}
	}
	if g.catalogCheck != nil {
		rd.Catalog = g.catalogCheck.report()
	}
	if g.routeTable != nil {
		rd.Routes = g.routeTable.State()
	}
	if g.spool != nil {
		st := g.spool.Stats()
		rd.Spool = &SpoolState{Bytes: st.Bytes, MaxBytes: st.MaxBytes, Segments: st.Segments, Unforwarded: st.Unforwarded,
			OldestUnforwardedSeconds: g.fwd.OldestAge().Seconds(), Forwarder: g.fwd.State(), Failed: st.Failed, DiskFull: st.DiskFull,
			QuarantinedRecords: st.Quarantined, ParkedRecords: st.Parked, Topics: g.fwd.TopicStates()}
	}
	switch {
	case g.stopping.Load():
		rd.Error = "shutting down"
	case rd.Spool != nil && rd.Spool.Failed != "":
		rd.Error = "the spool cannot write: " + rd.Spool.Failed
	case rd.Spool != nil && rd.Spool.DiskFull != "":
		// Until an append succeeds or the disk has room for the one
		// refused: delivered segments are freed as Kafka takes them.
		rd.Error = "the spool's disk is full: " + rd.Spool.DiskFull
	case rd.Spool != nil && rd.Spool.MaxBytes-rd.Spool.Bytes < g.spoolReadyRoom(rd.Spool.MaxBytes):
		rd.Error = fmt.Sprintf("the spool is full: %d of --spool-max-bytes %d", rd.Spool.Bytes, rd.Spool.MaxBytes)
	case rd.Spool == nil && rd.Kafka != "ok":
		rd.Error = "kafka: " + rd.Kafka
	case g.kafka.refused.Load():
		// Not an outage the spool rides out: the spool would fill and
		// never drain. Events are still taken into it; a load balancer
		// (or a rolling deploy) sees this instance is misconfigured.
		rd.Error = "kafka: " + rd.Kafka
	default:
		rd.Ready = true
	}
	return rd
}

// readyMetric is inlet_ready: what /readyz answers, as a gauge, so that
// an alert sees an instance that stays unready (the reason is in /readyz).
func (g *Gateway) readyMetric() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "inlet_ready",
		Help: "1 while /readyz answers 200 (the gateway takes events), 0 while it answers 503; /readyz says why.",
	}, func() float64 {
		if g.Ready().Ready {
			return 1
		}
		return 0
	})
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

// Health is the body of /healthz.
type Health struct {
	Status string `json:"status"` // "ok" or "failed"
	Error  string `json:"error,omitempty"`
}

// serveHealth answers /healthz: 200 while the process can do its job, 503
// once it cannot without a restart: with ack=spool, after the spool stopped
// writing for good (a failed fsync leaves it unable to say what is on
// disk), so that the orchestrator restarts inlet.
func (g *Gateway) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	h := Health{Status: "ok"}
	if g.spool != nil {
		if st := g.spool.Stats(); st.Failed != "" {
			h = Health{Status: "failed", Error: "the spool cannot write until inlet restarts: " + st.Failed}
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}
	_ = json.NewEncoder(w).Encode(h)
}
