package filewatch

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that every Poller's goroutine ends with its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestChanged takes a file through the changes a reload must see, each
// reported once, and the looks that must report none.
func TestChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, tmp := filepath.Join(dir, "f"), filepath.Join(dir, "f.new")
	then := time.Now().Add(-time.Hour).Truncate(time.Second)
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(t *testing.T, p string) {
		t.Helper()
		if err := os.Chtimes(p, then, then); err != nil {
			t.Fatal(err)
		}
	}
	write(t, path, "one")
	f := NewFile(path)
	for _, s := range []struct {
		name  string
		do    func(t *testing.T)
		force bool
		want  bool
	}{
		{name: "unchanged"},
		{name: "forced", force: true, want: true},
		{name: "rewritten", do: func(t *testing.T) { write(t, path, "two!") }, want: true},
		{name: "looked at again"},
		{name: "touched", do: func(t *testing.T) { touch(t, path) }, want: true},
		{name: "replaced by rename with the same size and time", do: func(t *testing.T) {
			write(t, tmp, "thr3")
			touch(t, tmp)
			a, errA := os.Stat(path)
			b, errB := os.Stat(tmp)
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime()) {
				t.Fatalf("%d bytes at %v and %d at %v: the test needs them equal", a.Size(), a.ModTime(), b.Size(), b.ModTime())
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, want: true},
		{name: "removed", do: func(t *testing.T) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, want: true},
		{name: "still missing"},
		{name: "missing, forced", force: true, want: true},
		{name: "restored", do: func(t *testing.T) { write(t, path, "one") }, want: true},
	} {
		t.Run(s.name, func(t *testing.T) {
			if s.do != nil {
				s.do(t)
			}
			if got := f.Changed(s.force); got != s.want {
				t.Errorf("Changed(%v) = %v, want %v", s.force, got, s.want)
			}
		})
	}
}

// TestChangedSymlinkSwap: a Kubernetes ConfigMap or Secret volume holds
// the file as name -> ..data/name, and an update writes a new directory
// and swaps the ..data symlink to it. A file of the same size and time is
// seen as changed (the inode), once.
func TestChangedSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	then := time.Now().Add(-time.Hour).Truncate(time.Second)
	version := func(name, content string) {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, "tls.crt")
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, then, then); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "one")
	path := filepath.Join(dir, "tls.crt")
	if err := os.Symlink(filepath.Join("..data", "tls.crt"), path); err != nil {
		t.Fatal(err)
	}
	f := NewFile(path)
	if f.Changed(false) {
		t.Fatal("Changed before the swap")
	}
	version("..v2", "two") // same size, same time
	if !f.Changed(false) {
		t.Fatal("the swap to a file of the same size and time is not seen")
	}
	if f.Changed(false) {
		t.Fatal("the swap is reported twice")
	}
}

// TestPoller has a Poller call fn, closed, closed again, and started
// again; and closed when never started.
func TestPoller(t *testing.T) {
	t.Parallel()
	var p Poller
	p.Close()
	calls := make(chan struct{}, 1)
	for range 2 {
		p.Start(time.Millisecond, func() {
			select {
			case calls <- struct{}{}:
			default:
			}
		})
		for range 3 {
			<-calls
		}
		p.Close()
		p.Close()
		select { // a call left over: the next round counts its own
		case <-calls:
		default:
		}
	}
}

// TestPollerCloseWaits has Close begin while fn runs: when Close returns,
// fn has returned.
func TestPollerCloseWaits(t *testing.T) {
	t.Parallel()
	var p Poller
	var once sync.Once
	var returned atomic.Bool
	entered := make(chan struct{})
	p.Start(time.Millisecond, func() {
		once.Do(func() {
			close(entered)
			<-p.stop // Close has begun
			returned.Store(true)
		})
	})
	<-entered
	p.Close()
	if !returned.Load() {
		t.Fatal("Close returned while fn ran")
	}
}
