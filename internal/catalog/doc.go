// Package catalog is inlet's event catalog: a dictionary of event types keyed
// by (group, name), each with a stable numeric code, a display name, an
// optional JSON Schema for its props and a status; and the tracking plan
// ingest enforces with it.
package catalog
