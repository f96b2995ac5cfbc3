package spool

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/event"
)

func TestSyncPause(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		procs     int
		took, ago time.Duration
		want      time.Duration
	}{
		{1, ms / 2, 0, ms / 2},           // right after an fsync: as long as it took
		{1, ms / 2, ms / 5, ms/2 - ms/5}, // part of that has passed
		{1, ms / 2, ms, -ms / 2},         // all of it: none
		{1, 20 * ms, 0, maxSyncPause},    // a slow fsync: at most maxSyncPause
		{1, 0, time.Hour, -time.Hour},    // the first group, or after a quiet spell
		{2, ms / 2, 0, 0},                // other Ps read requests meanwhile
		{8, 20 * ms, 0, 0},
	}
	for _, c := range cases {
		if got := syncPause(c.procs, c.took, c.ago); got != c.want {
			t.Errorf("syncPause(%d, %v, %v) = %v, want %v", c.procs, c.took, c.ago, got, c.want)
		}
	}
}

// slowSyncFS is the OS's file system with each fsync of a segment taking
// at least took, recording when each began and ended.
type slowSyncFS struct {
	osFS
	took  time.Duration
	mu    sync.Mutex
	spans [][2]time.Time
}

func (f *slowSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.osFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return file, err
	}
	return &slowSyncFile{File: file, fs: f}, nil
}

type slowSyncFile struct {
	File
	fs *slowSyncFS
}

func (f *slowSyncFile) Sync() error {
	start := time.Now()
	time.Sleep(f.fs.took)
	err := f.File.Sync()
	f.fs.mu.Lock()
	f.fs.spans = append(f.fs.spans, [2]time.Time{start, time.Now()})
	f.fs.mu.Unlock()
	return err
}

// TestGroupCommitPausesWithOneP: with GOMAXPROCS=1 and appends arriving
// all the time, the writer leaves at least as long as the last fsync took
// (at most maxSyncPause) between the end of an fsync and the start of the
// next.
func TestGroupCommitPausesWithOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const took = 3 * time.Millisecond // more than maxSyncPause
	fsys := &slowSyncFS{took: took}
	s, _, _ := openOn(t, testConfig(t.TempDir()), fsys)
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				if err := s.Append(context.Background(), []event.Record{rec(fmt.Sprintf("g%d-%d", g, i))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	fsys.mu.Lock()
	spans := fsys.spans
	fsys.mu.Unlock()
	if len(spans) < 10 {
		t.Fatalf("%d fsyncs in 300 ms, want more", len(spans))
	}
	// Sleeps never end early: every gap is at least maxSyncPause (less a
	// little for the clock reads around them).
	short := 0
	for i := 1; i < len(spans); i++ {
		if gap := spans[i][0].Sub(spans[i-1][1]); gap < maxSyncPause-maxSyncPause/10 {
			short++
			t.Logf("fsync %d began %v after the one before ended", i, gap)
		}
	}
	if short > 0 {
		t.Fatalf("%d of %d fsyncs began less than %v after the one before", short, len(spans)-1, maxSyncPause)
	}
}
