package spool

import (
	"io"
	"os"
)

// FileSystem is how the spool reaches its files: Config.FS, the operating
// system when nil. It is a fault-injection seam: a test wraps it to fail a
// chosen write, fsync, rename or create (as Prometheus tsdb/wlog's
// faultySegmentFile does), to prove what the spool, and what uses it, do
// then.
type FileSystem interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir fsyncs the directory dir, making the files created, renamed
	// and removed in it durable.
	SyncDir(dir string) error
}

// File is an open segment or cursor file. Segments are written with
// Write (opened O_APPEND), the cursor with WriteAt, in place.
type File interface {
	io.Writer
	io.WriterAt
	io.ReaderAt
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// OS is the operating system's file system.
var OS FileSystem = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
