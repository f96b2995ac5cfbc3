// Package verify checks a running gateway end to end for loss: it sends
// events with unique ids (Load), records which the gateway acknowledged
// (Ledger), reads them back from Kafka (Delivered) and reports what was lost,
// duplicated, or delivered without an acknowledgement (Compare).
//
// An event is lost when the gateway answered 2xx for it and it never
// appeared in the topic; that is the one thing inlet promises never to do.
// Events that were not acknowledged (503, timeouts) may or may not arrive:
// both are allowed, and they are counted apart.
package verify

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxLostIDs is how many lost ids a Report lists.
const MaxLostIDs = 20

// Ledger records what was sent and what the gateway acknowledged, and when
// the gateway answered 2xx (see AckGaps). Safe for concurrent use. It holds
// every id it was given, about 100 bytes each; the gaps take constant space.
type Ledger struct {
	now func() time.Time // time.Now; a fake clock in tests

	mu     sync.Mutex
	ids    map[string]uint8 // bits: idSent, idAcked
	sent   int
	acked  int
	status map[string]int
	first  time.Time // first Sent
	last   time.Time // last Sent, Acked or Answered
	// The spans without a 2xx answer that ended (with a 2xx): the longest,
	// and how many lasted at least GapThreshold. The open one runs from
	// last2xx (or first) to now.
	last2xx time.Time
	longest span
	gaps    int
}

// span is a time from..to.
type span struct{ from, to time.Time }

func (s span) d() time.Duration { return s.to.Sub(s.from) }

// GapThreshold is the length from which a span without a 2xx answer counts
// in AckGaps.AtLeast1s.
const GapThreshold = time.Second

const (
	idSent uint8 = 1 << iota
	idAcked
)

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{now: time.Now, ids: map[string]uint8{}, status: map[string]int{}}
}

// Sent records that events with these ids were sent. An id counts once.
func (l *Ledger) Sent(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.first.IsZero() {
		l.first = now
	}
	l.last = now
	for _, id := range ids {
		if s := l.ids[id]; s&idSent == 0 {
			l.ids[id] = s | idSent
			l.sent++
		}
	}
}

// Acked records that the gateway answered 2xx for these ids. An id counts once.
func (l *Ledger) Acked(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = l.now()
	for _, id := range ids {
		if s := l.ids[id]; s&idAcked == 0 {
			l.ids[id] = s | idAcked
			l.acked++
		}
	}
}

// Answered counts one request by its outcome: the HTTP status ("200",
// "503") or, when no answer came, the kind of client error ("refused",
// "timeout", "reset", "canceled", "error"). A 2xx status ends the current
// span without a 2xx answer (see AckGaps) at the time of the call.
func (l *Ledger) Answered(outcome string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.last = now
	l.status[outcome]++
	if !is2xx(outcome) {
		return
	}
	from := l.last2xx
	if from.IsZero() {
		from = l.first
	}
	if !from.IsZero() {
		l.endGap(span{from, now})
	}
	l.last2xx = now
}

// endGap counts s, a span without a 2xx answer. l.mu must be held.
func (l *Ledger) endGap(s span) {
	if s.d() > l.longest.d() {
		l.longest = s
	}
	if s.d() >= GapThreshold {
		l.gaps++
	}
}

// is2xx reports whether outcome is an HTTP status 200 to 299.
func is2xx(outcome string) bool {
	n, err := strconv.Atoi(outcome)
	return err == nil && n >= 200 && n <= 299 && len(outcome) == 3
}

// Counts returns how many distinct ids were sent and acknowledged.
func (l *Ledger) Counts() (sent, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.acked
}

// Start is when the first event was sent (zero before).
func (l *Ledger) Start() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// has reports whether id was sent, and whether it was acknowledged.
func (l *Ledger) has(id string) (sent, acked bool) {
	l.mu.Lock()
	s := l.ids[id]
	l.mu.Unlock()
	return s&idSent != 0, s&idAcked != 0
}

// ackedIDs returns the acknowledged ids.
func (l *Ledger) ackedIDs() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]bool, l.acked)
	for id, s := range l.ids {
		if s&idAcked != 0 {
			m[id] = true
		}
	}
	return m
}

