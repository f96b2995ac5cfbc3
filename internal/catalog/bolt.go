package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// BoltStore is the embedded catalog: one bbolt file, for a single inlet
// process (bbolt locks the file; a second process gets a clear error).
// Entries live in bucket "entries" under "<group>\x00<name>", so the
// bucket's byte order is List's (group, name) order; codes come from the
// bucket's sequence. Each Fill and Put is one read-write transaction, so
// re-checking, taking the code and writing are atomic.
type BoltStore struct {
	db   *bolt.DB
	path string
}

var bucketEntries = []byte("entries")

// openTimeout is how long OpenBolt waits for another process's file lock.
const openTimeout = time.Second

// OpenBolt opens (creating, with its directory) the embedded store at path.
func OpenBolt(path string) (*BoltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("catalog: creating the directory of the embedded store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: openTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (its file lock was not had within %v): stop it, or give this one another --data-dir", ErrLocked, path, openTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: opening the embedded store %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketEntries)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: preparing the embedded store %s: %w", path, err)
	}
	return &BoltStore{db: db, path: path}, nil
}

func boltKey(k Key) []byte { return []byte(member(k)) }

func boltGet(b *bolt.Bucket, k Key) (Entry, bool, error) {
	v := b.Get(boltKey(k))
	if v == nil {
		return Entry{}, false, nil
	}
	var e Entry
	if err := json.Unmarshal(v, &e); err != nil {
		return Entry{}, false, fmt.Errorf("catalog: the stored entry %s/%s is malformed: %v", k.Group, k.Name, err)
	}
	return e, true, nil
}

func boltPut(b *bolt.Bucket, e Entry) error {
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("%w: encoding the entry: %v", ErrInvalid, err)
	}
	return b.Put(boltKey(e.Key()), v)
}

// Get implements Store.
func (s *BoltStore) Get(_ context.Context, k Key) (e Entry, err error) {
	var ok bool
	err = s.db.View(func(tx *bolt.Tx) error {
		e, ok, err = boltGet(tx.Bucket(bucketEntries), k)
		return err
	})
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s/%s", ErrNotFound, k.Group, k.Name)
	}
	return e, err
}

// GetMany implements Store in one read transaction.
func (s *BoltStore) GetMany(_ context.Context, keys []Key) ([]Entry, []bool, error) {
	entries, found := make([]Entry, len(keys)), make([]bool, len(keys))
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		for i, k := range keys {
			e, ok, err := boltGet(b, k)
			if err != nil {
				return err
			}
			entries[i], found[i] = e, ok
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return entries, found, nil
}

// Fill implements Store in one read-write transaction.
func (s *BoltStore) Fill(ctx context.Context, k Key, now time.Time) (Entry, error) {
	if e, err := s.Get(ctx, k); !errors.Is(err, ErrNotFound) {
		return e, err
	}
	var out Entry
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		e, ok, err := boltGet(b, k)
		if err != nil || ok {
			out = e
			return err
		}
		code, err := b.NextSequence()
		if err != nil {
			return err
		}
		out = Entry{Group: k.Group, Name: k.Name, Code: int64(code), Status: StatusObserved, Created: now, Updated: now}
		return boltPut(b, out)
	})
	if err != nil {
		return Entry{}, fmt.Errorf("catalog: filling %s/%s in %s: %w", k.Group, k.Name, s.path, err)
	}
	return out, nil
}

// Put implements Store in one read-write transaction.
func (s *BoltStore) Put(_ context.Context, e Entry) (Entry, error) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		old, ok, err := boltGet(b, e.Key())
		if err != nil {
			return err
		}
		e, err = boltReplace(b, old, ok, e)
		return err
	})
	if err != nil {
		return Entry{}, fmt.Errorf("catalog: writing %s/%s to %s: %w", e.Group, e.Name, s.path, err)
	}
	return e, nil
}

// boltReplace writes e over old (ok: there is one) as Put does: an existing
// entry keeps its code and created, a new one gets the next code.
func boltReplace(b *bolt.Bucket, old Entry, ok bool, e Entry) (Entry, error) {
	if ok {
		e.Code, e.Created = old.Code, old.Created
	} else {
		code, err := b.NextSequence()
		if err != nil {
			return Entry{}, err
		}
		e.Code = int64(code)
		if e.Created.IsZero() {
			e.Created = e.Updated
		}
	}
	return e, boltPut(b, e)
}

// fnError carries an error of an Update's fn out of a transaction, so
// that it is returned as it is.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// Update implements Store in one read-write transaction: fn runs once.
func (s *BoltStore) Update(_ context.Context, k Key, fn func(Entry, bool) (Entry, error)) (Entry, error) {
	var out Entry
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEntries)
		old, ok, err := boltGet(b, k)
		if err != nil {
			return err
		}
		if !ok {
			old = Entry{Group: k.Group, Name: k.Name}
		}
		e, err := fn(old, ok)
		if err != nil {
			return fnError{err}
		}
		if e.Key() != k {
			return fnError{fmt.Errorf("%w: an update of %s/%s may not change its key", ErrInvalid, k.Group, k.Name)}
		}
		out, err = boltReplace(b, old, ok, e)
		return err
	})
	var fe fnError
	if errors.As(err, &fe) {
		return Entry{}, fe.err
	}
	if err != nil {
		return Entry{}, fmt.Errorf("catalog: updating %s/%s in %s: %w", k.Group, k.Name, s.path, err)
	}
	return out, nil
}

// List implements Store.
func (s *BoltStore) List(_ context.Context, group string, after Key, limit int) ([]Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	var prefix []byte
	if group != "" {
		prefix = []byte(group + "\x00")
	}
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEntries).Cursor()
		start := prefix
		var skip []byte
		if after != (Key{}) {
			if a := boltKey(after); bytes.Compare(a, start) >= 0 {
				start, skip = a, a
			}
		}
		for k, v := c.Seek(start); k != nil && len(out) < limit; k, v = c.Next() {
			if !bytes.HasPrefix(k, prefix) {
				break
			}
			if skip != nil && bytes.Equal(k, skip) {
				continue
			}
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("catalog: the stored entry %q is malformed: %v", k, err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Close implements Store.
func (s *BoltStore) Close() error { return s.db.Close() }
