package kafka

import (
	"flag"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// RegisterFlags binds the producer settings of c (all but Brokers, which
// each command names its own way) to flags of fs; the defaults are c's
// values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Compression, "compression", c.Compression, "record batch compression: none, gzip, snappy, lz4, zstd")
	fs.DurationVar(&c.Linger, "linger", c.Linger, "how long the producer waits to fill a batch")
	cliflag.Bytes(fs, &c.MaxBufferedBytes, "max-buffered-bytes", "records not yet acknowledged by Kafka, in bytes of their keys, values and headers (503 past it); each record takes about 250 B of memory more")
	fs.IntVar(&c.MaxBufferedRecords, "max-buffered-records", c.MaxBufferedRecords, "records not yet acknowledged by Kafka (503 past it)")
	fs.Float64Var(&c.TopicShare, "max-buffered-topic-share", c.TopicShare, "the part of --max-buffered-bytes and --max-buffered-records one topic may take (503 past it for that topic), so that a topic Kafka does not take leaves the rest to the others; 1 turns it off")
	fs.DurationVar(&c.DeliveryTimeout, "delivery-timeout", c.DeliveryTimeout, "how long a record may wait for Kafka before it fails")
	fs.StringVar(&c.ClientID, "client-id", c.ClientID, "Kafka client id")
}
