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
// With --auth, ingest checks each request's client credentials (--clients)
// before it reads the body (401), charges its events to the client's rate
// (429) and its groups; with --catalog, each event gets its catalog code
// (one catalog Resolve per request, the cache answering most keys) and is
// checked against the tracking plan by --catalog-mode. An unreachable
// catalog store lets events through without a code rather than fail them.
// The same catalog is served over gRPC (--grpc-listen) and Thrift
// (--thrift-listen), catalog.go.
//
// Invalid events take the same path to the dead-letter topic; a spooled
// record Kafka refuses for good goes there too, or is parked (poison.go).
// The live events page (ui.go) taps what the sink acknowledged. Request-reply
// (POST /v1/rpc/{service}, rpc.go) produces the call to the service's topic
// and waits for the reply on this instance's reply topic or Redis channel;
// its bodies count against its own quarter of the in-flight budget
// (Config.rpcBodyBytes), ingest's against the rest. In front of every
// route, http.go bounds the requests served at once, each class of
// requests (ingest, request-reply, the rest) within its share, and the
// time a client has to read its answer, and closes the connection after a
// request whose framing a proxy may have read otherwise. One net/http
// server serves every listener (HTTP/1.1, h2c, HTTPS): one parser per
// port, no sniffing.
//
// # Security
//
// Every Kafka client of the gateway (the events producer and its batch
// limit, the forwarder, the readiness check, the request producer and the
// reply consumer) uses Config.Kafka.Security: the --kafka-tls* and
// --kafka-sasl* flags every inlet command shares. Clients may connect over
// HTTPS (tls.go): --tls-cert and --tls-key, on --listen, or on
// --tls-listen with --listen staying plain (HTTP/1.1 and h2c); the
// certificate is reloaded when its files change (polled, and on SIGHUP),
// through tls.Config.GetCertificate, so no connection is dropped.
//
// # Lifecycle
//
// Start starts, in order: the development broker (without Brokers), the
// events producer, the spool and its forwarder (ack=spool), the client
// credentials and the catalog with its store check, request-reply (reply
// transport, request producer, handler), the catalog's gRPC and Thrift
// servers, the Kafka readiness check, and the HTTP server. A failed step
// tears down what started, within ShutdownTimeout (lifecycle.go). Shutdown
// stops the parts in the reverse order and gives each a share of
// ShutdownTimeout by weight, passing time one part did not use to the
// next: the HTTP drain (requests in flight wait for their
// acknowledgement), the catalog's RPC calls in flight, the request
// producer, the spool drain and the forwarder, the producer's flush. With
// ack=spool, records left in the spool are no failure: they are durable and
// sent on the next start. Before Shutdown, Drain (ShutdownDelay, for a load
// balancer) keeps serving for a while with /readyz 503 and keep-alives off.
//
// # Readiness
//
// /readyz (readiness.go) is 200 while the gateway takes events: with
// ack=spool, while the spool can write and has room (Kafka may be down:
// the spool absorbs it); with ack=kafka and ack=none, while Kafka answered
// the last metadata request and the last records produced did not fail
// (kafkacheck.go). It is 503 with the reason otherwise, and from the start
// of Shutdown. With every ack mode it is 503 while the brokers refuse the
// gateway's TLS or SASL settings (a wrong password, an unknown CA, a
// client certificate refused or expired: nothing a wait mends), naming the
// cause; the gateway starts anyway, and with ack=spool takes events into
// the spool, sent once the settings are fixed and it restarted. It reports the catalog's store (catalog.healthy) but never
// turns 503 for it: ingest fails open. /healthz is 503 only once the spool failed for good (an
// fsync failed): a restart is the cure.
package gateway
