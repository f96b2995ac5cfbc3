package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inlet-dev/inlet/internal/event"
	"github.com/inlet-dev/inlet/internal/ratelog"
	"github.com/inlet-dev/inlet/internal/relay"
)

// Producer hands records to Kafka in order and returns at once; the
// Delivery tells when Kafka acknowledged all of them. The forwarder calls
// Produce from one goroutine per topic at a time, each call with records
// of one topic. A Produce that does not return
// holds the forwarder back, but not Stop (see Forwarder.Stop).
type Producer interface {
	Produce(recs []event.Record) (Delivery, error)
}

// Delivery is the pending acknowledgement of one Produce call. Once Wait
// returned nil, the producer holds neither the slice given to Produce nor
// any of the records' bytes or headers: the forwarder reads the next
// records into them.
type Delivery = relay.Pending

// Forwarder states.
const (
	StateIdle       = "idle"       // everything spooled was delivered
	StateForwarding = "forwarding" // windows are on their way to Kafka
	StateStalled    = "stalled"    // Kafka has not acknowledged the oldest window for StallAfter
	StateRetrying   = "retrying"   // a window failed; waiting to send it, and those after it, again
	// StateStuck: the next record cannot be read (a damaged frame, a
	// segment gone from disk), or a record Kafka refused for good can be
	// neither dead-lettered nor parked; nothing after it is delivered.
	// OldestAge says how long it has waited. An unreadable record is given
	// up after QuarantineAfter tries.
	StateStuck   = "stuck"
	StateStopped = "stopped"
)

// stateNames maps the engine's states to the forwarder's.
var stateNames = [...]string{relay.StateIdle: StateIdle, relay.StateSending: StateForwarding, relay.StateStalled: StateStalled,
	relay.StateRetrying: StateRetrying, relay.StateStuck: StateStuck, relay.StateStopped: StateStopped}

var states = stateNames[:]

// ForwarderConfig configures a forwarder.
type ForwarderConfig struct {
	// WindowBytes is the most bytes of spool frames read, sent and
	// acknowledged together, and Windows how many windows are in flight at
	// once. Their product bounds what the forwarder holds while it drains
	// a backlog, in frames: in memory about 6 times that (each record's
	// entry, its copy for the producer, franz-go's record and batch).
	WindowBytes int
	Windows     int
	MinBackoff  time.Duration // after a failed window, doubling up to MaxBackoff
	MaxBackoff  time.Duration
	StallAfter  time.Duration // a window unacknowledged this long reports StateStalled
	// QuarantineAfter is how many times in a row reading the same record
	// may fail (StateStuck meanwhile, MaxBackoff apart) before it is given
	// up: the damaged segment is copied to <segment>.corrupt, the records
	// lost are counted (inlet_spool_quarantined_records_total) and logged,
	// and delivery goes on after them.
	QuarantineAfter int

	// Permanent, if set, reports whether a delivery error is one no retry
	// can fix (a record too large for the topic, an invalid record, no
	// authorization). A window failing with one is sent again one record
	// at a time, in order, to find the records Kafka refuses; each of
	// those is handed to Poison, and delivery goes on after it. Nil: every
	// error is retried.
	Permanent func(error) bool
	// Poison, if set, hands e's record, refused for good with err, to a
	// dead-letter path (e.g. a dead-letter topic) and returns once it is
	// there. If it fails with an error Permanent accepts, or is nil, the
	// record is parked in the spool's parked/ file
	// (inlet_spool_parked_records_total); a transient error is retried like
	// a failed window, and the record parked at the QuarantineAfter-th in a
	// row. It is called from each topic's lane, one record at a time per
	// topic (so from several goroutines at once), and must return once
	// ctx is done.
	Poison func(ctx context.Context, e Entry, err error) error

	// IdleAfter: a topic whose records are all delivered and that had
	// none for this long is forgotten (its lane stops); 0:
	// DefaultIdleAfter.
	IdleAfter time.Duration
}

// DefaultForwarderConfig returns the documented defaults.
func DefaultForwarderConfig() ForwarderConfig {
	// 256 KiB windows drain a backlog as fast as 1 MiB ones did
	// (200,000 records of 250 B to a real broker on one core: 0.6-0.95 s
	// for both), with 6 MB of live heap at most instead of 19-24 MB.
	return ForwarderConfig{WindowBytes: 256 << 10, Windows: 4, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second, StallAfter: 5 * time.Second, QuarantineAfter: 3}
}

