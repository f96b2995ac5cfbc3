// Package filewatch tells when a file inlet reloads while it runs has
// changed, and calls the reload every interval until closed. It polls the
// file's stat rather than use inotify: polling works the same on every
// filesystem, in containers and on Kubernetes ConfigMap and Secret volumes.
package filewatch

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// stamp is what a look at a file sees; the zero stamp is a file missing
// or unreadable. The inode tells a file replaced by rename from the one
// before even when both have the same size and modification time.
type stamp struct {
	exists bool
	mod    time.Time
	size   int64
	ino    uint64
}

func look(path string) (s stamp) {
	if fi, err := os.Stat(path); err == nil {
		s = stamp{exists: true, mod: fi.ModTime(), size: fi.Size()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s.ino = st.Ino
		}
	}
	return s
}

// File is a file watched for changes: its path and what the last look
// saw. It is not safe for concurrent use: its owner holds a lock across
// Changed and the reload it leads to, so that reloads are one at a time.
type File struct {
	path string
	at   stamp
}

// NewFile looks at the file at path now: Changed reports changes since.
func NewFile(path string) *File { return &File{path: path, at: look(path)} }

// Changed looks at the file and reports whether it changed (written,
// touched, replaced, removed, restored) since the last look, or force. A
// change is reported once: the look is remembered either way.
func (f *File) Changed(force bool) bool {
	st := look(f.path)
	changed := force || st != f.at
	f.at = st
	return changed
}

// Poller calls a function every interval, from a goroutine of its own,
// until Close. The zero Poller is ready to Start.
type Poller struct {
	mu   sync.Mutex // guards stop and done; Close holds it until the goroutine ends
	stop chan struct{}
	done chan struct{}
}

// Start calls fn every interval until Close; the calls do not overlap,
// and fn must not call Close. Start is not called again until Close.
func (p *Poller) Start(interval time.Duration, fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stop, done := make(chan struct{}), make(chan struct{})
	p.stop, p.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// Close stops the calls and waits for one running to return. It may be
// called when Start was not, and more than once; Start may follow it.
func (p *Poller) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop, p.done = nil, nil
	}
}
