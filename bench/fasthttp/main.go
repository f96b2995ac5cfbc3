// Command frontbench measures the HTTP front end of inlet's ingest: it
// serves the same ingest work for POST /v1/batch (frame the body, read each
// event once with event.Batch, build the records, hand them to inlet's
// Kafka producer, acks=all and idempotent, wait for this request's acks,
// answer {"accepted":N,"rejected":[...]}) behind either net/http or
// fasthttp, so that a load on each measures what the front end costs, and
// nothing else. bench.sh runs it beside cmd/noop and inlet serve.
//
//	frontbench --front nethttp|fasthttp [--handler ingest|noop]
//	           [--listen 127.0.0.1:8080] [--brokers host:port,...] [--topic events]
//	           [--cpuprofile FILE]
//
// --handler noop answers 204 after reading the body, with no Kafka: the
// floor of each front end. It answers 200 on /readyz once Kafka answered
// a ping, prints its address on stdout once it listens, and stops on SIGINT
// or SIGTERM.
//
// This is a measurement, not a server: no auth, CORS, catalog, metrics,
// compressed bodies, memory budget, body idle timeout, TLS or h2c. It lives
// in a module of its own so that inlet's module does not depend on
// fasthttp.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/kafka"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "frontbench:", err)
		}
		os.Exit(2)
	}
}

// front is an HTTP front end: it serves ln until ctx is done, then shuts
// down within a bound.
type front func(ctx context.Context, ln net.Listener, h *handler) error

// handler is what both front ends serve: the ingest work, or nothing (noop).
type handler struct {
	noop bool
	ing  *ingester
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("frontbench", flag.ContinueOnError)
	frontName := fs.String("front", "nethttp", "HTTP front end: nethttp or fasthttp")
	handlerName := fs.String("handler", "ingest", "ingest (the work of inlet serve --ack kafka) or noop (read the body, answer 204)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (port 0: a free one)")
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka brokers, comma-separated (ingest only)")
	topic := fs.String("topic", "events", "topic of the events (ingest only)")
	maxBody := fs.Int64("max-body-bytes", 1<<20, "largest request body")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var serve front
	switch *frontName {
	case "nethttp":
		serve = serveNetHTTP
	case "fasthttp":
		serve = serveFastHTTP
	default:
		return fmt.Errorf("--front %q: want nethttp or fasthttp", *frontName)
	}
	h := &handler{}
	switch *handlerName {
	case "noop":
		h.noop = true
	case "ingest":
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg := kafka.DefaultConfig()
		cfg.Brokers = strings.Split(*brokers, ",")
		p, err := kafka.NewProducer(cfg, log, nil)
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = p.Close(cctx)
		}()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = p.Ping(pctx)
		cancel()
		if err != nil {
			return err
		}
		h.ing = &ingester{
			topic:        *topic,
			deadLetter:   *topic + ".dlq",
			limits:       event.DefaultLimits,
			maxBodyBytes: *maxBody,
			writeTimeout: 10 * time.Second,
			sink:         p,
			now:          time.Now,
		}
	default:
		return fmt.Errorf("--handler %q: want ingest or noop", *handlerName)
	}
	if h.ing == nil {
		h.ing = &ingester{maxBodyBytes: *maxBody}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ln.Addr())
	return serve(ctx, ln, h)
}

// Timeouts of both front ends, those of inlet serve (internal/gateway).
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	idleTimeout       = 120 * time.Second
	shutdownTimeout   = 10 * time.Second
)