// Forwarder sends the spool's records to Kafka: one lane per topic, each a
// relay.Engine reading the spool from its topic's position (topics.go),
// skipping the other topics' records, and sending its own in order, up to
// Windows windows in flight. A topic Kafka does not take holds back its own
// lane only. A lane starts when its topic's first record is appended (or at
// the start, for the topics the spool knows), and stops once its topic is
// forgotten (IdleAfter without a record, everything delivered).
//
// Order per key holds within a topic because a lane hands its windows to
// the idempotent producer in order, and a window that fails (after the
// producer's own retries: the delivery timeout, a non-retriable error, a
// full buffer) is never overtaken: the lane produces nothing more, abandons
// the windows it produced after the failed one, and after a backoff
// produces again from its topic's position, the failed window first.
// Windows that Kafka took before they were abandoned are sent again:
// delivery is at-least-once, and the last copy of each record lands in
// order.
type Forwarder struct {
	s       *Spool
	p       Producer
	cfg     ForwarderConfig
	log     *slog.Logger
	metrics *Metrics
	// afterFunc starts the stall timer: time.AfterFunc, or a test's seam.
	afterFunc func(d time.Duration, fn func()) (stop func() bool)
	// stateHook, a test's seam, sees each new state of the forwarder as a
	// whole.
	stateHook func(string)

	retryLog, recoverLog, readLog, ackLog, poisonLog, parkLog *ratelog.Limiter

	stop    chan struct{} // closed by Stop: start no more lanes
	managed chan struct{} // closed once the lanes' manager returned
	done    chan struct{} // closed once, after Stop, every lane's engine returned and its reader is closed

	// mu guards lanes and the forwarder's state; it is taken after a
	// lane's engine lock (OnState).
	mu      sync.Mutex
	lanes   map[string]*lane
	stopped bool
	state   atomic.Value // string
}

// lane forwards one topic's records.
type lane struct {
	f     *Forwarder
	topic string
	e     *relay.Engine[event.Record]
	src   *source
	done  chan struct{} // closed once the engine returned and the reader is closed

	// poisonFails counts Poison's transient failures in a row for the
	// record poisonSeq; the engine's goroutine's alone.
	poisonSeq   uint64
	poisonFails int
	lastAt      atomic.Int64 // unix ns appended-at of the last record of the topic read
	stuckAt     atomic.Int64 // unix ns when the state last became stuck; 0 when not stuck
	state       atomic.Value // string
}

// stopGrace bounds how long Stop waits past its deadline for the forwarder
// to return from the producer.
const stopGrace = 200 * time.Millisecond

// StartForwarder starts forwarding every topic from its delivered position.
// Stop it with Stop before closing the spool. p's Produce is called from one
// goroutine per topic at a time.
func StartForwarder(s *Spool, p Producer, cfg ForwarderConfig, log *slog.Logger) *Forwarder {
	f := newForwarder(s, p, cfg, log)
	f.start()
	return f
}

func newForwarder(s *Spool, p Producer, cfg ForwarderConfig, log *slog.Logger) *Forwarder {
	f := &Forwarder{
		s: s, p: p, cfg: cfg, log: log, metrics: s.metrics, stop: make(chan struct{}), managed: make(chan struct{}), done: make(chan struct{}),
		lanes:      map[string]*lane{},
		afterFunc:  func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop },
		retryLog:   ratelog.New(log, slog.LevelWarn, "forwarder: kafka did not take the records; sending them again", 10*time.Second),
		recoverLog: ratelog.New(log, slog.LevelInfo, "forwarder: kafka acknowledged again", 10*time.Second),
		readLog:    ratelog.New(log, slog.LevelError, "spool: reading for the forwarder", 10*time.Second),
		ackLog:     ratelog.New(log, slog.LevelError, "spool: recording delivery", 10*time.Second),
		poisonLog:  ratelog.New(log, slog.LevelWarn, "forwarder: kafka refused records for good; sent them to the dead-letter path", 10*time.Second),
		parkLog:    ratelog.New(log, slog.LevelError, "forwarder: kafka refused records for good, and the dead-letter path too; parked them under the spool's parked/ directory", 10*time.Second),
	}
	f.state.Store(StateStopped)
	f.updateState()
	return f
}

