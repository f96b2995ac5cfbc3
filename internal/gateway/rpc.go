package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/auth"
	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
	"github.com/inlet-dev/inlet/internal/reply"
)

// startRPC sets up POST /v1/rpc/{service}: the router, and, when some
// service is enabled, the reply transport and the request producer.
// Without services every call is answered 404.
func (g *Gateway) startRPC(brokers []string, mux *http.ServeMux) error {
	cfg := g.cfg
	g.router = reply.NewRouter(cfg.RPC.MaxInFlight, reply.NewMetrics(g.reg))
	var (
		t reply.Transport
		p reply.Producer
	)
	if len(cfg.RPC.Services) > 0 {
		id := cfg.InstanceID
		if id == "" {
			id = defaultInstanceID(cfg.Listen)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		switch cfg.Reply {
		case ReplyKafka:
			topic := cfg.ReplyTopic
			if topic == "" {
				topic = "inlet.replies." + id
			}
			var opts []kgo.Opt
			if opts, err = cfg.Kafka.SecurityOpts(nil); err == nil { // warnings were logged by the events producer
				t, err = reply.StartKafka(ctx, brokers, topic, g.router, g.log, opts...)
				err = cfg.Kafka.Security.ConnErr(err)
			}
		case ReplyRedis:
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
		g.lc.started("reply transport", 0, func(context.Context) error { t.Close(); return nil })
		rp, err := kafka.NewProducer(cfg.rpcKafka(brokers), g.log, kafka.NewMetrics(producerMetrics(g.reg, "rpc")))
		if err != nil {
			return err
		}
		// Requests not yet in Kafka get a second: their callers are gone.
		g.lc.started("request producer", weightRPC, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = rp.Close(ctx)
			return nil
		})
		p = reply.ProducerFunc(rp.ProduceFunc)
		g.log.Info("request-reply enabled", "services", cfg.RPC.Services, "replies", t.Address().String())
	}
	rc := cfg.RPC
	switch {
	case cfg.Auth.HTTP && g.auth != nil:
		rc.Admit = g.admitRPC
	case rc.ForwardQuery:
		// No credentials are checked, but a client may send its k= all
		// the same: it must not reach the topic.
		rc.Admit = func(r *http.Request) (string, error) {
			r.URL.RawQuery = auth.WithoutCredentials(r.URL.RawQuery)
			return "", nil
		}
	}
	h, err := reply.NewHandler(rc, g.router, t, p, g.log)
	if err != nil {
		return err
	}
	g.lc.started("request-reply handler", 0, func(context.Context) error { h.Close(); return nil })
	h.Register(mux)
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
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, host+"-"+port)
}

// admitRPC checks a request-reply call's credentials (with --auth) as
// HTTP ingest does, and charges the call to its client's rate as one
// event: 401 with WWW-Authenticate for credentials refused, 429 with
// Retry-After over the rate. It returns the client's id.
func (g *Gateway) admitRPC(r *http.Request) (string, error) {
	p, err := g.auth.FromHTTP(r, g.ingest.ClientIP(r))
	if err == nil && p.Client == nil {
		err = fmt.Errorf("%w: the credentials name no client", auth.ErrBadCredentials)
	}
	if err != nil {
		rf := &reply.Refusal{Status: auth.HTTPStatus(err), Msg: "credentials refused: " + err.Error()}
		if rf.Status < 400 || rf.Status >= 500 { // not an error of credentials: refuse them anyway
			rf.Status = http.StatusUnauthorized
		}
		switch {
		case rf.Status == http.StatusUnauthorized:
			rf.Header = http.Header{"Www-Authenticate": {auth.WWWAuthenticate(err)}}
		case auth.RetryAfter(err) > 0: // the address failed too often
			rf.Header = http.Header{"Retry-After": {strconv.Itoa(auth.RetryAfterSeconds(auth.RetryAfter(err)))}}
		}
		return "", rf
	}
	// Credentials may come as k= in the query (even beside an
	// Authorization header): a request record with --rpc-forward-query
	// must not carry them to the topic.
	r.URL.RawQuery = auth.WithoutCredentials(r.URL.RawQuery)
	wait, err := g.auth.Allow(p, 1)
	if err == nil {
		return p.Client.ID, nil
	}
	rf := &reply.Refusal{Status: auth.HTTPStatus(err), Msg: "call refused, nothing was sent: " + err.Error()}
	if rf.Status != http.StatusTooManyRequests {
		if rf.Status < 400 || rf.Status >= 500 {
			rf.Status = http.StatusUnauthorized
		}
		return "", rf
	}
	secs := auth.RetryAfterSeconds(wait)
	rf.Header = http.Header{"Retry-After": {strconv.Itoa(secs)}}
	rf.Msg = fmt.Sprintf("client %q is over its rate; nothing was sent: retry after %d s (%v)", p.Client.ID, secs, err)
	return "", rf
}
