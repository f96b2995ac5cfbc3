package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ingest"
)

// discardSink takes every record and keeps none (RecordsDone), as the
// spool does once it copied them.
type discardSink struct{}

func (discardSink) Write(context.Context, []event.Record) error { return nil }
func (discardSink) RecordsDone(error) bool                      { return true }

// BenchmarkServeBatch is one POST /v1/batch of 5 events of about 100 bytes
// (make bench's request) per op, on the gateway's own HTTP server
// (newServer: its handler chain, timeouts and deadlines) over loopback
// keep-alive connections (16 per GOMAXPROCS, each one request at a time),
// with ingest in front of a sink that takes everything: the server's cost
// per request, the client's included. Profile it (-cpuprofile) for where
// the handler chain spends; make bench measures the real server.
func BenchmarkServeBatch(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Ingest.AckStatus = http.StatusOK
	in, err := ingest.New(cfg.Ingest, discardSink{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	in.Register(mux)
	srv, err := newServer(cfg, mux, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	var body bytes.Buffer
	body.WriteByte('[')
	for i := range 5 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"event":"page_view","id":"0197c3b0-0000-7000-8000-%012d","uid":"user-%04d","props":{"path":"/pricing","ref":"x"}}`, i, i)
	}
	body.WriteByte(']')
	req := fmt.Appendf(nil, "POST /v1/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: inlet-bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", body.Len(), body.Bytes())
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			n := -1
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					b.Error(err)
					return
				}
				if len(line) == 2 {
					break
				}
				if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
					n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
				}
			}
			if _, err := br.Discard(n); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
