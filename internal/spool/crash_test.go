package spool

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestCrashAtEveryOffset cuts a segment at every byte offset, as a crash
// in the middle of a write leaves it, and reopens the spool: recovery keeps
// exactly the records whose frames are whole, never fails, and the reader
// returns exactly those records.
func TestCrashAtEveryOffset(t *testing.T) {
	recs := []event.Record{
		rec("a0"),
		{Topic: "t", Value: []byte("{}")}, // no key, no headers
		{Topic: "a-longer-topic-name", Key: []byte("k"), Value: []byte(`{"v":1}`), Headers: []event.Header{{Key: "h", Value: []byte("v")}}},
		rec("b1"),
		{Topic: "t", Key: []byte("key"), Value: bytes.Repeat([]byte("z"), 100)},
	}
	src := t.TempDir()
	s, _, _ := open(t, testConfig(src))
	for i := range recs {
		if err := s.Append(context.Background(), recs[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	data, err := os.ReadFile(filepath.Join(src, segName(1)))
	if err != nil {
		t.Fatal(err)
	}
	// ends[i] is the offset after frame i.
	var ends []int
	for off := 0; off < len(data); {
		_, n, err := nextFrame(data[off:])
		if err != nil {
			t.Fatalf("frame at %d: %v", off, err)
		}
		off += n
		ends = append(ends, off)
	}
	if len(ends) != len(recs) {
		t.Fatalf("%d frames for %d records", len(ends), len(recs))
	}

	// Eight parallel runs, each over every eighth offset.
	const runs = 8
	for run := range runs {
		t.Run(fmt.Sprint("offsets=", run, "+8n"), func(t *testing.T) {
			t.Parallel()
			crashAt(t, data, ends, recs, run, runs)
		})
	}
}

// crashAt cuts data at offsets first, first+step, ..., and checks the
// spool recovered from each.
func crashAt(t *testing.T, data []byte, ends []int, recs []event.Record, first, step int) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	for k := first; k <= len(data); k += step {
		whole := 0 // records whose frames end at or before k
		for whole < len(ends) && ends[whole] <= k {
			whole++
		}
		good := 0
		if whole > 0 {
			good = ends[whole-1]
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		seg := filepath.Join(dir, segName(1))
		if err := os.WriteFile(seg, data[:k], 0o644); err != nil {
			t.Fatal(err)
		}
		log, logs := testkit.NewLogBuffer()
		s, err := Open(cfg, log, nil)
		if err != nil {
			t.Fatalf("cut at %d: open: %v", k, err)
		}
		got, _ := readAll(t, s, s.Delivered())
		st := s.Stats()
		s.Close()
		if len(got) != whole || st.Unforwarded != uint64(whole) {
			t.Fatalf("cut at %d: %d records read, %d unforwarded, want %d", k, len(got), st.Unforwarded, whole)
		}
		for i, e := range got {
			if e.Seq != uint64(i+1) || !sameRecord(e.Record, recs[i]) {
				t.Fatalf("cut at %d: record %d (seq %d) is %+v, want %+v", k, i, e.Seq, e.Record, recs[i])
			}
		}
		if cut := logs.Count("cutting it at the last good record") > 0; cut != (k != good) {
			t.Fatalf("cut at %d (good %d): logged a cut: %v\n%s", k, good, cut, logs)
		}
		if whole > 0 {
			if fi, err := os.Stat(seg); err != nil || fi.Size() != int64(good) {
				t.Fatalf("cut at %d: segment %v %v, want %d bytes", k, fi, err, good)
			}
		}
	}
}

func sameRecord(a, b event.Record) bool {
	if a.Topic != b.Topic || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) || a.EventID != b.EventID || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}
