package kafka

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// batchLike returns n bytes that compress like a batch of JSON events.
func batchLike(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = fmt.Appendf(b, `{"event":"page_view","id":"%08d","uid":"u%d","props":{"path":"/p/%d"}}`, i, i%97, i%13)
	}
	return b[:n]
}

// TestLz4CompressorRoundTrip: what lz4Compressor writes, franz-go's
// decompressor (which consumers use) reads back byte for byte, in frames of
// 64 KiB blocks, also for a batch of several blocks.
func TestLz4CompressorRoundTrip(t *testing.T) {
	t.Parallel()
	d := kgo.DefaultDecompressor()
	for _, n := range []int{1, 100, 4 << 10, 64 << 10, 64<<10 + 1, 1 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			src := batchLike(n)
			out, codec := lz4Compressor{}.Compress(new(bytes.Buffer), src)
			if codec != kgo.CodecLz4 || out == nil {
				t.Fatalf("codec %v, %d bytes out; want lz4", codec, len(out))
			}
			// The frame descriptor's BD byte (after the magic and FLG):
			// block maximum size in bits 6-4, 4 for 64 KiB.
			if bd := out[5]; bd>>4&7 != 4 {
				t.Errorf("BD byte %#x: block size index %d, want 4 (64 KiB)", bd, bd>>4&7)
			}
			got, err := d.Decompress(out, kgo.CodecLz4)
			if err != nil {
				t.Fatalf("decompressing: %v", err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("round trip of %d bytes gave %d different bytes", len(src), len(got))
			}
		})
	}
}

// TestLz4CompressorMemory: compressing a small batch with a new writer
// costs well under a MiB (two 64 KiB blocks and the writer), where
// franz-go's default lz4 compressor takes two 4 MiB buffers.
func TestLz4CompressorMemory(t *testing.T) {
	src := batchLike(4 << 10)
	dst := new(bytes.Buffer)
	dst.Grow(8 << 10)
	// Two collections empty the pool (and its victim cache), so that the
	// call below makes a new writer, as after a quiet spell.
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if out, codec := (lz4Compressor{}).Compress(dst, src); out == nil || codec != kgo.CodecLz4 {
		t.Fatalf("not compressed: codec %v", codec)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 512<<10 {
		t.Errorf("compressing %d bytes with a new writer allocated %d KiB; want at most 512 KiB", len(src), n>>10)
	}
}

// TestLz4ProduceConsume: Kafka takes batches of lz4Compressor (the broker
// decompresses them to validate), and a consumer reads them back.
func TestLz4ProduceConsume(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	p := testProducer(t, brokers, func(c *Config) { c.Compression = "lz4"; c.Linger = 20 * time.Millisecond })
	topic := testkit.Unique(t, "lz4-")
	// Values of 1 KiB: 300 of them make batches of several 64 KiB blocks.
	recs := make([]event.Record, 300)
	for i := range recs {
		recs[i] = event.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(batchLike(1<<10), "#%d", i)}
	}
	if err := p.ProduceSync(ctxFor(t, 20*time.Second), recs); err != nil {
		t.Fatal(err)
	}
	got := testkit.ConsumeN(t, brokers, topic, len(recs), 300*time.Millisecond)
	want := map[string]bool{}
	for i := range recs {
		want[string(recs[i].Value)] = true
	}
	for _, r := range got {
		if !want[string(r.Value)] {
			t.Fatalf("consumed a value that was not produced (%d bytes)", len(r.Value))
		}
		delete(want, string(r.Value))
	}
	if len(want) > 0 {
		t.Fatalf("%d of %d records not consumed", len(want), len(recs))
	}
}
