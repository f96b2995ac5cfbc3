// Command noop is the no-op HTTP server of the benchmarks: it reads each
// request's body and answers 204 No Content, so that a load on it measures
// the limit of Go's net/http stack on the machine, and nothing else.
//
//	noop [--listen 127.0.0.1:8080] [--stall-every N --stall 200ms]
//	     [--grpc-listen ADDR] [--thrift-listen ADDR]
//
// With --stall-every N, every N-th request stalls the whole server for
// --stall: every request being answered waits until the stall is over, as
// in a stop-the-world pause. scripts/check-bench.sh uses it to show that
// an open-loop load sees such stalls and a closed-loop one hides them.
//
// With --grpc-listen and --thrift-listen it also serves the floors of the
// catalog's benchmarks: inf.Data DataType answered at once by grpc-go and
// by Apache Thrift's TSimpleServer, each with its default settings.
//
// It prints its address on stdout once it listens (then "grpc ADDR" and
// "thrift ADDR" lines for the floors), and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "noop:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("noop", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (port 0: a free one)")
	var s staller
	fs.Int64Var(&s.every, "stall-every", 0, "stall the server every this many requests (0: never)")
	fs.DurationVar(&s.stall, "stall", 200*time.Millisecond, "how long a stall lasts")
	grpcListen := fs.String("grpc-listen", "", "also serve the gRPC floor (inf.Data, grpc-go defaults) on this address")
	thriftListen := fs.String("thrift-listen", "", "also serve the Thrift floor (inf.Data, TSimpleServer, framed) on this address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.every < 0 || s.stall < 0 {
		return errors.New("--stall-every and --stall must not be negative")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(&s), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	// Every listener is opened before anything is served, so that a
	// failure leaves nothing running.
	var (
		floors []string
		gl     net.Listener
		ts     *thrift.TSimpleServer
	)
	if *grpcListen != "" {
		if gl, err = net.Listen("tcp", *grpcListen); err != nil {
			ln.Close()
			return fmt.Errorf("gRPC floor: %w", err)
		}
		floors = append(floors, "grpc "+gl.Addr().String())
	}
	if *thriftListen != "" {
		var addr net.Addr
		if ts, addr, err = listenThrift(*thriftListen); err != nil {
			ln.Close()
			if gl != nil {
				gl.Close()
			}
			return err
		}
		floors = append(floors, "thrift "+addr.String())
	}
	done := make(chan error, 3)
	if gl != nil {
		go func() { done <- serveGRPC(ctx, gl) }()
	}
	if ts != nil {
		go func() { done <- serveThrift(ctx, ts) }()
	}
	fmt.Fprintln(stdout, ln.Addr())
	for _, f := range floors {
		fmt.Fprintln(stdout, f)
	}
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	for range 1 + len(floors) { // the floors stop with ctx
		<-done
	}
	return nil
}

// handler reads the body and answers 204, after a stall if one is on.
func handler(s *staller) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.wait()
		w.WriteHeader(http.StatusNoContent)
	})
}

// staller stalls every request for stall once every requests, counting
// from the request that started the stall. It is safe for concurrent use.
type staller struct {
	every int64
	stall time.Duration
	n     atomic.Int64
	until atomic.Int64 // Unix nanoseconds at which the current stall ends
}

func (s *staller) wait() {
	if s.every <= 0 {
		return
	}
	now := time.Now()
	if s.n.Add(1)%s.every == 0 {
		s.until.Store(now.Add(s.stall).UnixNano())
	}
	if d := time.Duration(s.until.Load() - now.UnixNano()); d > 0 {
		time.Sleep(d)
	}
}