// Report is the outcome of a check. Counts are of distinct event ids, except
// Duplicates (extra copies) and Status (requests).
type Report struct {
	Run    string `json:"run"`
	Target string `json:"target,omitempty"`
	Topic  string `json:"topic,omitempty"`

	Sent         int `json:"sent"`
	Acknowledged int `json:"acknowledged"` // the gateway answered 2xx
	Delivered    int `json:"delivered"`    // seen in the topic
	// Lost were acknowledged but never seen: a broken promise.
	Lost int `json:"lost"`
	// Duplicates is the number of extra copies: the sum over ids of (times
	// seen - 1).
	Duplicates int `json:"duplicates"`
	// DeliveredUnacknowledged were seen without a 2xx answer (a 503 or a
	// client timeout whose events still made it): allowed, at-least-once.
	// Like Duplicates, it counts what arrived before Delivered stopped
	// reading, which it does once every acknowledged id was seen.
	DeliveredUnacknowledged int `json:"delivered_unacknowledged"`
	// LostIDs are the first MaxLostIDs lost ids, in send order.
	LostIDs []string `json:"lost_ids,omitempty"`
	// Status counts requests by outcome: HTTP status or client error kind.
	Status map[string]int `json:"status"`
	// Duration is the time from the first event sent to the last answer.
	Duration string `json:"duration"`
	// EventsPerSecond is Sent over Duration.
	EventsPerSecond float64 `json:"events_per_second"`
	// AckGaps is how long the gateway went without answering 2xx.
	AckGaps AckGaps `json:"ack_gaps"`
}

// AckGaps measures the spans of a load in which no request was answered
// 2xx: from the first event sent to the first 2xx answer, between two 2xx
// answers in a row, and from the last 2xx answer to the last answer (the
// end of the load). Without any 2xx answer the one span is the whole load.
type AckGaps struct {
	// Longest is the longest span ("1.5s"), LongestSeconds the same in
	// seconds.
	Longest        string  `json:"longest"`
	LongestSeconds float64 `json:"longest_s"`
	// LongestStart is when the longest span began (the load's start or a
	// 2xx answer), and LongestAfter how long after the load's start
	// ("12.3s").
	LongestStart time.Time `json:"longest_start,omitzero"`
	LongestAfter string    `json:"longest_after"`
	// AtLeast1s counts the spans of GapThreshold (1 s) or longer.
	AtLeast1s int `json:"at_least_1s"`
}

// String is the gaps on one line, for people.
func (g AckGaps) String() string {
	return fmt.Sprintf("longest time without a 2xx answer %s, from %s after the start; %d of 1s or more",
		g.Longest, g.LongestAfter, g.AtLeast1s)
}

// ackGaps returns the gaps until the last answer. l.mu must be held.
func (l *Ledger) ackGaps() AckGaps {
	longest, n := l.longest, l.gaps
	if !l.first.IsZero() {
		from := l.last2xx
		if from.IsZero() {
			from = l.first
		}
		if open := (span{from, l.last}); open.d() > 0 {
			if open.d() > longest.d() {
				longest = open
			}
			if open.d() >= GapThreshold {
				n++
			}
		}
	}
	g := AckGaps{Longest: "0s", LongestAfter: "0s", AtLeast1s: n}
	if d := longest.d(); d > 0 {
		g.Longest = d.Round(time.Millisecond).String()
		g.LongestSeconds = math.Round(d.Seconds()*1000) / 1000
		g.LongestStart = longest.from
		g.LongestAfter = longest.from.Sub(l.first).Round(time.Millisecond).String()
	}
	return g
}

// OK reports whether nothing acknowledged was lost.
func (r Report) OK() bool { return r.Lost == 0 }

// Compare reports on run: l is what was sent and acknowledged, seen how often
// each id was found in the topic (as returned by Delivered).
func Compare(run string, l *Ledger, seen map[string]int) Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := Report{Run: run, Sent: l.sent, Acknowledged: l.acked, Status: make(map[string]int, len(l.status))}
	for k, v := range l.status {
		r.Status[k] = v
	}
	var lost []string
	for id, s := range l.ids {
		if s&idAcked != 0 && seen[id] == 0 {
			lost = append(lost, id)
		}
	}
	for id, n := range seen {
		if n <= 0 {
			continue
		}
		r.Delivered++
		r.Duplicates += n - 1
		if l.ids[id]&idAcked == 0 {
			r.DeliveredUnacknowledged++
		}
	}
	r.Lost = len(lost)
	// Ids of one run differ in their numeric suffix: shorter sorts first.
	slices.SortFunc(lost, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	if len(lost) > MaxLostIDs {
		lost = lost[:MaxLostIDs]
	}
	r.LostIDs = lost
	if d := l.last.Sub(l.first); !l.first.IsZero() && d > 0 {
		r.Duration = d.Round(time.Millisecond).String()
		r.EventsPerSecond = math.Round(float64(r.Sent)/d.Seconds()*10) / 10
	} else {
		r.Duration = "0s"
	}
	r.AckGaps = l.ackGaps()
	return r
}

// NewRun returns a fresh run id: "v", the time in milliseconds in base 36,
// and 24 random bits, so that runs sort by time and never collide.
func NewRun() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "v" + strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// ID is the event id of the n-th event of run.
func ID(run string, n int) string { return run + "-" + strconv.Itoa(n) }

// Prefix is what the ids of run start with; pass it to Delivered.
func Prefix(run string) string { return run + "-" }