// newLane returns the lane of topic; nothing runs before its start.
func (f *Forwarder) newLane(topic string) *lane {
	cfg := f.cfg
	l := &lane{f: f, topic: topic, done: make(chan struct{})}
	l.state.Store(StateStopped)
	l.src = &source{l: l, free: make(chan *windowMem, max(cfg.Windows, 1))}
	l.e = relay.New[event.Record](l.src, producerSink{f.p}, relay.Config[event.Record]{
		Windows: cfg.Windows, MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff,
		StallAfter: cfg.StallAfter, StopGrace: stopGrace,
		Permanent: cfg.Permanent,
		Poison:    l.poison,
		// between windows, and between a failed epoch and its retry,
		// records may wait
		Waiting:   func() bool { return f.s.topicPending(topic) },
		OnState:   l.setState,
		AfterFunc: func(d time.Duration, fn func()) func() bool { return f.afterFunc(d, fn) },
		OnFail: func(err error, records, attempt int) {
			f.retryLog.Log("topic", topic, "records", records, "attempt", attempt, "err", err)
		},
		OnRetry: func(err error, stuck bool) {
			if !stuck {
				f.metrics.ForwardErrors.Inc()
			}
		},
		OnRecover: func(attempts int) { f.recoverLog.Log("topic", topic, "attempts", attempts+1) },
		OnIsolate: func(records int, err error) {
			f.log.Warn("forwarder: kafka refused a window for good; sending its records one at a time to find those it refuses",
				"topic", topic, "records", records, "err", err)
		},
	})
	return l
}

func (f *Forwarder) start() {
	if reg := f.metrics.reg; reg != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_spool_oldest_unforwarded_seconds",
			Help: "Age of the oldest spooled record Kafka has not acknowledged (0 when none).",
		}, func() float64 { return f.OldestAge().Seconds() }))
		reg.MustRegister(topicCollector{f})
	}
	f.startLanes()
	go f.manage()
}

// manage starts a lane for each topic added, and stops the lanes of the
// topics forgotten, until Stop.
func (f *Forwarder) manage() {
	defer close(f.managed)
	t := time.NewTicker(min(f.idleAfter()/2, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-f.s.topicsChanged:
			f.startLanes()
		case <-t.C:
			f.forgetIdle()
		case <-f.stop:
			return
		}
	}
}

// startLanes starts a lane for every topic the spool knows that has none.
func (f *Forwarder) startLanes() {
	for _, t := range f.s.Topics() {
		f.mu.Lock()
		have := f.lanes[t] != nil || f.stopped
		f.mu.Unlock()
		if have {
			continue
		}
		l := f.newLane(t) // its engine calls OnState, which takes f.mu
		f.mu.Lock()
		f.lanes[t] = l
		f.mu.Unlock()
		go func() {
			defer close(l.done)
			defer l.src.close()
			l.e.Run()
		}()
	}
}

// forgetIdle stops the lanes of the topics the spool forgets.
func (f *Forwarder) forgetIdle() {
	f.mu.Lock()
	var idle []*lane
	for _, l := range f.lanes {
		if l.State() == StateIdle {
			idle = append(idle, l)
		}
	}
	f.mu.Unlock()
	for _, l := range idle {
		if !f.s.forget(l.topic, f.idleAfter()) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l.e.Stop(ctx)
		cancel()
		<-l.done
		f.mu.Lock()
		delete(f.lanes, l.topic)
		f.mu.Unlock()
		f.updateState()
		f.log.Info("forwarder: a topic had no records for a while; its lane stopped (it starts again with the topic's next record)", "topic", l.topic, "idle", f.idleAfter())
	}
}

func (f *Forwarder) idleAfter() time.Duration {
	if f.cfg.IdleAfter > 0 {
		return f.cfg.IdleAfter
	}
	return DefaultIdleAfter
}

// stateRank orders the states from the best to the worst: the forwarder's
// state is its worst lane's.
var stateRank = map[string]int{StateIdle: 0, StateForwarding: 1, StateStalled: 2, StateRetrying: 3, StateStuck: 4, StateStopped: -1}

// State is the forwarder's state: the worst of its topics' (idle,
// forwarding, stalled, retrying, stuck), or stopped.
func (f *Forwarder) State() string { return f.state.Load().(string) }

