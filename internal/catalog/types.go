package catalog

import (
	"encoding/json"
	"errors"
	"time"
)

// Status is an entry's place in the tracking plan.
type Status string

const (
	// StatusPlanned: in the tracking plan (imported, or set by a person).
	StatusPlanned Status = "planned"
	// StatusObserved: first seen at ingest (mode open) and given a code.
	StatusObserved Status = "observed"
	// StatusBlocked: rejected at ingest in every mode.
	StatusBlocked Status = "blocked"
)

// Mode is how ingest treats events the plan does not allow.
type Mode string

const (
	// ModeOpen assigns a code to every new (group, name) on first sight;
	// nothing is checked.
	ModeOpen Mode = "open"
	// ModeWarn lets unplanned and schema-violating events through, with
	// their violations in the inlet-violations header.
	ModeWarn Mode = "warn"
	// ModeBlock rejects them, per event, and dead-letters them.
	ModeBlock Mode = "block"
)

// Key names an event type: its group and its event name.
type Key struct {
	Group string
	Name  string
}

// Entry is one event type of the catalog.
type Entry struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	// Code is unique across the catalog and never reused.
	Code        int64  `json:"code"`
	DisplayName string `json:"display_name,omitempty"`
	// Schema is the JSON Schema (draft 2020-12) the event's props must
	// match; nil for none.
	Schema  json.RawMessage `json:"schema,omitempty"`
	Status  Status          `json:"status"`
	Created time.Time       `json:"created"`
	Updated time.Time       `json:"updated"`
}

// Key returns e's key.
func (e *Entry) Key() Key { return Key{Group: e.Group, Name: e.Name} }

// Errors the catalog returns, wrapped; match them with errors.Is.
var (
	// ErrNotFound: the catalog has no such entry (and, in modes warn and
	// block, Lookup does not assign one).
	ErrNotFound = errors.New("catalog: no such event type")
	// ErrUnavailable: the store cannot be reached, or the fill lock was not
	// had within its wait; the caller may retry.
	ErrUnavailable = errors.New("catalog: store unavailable")
	// ErrInvalid: a bad group, name, schema or status.
	ErrInvalid = errors.New("catalog: invalid entry")
	// ErrLocked: the embedded store is open in another process (a running
	// inlet), whose file lock was not had within a second.
	ErrLocked = errors.New("catalog: store in use by another inlet process")
)

// ViolationType names how an event breaks the tracking plan.
type ViolationType string

const (
	// ViolationUnplanned: the catalog has no entry for the event's
	// (group, name) (modes warn and block).
	ViolationUnplanned ViolationType = "unplanned_event"
	// ViolationBlocked: the entry's status is blocked.
	ViolationBlocked ViolationType = "blocked_event"
	// ViolationRequiredMissing: a property the schema requires is missing.
	ViolationRequiredMissing ViolationType = "required_missing"
	// ViolationDatatypeMismatch: a property has the wrong JSON type.
	ViolationDatatypeMismatch ViolationType = "datatype_mismatch"
	// ViolationAdditionalProperties: a property the schema does not allow.
	ViolationAdditionalProperties ViolationType = "additional_properties"
	// ViolationInvalidValue: any other schema rule (enum, pattern,
	// minimum, format, ...).
	ViolationInvalidValue ViolationType = "invalid_value"
)

// Violation is one way an event breaks the plan.
type Violation struct {
	Type ViolationType `json:"type"`
	// Path is the JSON pointer of the property within props ("" for the
	// event itself), e.g. "/price".
	Path string `json:"path,omitempty"`
	// Msg says what is wrong, for people.
	Msg string `json:"msg"`
}
