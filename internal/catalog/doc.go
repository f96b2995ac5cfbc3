// Package catalog is inlet's event catalog: a dictionary of event types keyed
// by (group, name), each with a stable numeric code, a display name, an
// optional JSON Schema for its props and a status; and the tracking plan
// ingest enforces with it.
//
// A Catalog sits in front of a Store: RedisStore, shared by several inlet
// instances (codes from INCR, a new key filled under a SET NX PX lock,
// changes announced on a pub/sub channel so other instances drop them from
// their caches), or BoltStore, one bbolt file for a single process. Hits are
// answered from a bounded in-memory cache, which keeps answering while the
// store is unreachable; misses go to the store once per key at a time
// (singleflight), bounded by Config.Timeout, and fail with ErrUnavailable
// rather than hang. Resolve looks a whole request's keys up with one store
// round trip for its misses. Check applies the tracking plan to one event;
// Import and Export read and write the plan as strict JSON.
package catalog