// OldestAge is the age of the oldest record not yet acknowledged by Kafka
// of all the topics (see TopicStates); 0 when none.
func (f *Forwarder) OldestAge() time.Duration {
	var age time.Duration
	for _, l := range f.lanesNow() {
		age = max(age, l.OldestAge())
	}
	return age
}

// TopicState is one topic's delivery.
type TopicState struct {
	Topic string `json:"topic"`
	// Forwarder is the topic's lane state: idle, forwarding, stalled,
	// retrying, stuck or stopped.
	Forwarder                string  `json:"forwarder"`
	OldestUnforwardedSeconds float64 `json:"oldest_unforwarded_seconds"`
}

// TopicStates returns each topic's delivery, by topic.
func (f *Forwarder) TopicStates() []TopicState {
	ls := f.lanesNow()
	out := make([]TopicState, 0, len(ls))
	for _, l := range ls {
		out = append(out, TopicState{Topic: l.topic, Forwarder: l.State(), OldestUnforwardedSeconds: l.OldestAge().Seconds()})
	}
	slices.SortFunc(out, func(a, b TopicState) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}

func (f *Forwarder) lanesNow() []*lane {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*lane, 0, len(f.lanes))
	for _, l := range f.lanes {
		out = append(out, l)
	}
	return out
}

// updateState sets the forwarder's state from its lanes' and its metric.
func (f *Forwarder) updateState() {
	f.mu.Lock()
	st := StateIdle
	if f.stopped {
		st = StateStopped
	} else {
		for _, l := range f.lanes {
			if ls := l.State(); stateRank[ls] > stateRank[st] {
				st = ls
			}
		}
	}
	changed := f.state.Load().(string) != st
	f.state.Store(st)
	if changed {
		f.setGauge(st)
	}
	f.mu.Unlock()
	if changed && f.stateHook != nil {
		f.stateHook(st)
	}
}

// setGauge sets the forwarder's state gauge to st.
func (f *Forwarder) setGauge(st string) {
	for _, s := range states {
		v := 0.0
		if s == st {
			v = 1
		}
		f.metrics.ForwarderState.WithLabelValues(s).Set(v)
	}
}

// State is the lane's state.
func (l *lane) State() string { return l.state.Load().(string) }

// OldestAge is the age of the oldest record of the lane's topic not yet
// acknowledged by Kafka that the lane is sending (or waiting to send
// again); 0 when it sends nothing. While stuck, the age of the record that
// waits: the last one read before it (the one that waits was appended no
// earlier), or when it first could not be sent.
func (l *lane) OldestAge() time.Duration {
	if l.State() == StateStuck {
		ns := l.lastAt.Load()
		if ns == 0 {
			ns = l.stuckAt.Load()
		}
		return time.Since(time.Unix(0, ns))
	}
	if t := l.e.Oldest(); !t.IsZero() {
		return time.Since(t)
	}
	return 0
}

// setState records the engine's new state; the engine's lock is held.
func (l *lane) setState(rs relay.State) {
	st := stateNames[rs]
	switch {
	case st != StateStuck:
		l.stuckAt.Store(0)
	case l.stuckAt.Load() == 0:
		l.stuckAt.Store(time.Now().UnixNano())
	}
	l.state.Store(st)
	if st != StateStopped { // a lane stopping leaves the forwarder's state to Stop and forgetIdle
		l.f.updateState()
	}
}

// topicCollector exports each topic's state and oldest record.
type topicCollector struct{ f *Forwarder }

var (
	topicStateDesc = prometheus.NewDesc("inlet_spool_topic_forwarder_state",
		"1 for each topic's forwarder state (idle, forwarding, stalled, retrying, stuck), 0 for the others.", []string{"topic", "state"}, nil)
	topicOldestDesc = prometheus.NewDesc("inlet_spool_topic_oldest_unforwarded_seconds",
		"Age of the topic's oldest spooled record Kafka has not acknowledged (0 when none).", []string{"topic"}, nil)
)

func (c topicCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- topicStateDesc
	ch <- topicOldestDesc
}

