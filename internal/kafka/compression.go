package kafka

import (
	"bytes"
	"strings"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchCompression returns the producer option that compresses record
// batches with the codec named none, gzip, snappy, lz4 or zstd (see Codec).
// lz4 uses lz4Compressor, franz-go's own compressor otherwise.
func BatchCompression(name string) (kgo.ProducerOpt, error) {
	cc, err := Codec(name)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(name, "lz4") {
		return kgo.WithCompressor(lz4Compressor{}), nil
	}
	return kgo.ProducerBatchCompression(cc), nil
}

// lz4BlockSize is the block size of the lz4 frames lz4Compressor writes:
// that of Kafka's Java client (KafkaLZ4BlockOutputStream). franz-go's
// default compressor keeps pierrec/lz4's default of 4 MiB, and each of its
// pooled writers then holds two 4 MiB buffers (the block and its
// compressed copy) however small the batches: 8 MiB of the heap of
// inlet serve under load, to compress batches of a few KiB, and the
// garbage collector's goal grows by GOGC% of it. A batch (at most
// --batch-max-bytes) larger than a block is written as several blocks of
// one frame, as the Java client does.
const lz4BlockSize = lz4.Block64Kb

// lz4Compressor is a kgo.Compressor writing lz4 frames of lz4BlockSize
// blocks at the fastest level (kgo.Lz4Compression's). It is safe for
// concurrent use: each call takes a writer from lz4Writers.
type lz4Compressor struct{}

var _ kgo.Compressor = lz4Compressor{}

// lz4Writers pools the writers of lz4Compressor; each holds two
// lz4BlockSize buffers while it writes, none in the pool.
var lz4Writers = sync.Pool{New: func() any {
	w := lz4.NewWriter(nil)
	// Both options are valid constants: Apply cannot fail with them.
	_ = w.Apply(lz4.BlockSizeOption(lz4BlockSize), lz4.CompressionLevelOption(lz4.Fast))
	return w
}}

// Compress writes src as one lz4 frame into dst and returns it, or nil
// (franz-go then sends the batch uncompressed) if the writer failed.
func (lz4Compressor) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	w := lz4Writers.Get().(*lz4.Writer)
	defer lz4Writers.Put(w)
	w.Reset(dst)
	if _, err := w.Write(src); err != nil {
		w.Reset(nil) // gives back the block buffers
		return nil, kgo.CodecNone
	}
	if err := w.Close(); err != nil {
		return nil, kgo.CodecNone
	}
	w.Reset(nil) // drops dst, which franz-go reuses once we return
	return dst.Bytes(), kgo.CodecLz4
}
