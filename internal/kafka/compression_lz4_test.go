package kafka

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/testkit"
)

// TestLz4Kcat: batches lz4Compressor wrote (one small, several of
// more than one 64 KiB block, incompressible ones) are read back by
// librdkafka (kcat), not only by franz-go.
func TestLz4Kcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("no kcat")
	}
	brokers := testkit.Brokers(t)
	p := testProducer(t, brokers, func(c *Config) { c.Compression = "lz4"; c.Linger = 50 * time.Millisecond })
	topic := testkit.Unique(t, "lz4-kcat-")
	testkit.CreateTopic(t, brokers, topic, 1, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []event.Record
	want := map[string]int{}
	add := func(v []byte) {
		recs = append(recs, event.Record{Topic: topic, Value: v})
		want[fmt.Sprintf("%x", sha256.Sum256(v))]++
	}
	// printable, no newline: kcat prints one value a line
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('!' + rng.IntN(90))
		}
		return b
	}
	add([]byte("x"))
	for _, n := range []int{1, 7, 100, 65535, 65536, 65537, 200 << 10, 900 << 10} {
		add(rnd(n))
		add(bytes.Repeat([]byte("a"), n))
	}
	for i := 0; i < 500; i++ {
		add(append(batchLike(700+i), rnd(50)...))
	}
	if err := p.ProduceSync(ctxFor(t, 30*time.Second), recs); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kcat, "-C", "-b", strings.Join(brokers, ","), "-t", topic, "-e", "-o", "beginning", "-q", "-f", "%s\n").Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("kcat read %d records; want %d", len(lines), len(recs))
	}
	for _, l := range lines {
		h := sha256.Sum256([]byte(l))
		k := hex.EncodeToString(h[:])
		if want[k] == 0 {
			t.Fatalf("kcat read a value not produced (%d bytes)", len(l))
		}
		want[k]--
	}
}

// TestLz4Concurrent: concurrent Compress calls each with their own
// dst give frames that decompress to their own input (no writer shared,
// no dst aliased), and a reused dst is not kept by the pooled writer.
func TestLz4Concurrent(t *testing.T) {
	d := kgo.DefaultDecompressor()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := new(bytes.Buffer)
			for i := 0; i < 200; i++ {
				src := batchLike(1 + (g*7919+i*104729)%(300<<10))
				dst.Reset()
				out, codec := lz4Compressor{}.Compress(dst, src)
				if codec != kgo.CodecLz4 {
					t.Errorf("codec %v", codec)
					return
				}
				cp := append([]byte(nil), out...)
				got, err := d.Decompress(cp, kgo.CodecLz4)
				if err != nil || !bytes.Equal(got, src) {
					t.Errorf("round trip of %d bytes: %v", len(src), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// empty input: a valid empty frame
	out, _ := lz4Compressor{}.Compress(new(bytes.Buffer), nil)
	if got, err := d.Decompress(out, kgo.CodecLz4); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %d", err, len(got))
	}
}
