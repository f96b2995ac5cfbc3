package logship

import (
	"bufio"
	"io"
	"os"
	"sync"
	"time"
)

// fileSink writes events to w, buffered, for FileHandler.
type fileSink struct {
	mu   sync.Mutex
	w    io.Writer
	bw   *bufio.Writer // nil: unbuffered
	err  error
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func newFileSink(w io.Writer, bufSize int, every time.Duration) *fileSink {
	f := &fileSink{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	if bufSize <= 0 {
		close(f.done)
		return f
	}
	f.bw = bufio.NewWriterSize(w, bufSize)
	go func() {
		defer close(f.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				f.mu.Lock()
				f.flush()
				f.mu.Unlock()
			case <-f.stop:
				return
			}
		}
	}()
	return f
}

// flush needs f.mu held.
func (f *fileSink) flush() {
	if f.bw != nil && f.err == nil {
		f.err = f.bw.Flush()
	}
}

func (f *fileSink) put(ev []byte, urgent bool) {
	ev = append(ev, '\n')
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	if f.bw == nil {
		_, f.err = f.w.Write(ev)
		return
	}
	_, f.err = f.bw.Write(ev)
	if urgent {
		f.flush()
	}
}

func (f *fileSink) error() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fileSink) close() error {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flush()
	if of, ok := f.w.(*os.File); ok && f.err == nil {
		f.err = of.Sync()
	}
	return f.err
}