func (c topicCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ts := range c.f.TopicStates() {
		for _, s := range states {
			v := 0.0
			if s == ts.Forwarder {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(topicStateDesc, prometheus.GaugeValue, v, ts.Topic, s)
		}
		ch <- prometheus.MustNewConstMetric(topicOldestDesc, prometheus.GaugeValue, ts.OldestUnforwardedSeconds, ts.Topic)
	}
}

// producerSink is the engine's sink: the producer.
type producerSink struct{ p Producer }

func (k producerSink) Send(_ context.Context, recs []event.Record) (relay.Pending, error) {
	return k.p.Produce(recs)
}

// window is records read together, on their way to Kafka; the Meta of
// their relay.Batch.
type window struct {
	ents []Entry    // the batch's records, with their positions and times; none: a gap
	mem  *windowMem // what the records and ents live in
	next Pos        // the position after them
}

// source is the engine's source: the spool, read from the topic's
// position in windows of WindowBytes, the other topics' records skipped.
type source struct {
	l *lane
	r *Reader // nil: the next Next reads from the topic's position
	// done: the topic's records numbered below it are delivered (a
	// restart's topics file): skipped.
	done uint64
	// free holds the memory of windows Kafka acknowledged, for the reader
	// to read the next windows into (recycle); bounded by Windows.
	free chan *windowMem
	// readFails counts the failures in a row to read at readAt.
	readFails int
	readAt    Pos
}

func (src *source) Next(ctx context.Context) (relay.Batch[event.Record], error) {
	l, f := src.l, src.l.f
	if src.r == nil {
		at, done := f.s.topicStart(l.topic)
		src.open(at)
		src.done = done
	}
	entries, next, err := src.r.Next(ctx, f.cfg.WindowBytes)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, ErrClosed) {
			err = io.EOF
		} else if ctx.Err() == nil {
			return src.unreadable(err, next)
		}
		return relay.Batch[event.Record]{}, err
	}
	m := src.r.last
	// Keep the topic's records (all of them, with one topic).
	kept := entries[:0]
	for _, e := range entries {
		if e.Record.Topic == l.topic && e.Seq >= src.done {
			kept = append(kept, e)
		}
	}
	entries = kept
	if len(entries) == 0 {
		// Only other topics' records: a gap, settled in order.
		return relay.Batch[event.Record]{Meta: &window{mem: m, next: next}}, nil
	}
	l.lastAt.Store(entries[len(entries)-1].AppendedAt.UnixNano())
	if cap(m.recs) < len(entries) {
		m.recs = make([]event.Record, len(entries))
	}
	m.recs = m.recs[:len(entries)]
	for i := range entries {
		m.recs[i] = entries[i].Record
	}
	return relay.Batch[event.Record]{Records: m.recs, Meta: &window{ents: entries, mem: m, next: next}, Time: entries[0].AppendedAt}, nil
}

func (src *source) open(at Pos) {
	src.close()
	src.r = src.l.f.s.NewReader(at)
	src.r.free = src.free
}

func (src *source) close() {
	if src.r != nil {
		src.r.Close()
		src.r = nil
	}
}

// unreadable counts a failure to read the spool at pos (a damaged disk, or
// a bug): the engine reports StateStuck and tries again. At the
// QuarantineAfter-th in a row, once everything of the topic before pos is
// delivered (a window in flight before it could fail and be read again),
// it gives up the records that cannot be read there and yields them as a
// gap, settled in order. A failure for want of a file descriptor or memory
// is not counted: it says nothing of the records, which are read once the
// shortage ends.
func (src *source) unreadable(err error, pos Pos) (relay.Batch[event.Record], error) {
	l, f := src.l, src.l.f
	if exhausted(err) {
		f.readLog.Log("err", err, "attempt", "until the shortage ends")
		return relay.Batch[event.Record]{}, err
	}
	if src.readFails == 0 || pos != src.readAt {
		src.readFails, src.readAt = 0, pos
	}
	src.readFails++
	f.readLog.Log("topic", l.topic, "err", err, "attempt", src.readFails, "of", max(f.cfg.QuarantineAfter, 1))
	if src.readFails < max(f.cfg.QuarantineAfter, 1) || f.s.topicDelivered(l.topic).Seq < pos.Seq {
		return relay.Batch[event.Record]{}, err
	}
	next, _, serr := f.s.skipDamaged(pos, err)
	if serr != nil {
		f.readLog.Log("err", serr)
		return relay.Batch[event.Record]{}, serr
	}
	src.readFails = 0
	src.open(next)
	return relay.Batch[event.Record]{Meta: &window{next: next}}, nil
}

