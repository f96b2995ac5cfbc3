package spool

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// TestReaderWindowsOfMixedSizes: records from a few bytes to several MiB
// (around the 256 KiB window and the 64..512 KiB buffer sizes, and past
// them), in small segments, read in default windows with every window's
// buffer recycled as soon as it is read (as after Kafka's acknowledgement),
// arrive once each, whole, in order; a reopened spool replays from the
// acknowledged position, losing none.
func TestReaderWindowsOfMixedSizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.SegmentBytes = 1 << 20
	cfg.MaxBytes = 1 << 30
	s, _, _ := open(t, cfg)
	win := DefaultForwarderConfig().WindowBytes
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{1, win - 100, win - 60, win - 40, win, win + 1, 64<<10 - 50, 64 << 10, 128<<10 + 7, 512<<10 - 30, 512 << 10, 512<<10 + 30, 3 << 20, 5 << 20}
	for range 300 {
		sizes = append(sizes, rng.IntN(20<<10))
	}
	rng.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
	var want [][]byte
	for i, n := range sizes {
		r := rec(fmt.Sprintf("r%05d", i))
		v := make([]byte, n)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		r.Value = v
		want = append(want, v)
		if err := s.Append(context.Background(), []event.Record{r}); err != nil {
			t.Fatalf("append %d (%d bytes): %v", i, n, err)
		}
	}
	read := func(s *Spool, from Pos, upTo int) ([][]byte, Pos) {
		t.Helper()
		r := s.NewReader(from)
		defer r.Close()
		r.free = make(chan *windowMem, 4)
		var got [][]byte
		pos := from
		for len(got) < upTo {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			es, next, err := r.Next(ctx, win)
			cancel()
			if err != nil {
				t.Fatalf("after %d records: %v", len(got), err)
			}
			for _, e := range es {
				got = append(got, bytes.Clone(e.Record.Value))
			}
			pos = next
			recycle(r.free, r.last)
		}
		return got, pos
	}
	half := len(want) / 2
	got, pos := read(s, s.Delivered(), half)
	if err := s.Ack(pos); err != nil {
		t.Fatal(err)
	}
	check := func(got [][]byte, off int) {
		t.Helper()
		for i, g := range got {
			if !bytes.Equal(g, want[off+i]) {
				t.Fatalf("record %d: %d bytes, want %d (lost, duplicated or changed)", off+i, len(g), len(want[off+i]))
			}
		}
	}
	check(got, 0)
	n := len(got)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, _, _ := open(t, cfg)
	rest, _ := read(s2, s2.Delivered(), len(want)-n)
	check(rest, n)
	if n+len(rest) != len(want) {
		t.Fatalf("read %d+%d, want %d", n, len(rest), len(want))
	}
}
