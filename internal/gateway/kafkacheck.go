package gateway

import (
	"fmt"
	"time"

	"github.com/inlet-dev/inlet/internal/kafka"
)

// produceFailWindow is how long failed produces keep Kafka not ready once
// they stop. Without traffic nothing is produced to prove Kafka took
// records again (a load balancer sends none to an unready gateway), so the
// check must forget old failures; records that fail again make it unready
// again at once.
const produceFailWindow = 10 * time.Second

// produceFailing is why the producer's recent results say Kafka does not
// take records, or "" when they do not: records failed in a row (not for
// reasons of their own, see kafka.IsPermanent) with the last failure within
// produceFailWindow of now and no acknowledgement since. A metadata ping
// succeeds in cases this catches: a topic recreated or a broker wiped (every
// record refused with UNKNOWN_TOPIC_ID until the producer forgot the
// topic), a leader that does not take writes, missing ACLs on the cluster.
func produceFailing(p *kafka.Producer, now time.Time) string {
	h := p.Health()
	if h.Failing == 0 || now.Sub(h.At) > produceFailWindow {
		return ""
	}
	return fmt.Sprintf("%d records failed in a row since %s, none acknowledged since: %v",
		h.Failing, h.Since.UTC().Format(time.RFC3339), h.Err)
}

// producerTopics is each topic's state in the producer for /readyz: "full"
// while it refused records for its share within produceFailWindow of now,
// "failing" while its records fail in a row (as produceFailing, for the
// topic), else "ok". Nil before the producer started (the live page asks from its first
// request).
func producerTopics(p *kafka.Producer, now time.Time) map[string]ProducerTopic {
	if p == nil {
		return nil
	}
	loads := p.TopicLoads()
	if len(loads) == 0 {
		return nil
	}
	out := make(map[string]ProducerTopic, len(loads))
	for topic, l := range loads {
		pt := ProducerTopic{State: "ok", BufferedRecords: l.Records, BufferedBytes: l.Bytes,
			ShareRecords: l.ShareRecords, ShareBytes: l.ShareBytes, RefusedRecords: l.Refused}
		switch f := l.Failing; {
		case f.Failing > 0 && now.Sub(f.At) <= produceFailWindow:
			pt.State = "failing"
			pt.Error = fmt.Sprintf("%d records failed in a row since %s: %v", f.Failing, f.Since.UTC().Format(time.RFC3339), f.Err)
		case !l.RefusedAt.IsZero() && now.Sub(l.RefusedAt) <= produceFailWindow:
			pt.State = "full"
			pt.Error = fmt.Sprintf("%d records buffered, its share is %d records and %d bytes: Kafka is not taking them as fast as they come; requests refused with 503",
				l.Records, l.ShareRecords, l.ShareBytes)
		}
		out[topic] = pt
	}
	return out
}