// Rewind makes the next Next read from the topic's position.
func (src *source) Rewind() error {
	src.close()
	return nil
}

// Settled records the delivery of records [from, to) of b in the spool
// (those settled with err were parked or dead-lettered, not counted as
// forwarded), and recycles the memory of a window Kafka acknowledged whole.
func (src *source) Settled(b relay.Batch[event.Record], from, to int, err error) {
	f := src.l.f
	w := b.Meta.(*window)
	next := w.next
	if to > 0 && to < len(w.ents) {
		next = w.ents[to-1].Next
	}
	if aerr := f.s.ackTopic(src.l.topic, next); aerr != nil {
		f.ackLog.Log("err", aerr)
	}
	if err == nil {
		f.metrics.Forwarded.Add(float64(to - from))
		if from == 0 && to == len(w.ents) && w.mem != nil {
			// The producer holds none of the window's memory (a gap's was
			// never handed over): the next windows may be read into it.
			recycle(src.free, w.mem)
		}
	}
}

// poison hands the i-th record of b, refused for good with cause, to
// Poison, and parks it if Poison refuses it for good too (or there is no
// Poison). It returns an error when the record is in neither place: a
// transient failure of Poison, or parking failed (a *relay.StuckError).
func (l *lane) poison(ctx context.Context, b relay.Batch[event.Record], i int, cause error) error {
	f := l.f
	e := b.Meta.(*window).ents[i]
	reason := cause.Error()
	if f.cfg.Poison != nil {
		perr := f.cfg.Poison(ctx, e, cause)
		if perr == nil {
			f.poisonLog.Log("topic", e.Record.Topic, "event_id", e.Record.EventID, "seq", e.Seq, "err", cause)
			return nil
		}
		if ctx.Err() != nil {
			return perr
		}
		if !f.cfg.Permanent(perr) {
			// Retried, but not for ever: a dead-letter topic that is
			// missing must not block what follows.
			if l.poisonSeq != e.Seq {
				l.poisonSeq, l.poisonFails = e.Seq, 0
			}
			if l.poisonFails++; l.poisonFails < max(f.cfg.QuarantineAfter, 1) {
				return fmt.Errorf("handing a record kafka refused for good (%w) to the dead-letter path: %w", cause, perr)
			}
			reason = fmt.Sprintf("%v; the dead-letter path failed %d times: %v", cause, l.poisonFails, perr)
		} else {
			reason = fmt.Sprintf("%v; the dead-letter path refused it too: %v", cause, perr)
		}
	}
	if err := f.s.park(e.Record, e.AppendedAt, reason); err != nil {
		f.readLog.Log("err", err)
		return &relay.StuckError{Err: err}
	}
	f.parkLog.Log("topic", e.Record.Topic, "event_id", e.Record.EventID, "seq", e.Seq, "reason", reason,
		"file", filepath.Join(f.s.Dir(), parkedFile))
	return nil
}

// Stop stops the forwarder: it produces nothing more, lets the windows in
// flight be acknowledged until ctx ends, then abandons them (they are sent
// again on the next start); a failed window is not retried. It returns once
// every lane has stopped, and at the latest a fraction of a second after
// ctx ended, even if the producer's Produce does not return: the forwarder
// then records no delivery after Stop returned, so the spool may be closed,
// and a lane's goroutine ends once Produce returns. It is safe to call more
// than once, and concurrently.
func (f *Forwarder) Stop(ctx context.Context) {
	f.mu.Lock()
	first := !f.stopped
	f.stopped = true
	f.mu.Unlock()
	if first {
		close(f.stop)
	}
	<-f.managed
	lanes := f.lanesNow()
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch l.e.Stop(ctx) {
			case relay.ErrAbandoned:
				f.log.Warn("forwarder: shutdown deadline with windows in flight; they are sent again on the next start", "topic", l.topic)
				<-l.done
			case relay.ErrLeftBehind:
				f.log.Error("forwarder: the producer did not return by the shutdown deadline; leaving it behind; what it had is sent again on the next start", "topic", l.topic)
			default:
				<-l.done
			}
		}()
	}
	wg.Wait()
	f.updateState()
	if first {
		go func() {
			for _, l := range lanes {
				<-l.done
			}
			close(f.done)
		}()
	}
}
