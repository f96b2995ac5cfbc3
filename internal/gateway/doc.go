// Package gateway is a running `inlet serve`: it builds the parts of the
// gateway from a Config, starts them in order, serves HTTP, and stops them
// in the reverse order within one budget.
//
// # Data flow
//
//	client ── POST /v1/batch, /v1/track, GET /i ──▶ ingest (decode, validate, enrich, route)
//	                                                  │
//	                                   ack mode (ackmode.go): the ingest.Sink
//	                 ┌────────────────────────────────┼───────────────────────────┐
//	            --ack spool                      --ack kafka                 --ack none
//	   spool: append + fsync (group        producer: wait for Kafka's   producer: enqueue
//	   commit), answer 200; the            acks=all, answer 200          in memory, answer 202
//	   forwarder sends in order
//	                 └────────────────────────────────┼───────────────────────────┘
//	                                                  ▼
//	             Kafka (--brokers) or the development broker in process (no --brokers)
//
// Invalid events take the same path to the dead-letter topic. Request-reply
// (POST /v1/rpc/{service}, rpc.go) produces the call to the service's topic
// and waits for the reply on this instance's reply topic or Redis channel.
//
// # Lifecycle
//
// Start starts, in order: the development broker (without Brokers), the
// events producer, the spool and its forwarder (ack=spool), request-reply
// (reply transport, request producer, handler), the Kafka readiness check,
// and the HTTP server. A failed step tears down what started, within
// ShutdownTimeout (lifecycle.go). Shutdown stops the parts in the reverse
// order and gives each a share of ShutdownTimeout by weight, passing time
// one part did not use to the next: the HTTP drain (requests in flight wait
// for their acknowledgement), the request producer, the spool drain and the
// forwarder, the producer's flush. With ack=spool, records left in the
// spool are no failure: they are durable and sent on the next start.
//
// # Readiness
//
// /readyz (readiness.go) is 200 while the gateway takes events: with
// ack=spool, while the spool can write and has room (Kafka may be down:
// the spool absorbs it); with ack=kafka and ack=none, while Kafka answered
// the last metadata request. It is 503 with the reason otherwise, and from
// the start of Shutdown.
package gateway
