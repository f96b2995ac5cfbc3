package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

// HeaderParkedReason carries, on a parked record, why Kafka refused it.
const HeaderParkedReason = "inlet-parked-reason"

// parkedFile is where parked records go, under the spool's directory: one
// append-only file in the segment format (format.go), each record with its
// reason in a HeaderParkedReason header, so that the spool's decoder reads
// it back. It is not counted in MaxBytes.
const parkedFile = "parked/records"

// park appends rec (appended at at), with why Kafka refused it, to the
// parked file and fsyncs it: a record Kafka refuses for good, and the
// dead-letter topic too, is kept there rather than block delivery. It is
// safe for concurrent use.
func (s *Spool) park(rec event.Record, at time.Time, reason string) error {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	path := filepath.Join(s.cfg.Dir, parkedFile)
	if s.parked == nil {
		dir := filepath.Dir(path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("spool: parking a record: %w", err)
		}
		f, err := s.fs.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("spool: parking a record: %w", err)
		}
		if err := s.fs.SyncDir(dir); err != nil {
			f.Close()
			return fmt.Errorf("spool: parking a record: %w", err)
		}
		if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
			f.Close()
			return fmt.Errorf("spool: parking a record: %w", err)
		}
		s.parked = f
	}
	fi, err := s.parked.Stat()
	if err != nil {
		return fmt.Errorf("spool: parking a record: %w", err)
	}
	rec.Headers = append(slices.Clip(rec.Headers), event.Header{Key: HeaderParkedReason, Value: []byte(reason)})
	if _, err = s.parked.Write(appendFrame(nil, &rec, at)); err == nil {
		err = s.parked.Sync()
	}
	if err != nil {
		// Whole frames only; if even that fails, start a new file handle
		// next time (the reader of the file resyncs on a torn frame).
		if terr := s.parked.Truncate(fi.Size()); terr != nil {
			s.parked.Close()
			s.parked = nil
		}
		return fmt.Errorf("spool: parking a record: %w", err)
	}
	s.parkedN.Add(1)
	s.metrics.Parked.Inc()
	return nil
}
