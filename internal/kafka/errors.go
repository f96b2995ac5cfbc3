package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// permanent are the produce errors that refuse one record for good: the
// same record sent again, to the same topic, fails the same way, so a
// caller should answer or dead-letter it rather than retry it. Errors about
// the client or the cluster (UNKNOWN_TOPIC_ID after a topic was recreated,
// CLUSTER_AUTHORIZATION_FAILED, a producer ID the broker lost) are not
// here: every record would fail with them, and they are recovered from or
// fixed by an operator, not by dropping records.
var permanent = []*kerr.Error{
	kerr.MessageTooLarge,             // larger than the topic's max.message.bytes
	kerr.RecordListTooLarge,          // its batch is larger than a segment
	kerr.InvalidRecord,               // refused by the broker's validation (e.g. a compacted topic without a key)
	kerr.InvalidTimestamp,            // outside message.timestamp.*.max.ms
	kerr.InvalidTopicException,       // a topic name Kafka cannot have
	kerr.TopicAuthorizationFailed,    // no ACL to write this topic
	kerr.UnsupportedForMessageFormat, // the topic's format cannot hold it (headers on v0/v1)
	kerr.PolicyViolation,             // refused by a broker policy
}

// IsPermanent reports whether err, a failure of ProduceSync, Delivery or
// ProduceFunc, refuses its record for good (see permanent): retrying the
// same record cannot succeed. ErrFull, timeouts, a closed client and every
// retriable Kafka error are not permanent.
func IsPermanent(err error) bool {
	if err == nil || errors.Is(err, ErrFull) {
		return false
	}
	for _, e := range permanent {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// IsTooLarge reports whether err says a record (or its batch) is larger
// than Kafka takes: the client refused it against the producer's
// BatchMaxBytes, or the broker against the topic's max.message.bytes.
func IsTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}
