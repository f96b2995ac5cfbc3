package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		err       error
		permanent bool
		tooLarge  bool
	}{
		{"nil", nil, false, false},
		{"message too large", kerr.MessageTooLarge, true, true},
		{"message too large, as kgo wraps it", classify(fmt.Errorf("%w (uncompressed_bytes=9, compressed_bytes=9)", kerr.MessageTooLarge)), true, true},
		{"record list too large", kerr.RecordListTooLarge, true, true},
		{"invalid record", classify(kerr.InvalidRecord), true, false},
		{"invalid timestamp", kerr.InvalidTimestamp, true, false},
		{"invalid topic", kerr.InvalidTopicException, true, false},
		{"topic authorization", kerr.TopicAuthorizationFailed, true, false},
		{"unsupported for format", kerr.UnsupportedForMessageFormat, true, false},
		{"policy violation", kerr.PolicyViolation, true, false},

		// About the client or the cluster: every record fails alike.
		{"unknown topic ID (recreated)", classify(kerr.UnknownTopicID), false, false},
		{"unknown topic", kerr.UnknownTopicOrPartition, false, false},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, false, false},
		{"out of order sequence", kerr.OutOfOrderSequenceNumber, false, false},
		{"unknown producer ID", kerr.UnknownProducerID, false, false},
		{"corrupt message (in transit)", kerr.CorruptMessage, false, false},
		{"not leader", kerr.NotLeaderForPartition, false, false},
		{"not enough replicas", kerr.NotEnoughReplicas, false, false},
		{"request timed out", kerr.RequestTimedOut, false, false},
		{"full", classify(kgo.ErrMaxBuffered), false, false},
		{"full, ours", ErrFull, false, false},
		{"delivery timeout", kgo.ErrRecordTimeout, false, false},
		{"retries", kgo.ErrRecordRetries, false, false},
		{"client closed", kgo.ErrClientClosed, false, false},
		{"context", context.DeadlineExceeded, false, false},
		{"network", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := IsPermanent(tc.err); got != tc.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.permanent)
			}
			if got := IsTooLarge(tc.err); got != tc.tooLarge {
				t.Errorf("IsTooLarge(%v) = %v, want %v", tc.err, got, tc.tooLarge)
			}
		})
	}
}
