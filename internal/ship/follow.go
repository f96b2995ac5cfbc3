package ship

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"
)

// filePos is a position in a followed file: which file (its inode), how
// many times the path was rotated or truncated (Gen: a line's id is
// path, inode, Gen and offset, the same when a restart sends it again),
// and the byte after the last line acknowledged.
type filePos struct {
	Inode  uint64 `json:"inode"`
	Gen    uint64 `json:"gen"`
	Offset int64  `json:"offset"`
}

// checkpoint keeps a filePos in a file, replaced atomically.
type checkpoint struct{ path string }

func (c *checkpoint) load() (filePos, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return filePos{}, nil
	}
	var p filePos
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		return filePos{}, fmt.Errorf("ship: reading checkpoint %s: %w", c.path, err)
	}
	return p, nil
}

func (c *checkpoint) save(p filePos) error {
	b, _ := json.Marshal(p)
	tmp := c.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}

// follower reads a file's lines like tail -F: at its end it waits; when
// the path names another file (rotation) it reads the old one to its end
// and goes on with the new one from its start; when the file shrinks
// (truncation) it starts again from the start.
type follower struct {
	path string
	poll time.Duration
	log  *slog.Logger

	f   *os.File
	ino uint64
	gen uint64
	off int64 // bytes of f consumed, up to the end of what sp holds
	br  *bufio.Reader
	sp  lineSplitter
}

func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func (fl *follower) open(start filePos) error {
	f, err := os.Open(fl.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	fl.f, fl.ino, fl.off, fl.sp = f, inodeOf(fi), 0, lineSplitter{max: maxLineBytes}
	fl.gen = start.Gen + 1 // another file, or this one truncated
	if start.Inode == fl.ino && start.Offset <= fi.Size() {
		if _, err := f.Seek(start.Offset, io.SeekStart); err != nil {
			f.Close()
			return err
		}
		fl.off, fl.gen = start.Offset, start.Gen
	}
	fl.br = bufio.NewReaderSize(f, 64<<10)
	return nil
}

func (fl *follower) id(lineEnd int64) string {
	h := sha256.Sum256([]byte(fl.path))
	return hex.EncodeToString(h[:6]) + "-" + strconv.FormatUint(fl.ino, 10) + "-" + strconv.FormatUint(fl.gen, 10) + "-" + strconv.FormatInt(lineEnd, 10)
}

func (fl *follower) run(ctx context.Context, start filePos, enc *lineEncoder, out chan<- record) error {
	defer close(out)
	for {
		err := fl.open(start)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select { // not there yet
		case <-time.After(fl.poll):
		case <-ctx.Done():
			return nil
		}
	}
	defer func() { fl.f.Close() }()
	// emit sends a line (or a piece of one) with its position: the byte
	// after it, held bytes before what was consumed.
	emit := func(line []byte, held int) bool {
		end := fl.off - int64(held)
		select {
		case out <- record{event: enc.encode(line, fl.id(end)), pos: filePos{Inode: fl.ino, Gen: fl.gen, Offset: end}}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		chunk, err := fl.br.ReadSlice('\n')
		fl.off += int64(len(chunk))
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading %s: %w", fl.path, err)
		}
		if !fl.sp.add(chunk, err == nil, emit) {
			return nil
		}
		if !errors.Is(err, io.EOF) {
			continue
		}
		// At the end: rotated, truncated, or nothing new yet?
		fi, serr := os.Stat(fl.path)
		switch {
		case serr == nil && inodeOf(fi) != fl.ino:
			// Rotated: what was appended to the old file before the
			// check is read to its end; a last line without a newline
			// is a line.
			for {
				chunk, err := fl.br.ReadSlice('\n')
				fl.off += int64(len(chunk))
				if !fl.sp.add(chunk, err == nil, emit) {
					return nil
				}
				if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
					break
				}
			}
			if !fl.sp.flush(emit) {
				return nil
			}
			fl.log.Info("ship: file rotated; following the new one", "path", fl.path)
			fl.f.Close()
			if err := fl.open(filePos{Gen: fl.gen}); err != nil {
				return err
			}
			continue
		case serr == nil && fi.Size() < fl.off:
			fl.log.Info("ship: file truncated; reading it from its start", "path", fl.path, "size", fi.Size(), "was", fl.off)
			if _, err := fl.f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			fl.off, fl.sp.partial = 0, nil
			fl.gen++
			fl.br.Reset(fl.f)
			continue
		}
		select {
		case <-time.After(fl.poll):
		case <-ctx.Done():
			return nil
		}
	}
}
