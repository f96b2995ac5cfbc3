package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// Per-topic delivery positions.
//
// The spool is one log, but each topic is delivered on its own: the
// forwarder runs one relay per topic, each reading the log from its own
// position and skipping the other topics' records, so a topic Kafka does
// not take (no leader, deleted, access denied) holds back its own records
// only. Each topic has a position: every record before it was read by its
// relay and, if of its topic, delivered. The spool's delivered position
// (Delivered, the cursor file) is the lowest of them: a segment is deleted
// once every topic's position is past it.
//
// The topics file (topicsName) holds each topic with the number below
// which its records are delivered, rewritten (a temporary file renamed
// over it) at most every tidyEvery, at Close, and whenever a topic is
// added. A topic is added before the first Append with a record of it is
// accepted, so the file names every topic whose records may wait in the
// spool. On Open each topic's relay starts at the cursor (the lowest
// position) and skips the records of its topic numbered below its number:
// a stale file only sends records again, never skips one. Without a
// topics file (a spool of an older version, or the file lost or
// unreadable) the records not yet delivered are read once to find their
// topics, and each is sent from the cursor.
//
// A topic whose records are all delivered and that has had none for
// ForwarderConfig.IdleAfter is forgotten: its relay stops, and it leaves the file. At most
// Config.MaxTopics topics are known at once; past that, an Append with a
// record of a new topic fails with ErrTooManyTopics until one is
// forgotten. --spool-max-bytes bounds the whole spool: a topic that stays
// stuck fills it, and then every topic's appends fail with ErrFull (one
// disk, one bound; the topics that flow keep draining their part, but a
// segment is freed only once the stuck topic's records in it are
// delivered).
const topicsName = "topics"

// ErrTooManyTopics: the spool knows Config.MaxTopics topics with records
// waiting or had records lately; an append to another topic is refused
// until one of them is forgotten.
var ErrTooManyTopics = errors.New("spool: too many topics")

// DefaultMaxTopics bounds the topics known at once (Config.MaxTopics 0).
// Each busy topic costs a relay reading the log and up to
// WindowBytes × Windows of memory.
const DefaultMaxTopics = 64

// DefaultIdleAfter is how long a topic whose records are all delivered
// waits for another record before it is forgotten
// (ForwarderConfig.IdleAfter 0).
const DefaultIdleAfter = 10 * time.Minute

// topicPos is where a topic's delivery stands.
type topicPos struct {
	pos  Pos       // every record before it was read by the topic's relay, and delivered if the topic's
	done uint64    // the topic's records numbered below it are delivered: skipped when read
	seen time.Time // when an Append last had a record of it
}

func (s *Spool) maxTopics() int {
	if s.cfg.MaxTopics > 0 {
		return s.cfg.MaxTopics
	}
	return DefaultMaxTopics
}

// unknownTopic returns the first topic of recs the spool does not know, and
// marks the others seen. s.mu must be held.
func (s *Spool) unknownTopic(recs []event.Record, now time.Time) (string, bool) {
	prev := ""
	for i := range recs {
		t := recs[i].Topic
		if i > 0 && t == prev {
			continue
		}
		prev = t
		tp := s.topics[t]
		if tp == nil {
			return t, true
		}
		tp.seen = now
	}
	return "", false
}

// register adds topic t, starting at the delivered position and skipping
// the records numbered before now (none of them is t's), and writes the
// topics file before anything of t is accepted.
func (s *Spool) register(t string) error {
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	s.mu.Lock()
	if s.topics[t] != nil {
		s.mu.Unlock()
		return nil
	}
	if len(s.topics) >= s.maxTopics() {
		n := len(s.topics)
		s.mu.Unlock()
		return fmt.Errorf("%w: %d topics have records waiting or had records lately; %q must wait until one is forgotten", ErrTooManyTopics, n, t)
	}
	tp := &topicPos{pos: s.acked, done: s.nextSeq, seen: time.Now()}
	file := s.topicsSnapshot()
	s.mu.Unlock()
	file[t] = tp.done
	if err := s.writeTopics(file); err != nil {
		return fmt.Errorf("%w: recording the new topic %q: %w", ErrWrite, t, err)
	}
	s.mu.Lock()
	s.topics[t] = tp
	s.mu.Unlock()
	select {
	case s.topicsChanged <- struct{}{}:
	default:
	}
	return nil
}

// forget drops topic t if all its records are delivered, nothing is being
// appended, and it had no record for idle; it reports whether it did.
func (s *Spool) forget(t string, idle time.Duration) bool {
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	tp := s.topics[t]
	if tp == nil || time.Since(tp.seen) < idle || s.reserved > 0 || s.unforwardedFrom(tp.pos.Seq) > 0 {
		return false
	}
	delete(s.topics, t)
	s.topicsDirty = true
	if low := s.low(); low.Seq > s.acked.Seq {
		s.acked = low // tidy deletes what it frees
	}
	return true
}

// low is the lowest topic position; the delivered position when no topic
// is known. s.mu must be held.
func (s *Spool) low() Pos {
	first, low := true, s.acked
	for _, tp := range s.topics {
		if first || tp.pos.Seq < low.Seq {
			first, low = false, tp.pos
		}
	}
	return low
}

// ackTopic records that topic t's relay read, and delivered, everything
// before p, and then, if the lowest position moved, what Ack does.
func (s *Spool) ackTopic(t string, p Pos) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	tp := s.topics[t]
	if tp == nil || p.Seq < tp.pos.Seq {
		s.mu.Unlock()
		return nil
	}
	tp.pos = p
	s.topicsDirty = true
	low := s.low()
	if low.Seq <= s.acked.Seq {
		s.mu.Unlock()
		return nil
	}
	s.acked = low
	s.mu.Unlock()
	return s.settle()
}

