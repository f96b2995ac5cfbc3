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
