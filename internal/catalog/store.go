package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Store keeps the catalog's entries. Both stores (Redis, shared by several
// inlet instances; bbolt, embedded in one process) satisfy it; the Catalog
// caches in front of it.
type Store interface {
	// Get returns the entry of k: ErrNotFound when there is none,
	// ErrUnavailable (wrapped) when the store cannot be reached.
	Get(ctx context.Context, k Key) (Entry, error)
	// GetMany looks keys up in one round trip: entries[i] is keys[i]'s
	// entry when found[i].
	GetMany(ctx context.Context, keys []Key) (entries []Entry, found []bool, err error)
	// Fill returns k's entry, creating it first when it is absent: the next
	// code, status observed, created and updated now. Creation happens
	// under a distributed lock (Redis) or in one transaction (bbolt), so
	// concurrent fills of one key, in any number of processes, agree on
	// one code.
	Fill(ctx context.Context, k Key, now time.Time) (Entry, error)
	// Put upserts e: an existing key keeps its Code and Created, a new one
	// gets the next code (Created = e.Updated). It returns the entry as
	// stored.
	Put(ctx context.Context, e Entry) (Entry, error)
	// Update changes k's entry as one atomic read-modify-write: fn gets
	// the entry as stored (found false: none, and e holds only k), and
	// its result is written as Put writes it. When another write to k
	// lands between the read and the write, fn is called again on the
	// new entry, so fn may run more than once and must have no side
	// effects; an error of fn is returned as it is, and nothing written.
	Update(ctx context.Context, k Key, fn func(e Entry, found bool) (Entry, error)) (Entry, error)
	// List returns up to limit entries after the key after, in (group,
	// name) order; group "" means every group, else only that group's.
	List(ctx context.Context, group string, after Key, limit int) ([]Entry, error)
	// Close releases the store.
	Close() error
}

// Watcher is a Store whose entries other processes may change: Watch calls
// changed with the key of each entry that was put or filled anywhere, and
// with the zero Key when the watch was (re-)established and any entry may
// have changed unseen. Calls come from one goroutine and must not block for
// long. stop ends the watch.
type Watcher interface {
	Watch(changed func(Key)) (stop func())
}

// maxNameLen is the most bytes a group or an event name may have.
const maxNameLen = 200

// ValidateKey reports whether k is a valid key: group and name non-empty,
// at most 200 bytes of valid UTF-8, with no control characters. The error
// wraps ErrInvalid.
func ValidateKey(k Key) error {
	if err := validateName("group", k.Group); err != nil {
		return err
	}
	return validateName("event name", k.Name)
}

func validateName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(s) > maxNameLen:
		return fmt.Errorf("%w: %s %.40q... is %d bytes, more than %d", ErrInvalid, what, s, len(s), maxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, what, s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s %q has a control character", ErrInvalid, what, s)
	}
	return nil
}

// validStatus reports whether s is one of the statuses.
func validStatus(s Status) bool {
	return s == StatusPlanned || s == StatusObserved || s == StatusBlocked
}

// storeErr wraps err, from talking to the store, as ErrUnavailable unless
// it already is one of the catalog's errors.
func storeErr(op string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, op, err)
}