// topicStart returns where topic t's relay starts reading, and the number
// below which it skips t's records.
func (s *Spool) topicStart(t string) (Pos, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tp := s.topics[t]; tp != nil {
		return tp.pos, tp.done
	}
	return s.acked, 0
}

// topicDelivered is topic t's position.
func (s *Spool) topicDelivered(t string) Pos {
	p, _ := s.topicStart(t)
	return p
}

// topicPending reports whether records after topic t's position wait to be
// read by its relay.
func (s *Spool) topicPending(t string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	tp := s.topics[t]
	return tp != nil && s.unforwardedFrom(tp.pos.Seq) > 0
}

// Topics returns the topics known, sorted.
func (s *Spool) Topics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.topics))
	for t := range s.topics {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// topicsSnapshot is what the topics file is to say now. s.mu must be held.
func (s *Spool) topicsSnapshot() map[string]uint64 {
	m := make(map[string]uint64, len(s.topics)+1)
	for t, tp := range s.topics {
		m[t] = max(tp.done, tp.pos.Seq)
	}
	s.topicsDirty = false
	return m
}

// topicsJSON is the topics file.
type topicsJSON struct {
	Version int `json:"version"`
	// Topics maps each topic to the number below which its records were
	// delivered.
	Topics map[string]uint64 `json:"topics"`
}

// writeTopics writes the topics file: a temporary file, fsynced, renamed
// over it, and the directory fsynced. s.topicsMu must be held.
func (s *Spool) writeTopics(m map[string]uint64) error {
	b, err := json.Marshal(topicsJSON{Version: 1, Topics: m})
	if err != nil {
		return err
	}
	path := filepath.Join(s.cfg.Dir, topicsName)
	f, err := s.fs.OpenFile(path+".tmp", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(path+".tmp", path)
	}
	if err == nil {
		err = s.fs.SyncDir(s.cfg.Dir)
	}
	return err
}

// saveTopics writes the topics file if a position moved since it was last
// written; a failure is logged (a stale file only sends records again).
func (s *Spool) saveTopics(force bool) {
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	s.mu.Lock()
	if !s.topicsDirty && !force {
		s.mu.Unlock()
		return
	}
	m := s.topicsSnapshot()
	s.mu.Unlock()
	if err := s.writeTopics(m); err != nil {
		s.mu.Lock()
		s.topicsDirty = true
		s.mu.Unlock()
		s.metrics.CursorErrors.Inc()
		s.topicsLog.Log("err", err)
	}
}

// loadTopics restores the topics after recover (s.acked is the checked
// cursor): from the topics file, or, without one, by reading the records
// not yet delivered. Then it writes the file, so that it speaks of this
// run's numbers (numbering may start again once the spool is empty).
func (s *Spool) loadTopics() error {
	s.topics = map[string]*topicPos{}
	now := time.Now()
	m, err := s.readTopics()
	write := false
	switch {
	case err == nil:
		for t, d := range m {
			done := d
			if done > s.nextSeq {
				done = 0 // numbered in an earlier run: send again
			}
			if s.repairedBase != 0 && done > s.repairedBase {
				done = s.repairedBase // numbers after a cut move: send again
			}
			write = write || done != d
			s.topics[t] = &topicPos{pos: s.acked, done: done, seen: now}
		}
	case errors.Is(err, os.ErrNotExist) && s.unforwarded() == 0:
	default:
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("spool: unreadable topics file; reading the records not yet delivered to find their topics (each is sent from the cursor: duplicates, nothing skipped)", "err", err)
		}
		for _, t := range s.scanTopics() {
			s.topics[t] = &topicPos{pos: s.acked, seen: now}
		}
		write = true
	}
	if !write {
		return nil
	}
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	s.mu.Lock()
	snap := s.topicsSnapshot()
	s.mu.Unlock()
	if err := s.writeTopics(snap); err != nil {
		// The file must not speak of another run's numbers: without it,
		// the next start reads the records to find their topics.
		if rerr := s.fs.Remove(filepath.Join(s.cfg.Dir, topicsName)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("spool: writing the topics file: %w; removing the old one: %w", err, rerr)
		}
		s.log.Warn("spool: writing the topics file; tried again every second", "err", err)
		s.mu.Lock()
		s.topicsDirty = true
		s.mu.Unlock()
	}
	return nil
}

// readTopics reads the topics file.
func (s *Spool) readTopics() (map[string]uint64, error) {
	f, err := s.fs.OpenFile(filepath.Join(s.cfg.Dir, topicsName), os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var tj topicsJSON
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, err
	}
	if tj.Version != 1 {
		return nil, fmt.Errorf("version %d", tj.Version)
	}
	return tj.Topics, nil
}

// scanTopics reads the records after the delivered position and returns
// their topics. A segment it cannot read is passed over (its records are
// the forwarder's to quarantine; a topic only they hold is not found).
func (s *Spool) scanTopics() []string {
	seen := map[string]bool{}
	var out []string
	r := s.NewReader(s.acked)
	defer func() { r.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Next returns what is there, then ctx's error
	for {
		es, _, err := r.Next(ctx, 1<<20)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			s.log.Error("spool: reading for the topics of the records not yet delivered; passing over the rest of the segment", "err", err)
			s.mu.Lock()
			var next *segment
			for _, seg := range s.segs {
				if seg.base > r.pos.Seg {
					next = seg
					break
				}
			}
			s.mu.Unlock()
			if next == nil {
				break
			}
			r.Close()
			r = s.NewReader(Pos{Seg: next.base, Seq: next.base})
			continue
		}
		for _, e := range es {
			if !seen[e.Record.Topic] {
				seen[e.Record.Topic] = true
				out = append(out, e.Record.Topic)
			}
		}
	}
	return out
}
