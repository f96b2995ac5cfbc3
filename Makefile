# inlet — make targets. `make test` is what CI runs (.ci/run).
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X github.com/inlet-dev/inlet/internal/app.Version=$(VERSION) -X github.com/inlet-dev/inlet/internal/app.Commit=$(COMMIT)

PODMAN  ?= podman

.PHONY: build image image-run generate manifests run test test-cluster test-short fuzz bench bench-go services-start services-stop clean

# grpcnotrace: grpc without golang.org/x/net/trace (inlet never enables
# grpc.EnableTracing), whose html/template would keep every exported method
# in the binary: 10.8 MB of 35.9 MB (docs/container.md, "What weighs most").
TAGS    := grpcnotrace

## build: a static stripped binary ./inlet (no cgo)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o inlet ./cmd/inlet

## image: the OCI image inlet:$(VERSION) and inlet:latest (FROM scratch: ./inlet, CA certificates, /var/lib/inlet), with podman (PODMAN=docker works too)
image: build
	PODMAN='$(PODMAN)' VERSION='$(VERSION)' COMMIT='$(COMMIT)' scripts/image.sh build

## image-run: podman run the image with the options this VM needs (runc, explicit ulimits, host network), the volume inlet-data and INLET_BROKERS from the environment; ARGS='serve --topic t'
ARGS ?= serve
image-run:
	PODMAN='$(PODMAN)' scripts/image.sh run --rm -v inlet-data:/var/lib/inlet -e INLET_BROKERS inlet:latest $(ARGS)

## generate: regenerate docs/configuration.md's reference from the flags, and the committed gRPC and Thrift code in api/gen (needs protoc, protoc-gen-go, protoc-gen-go-grpc, thrift)
generate:
	$(GO) generate ./internal/app
	scripts/generate.sh

## manifests: render deploy/helm/inlet with its default values into deploy/kubernetes/inlet.yaml (helm from deploy/kubecheck's go.mod)
manifests:
	cd deploy/kubecheck && $(GO) test -count=1 -run '^TestManifestsCurrent$$' . -update

## run: inlet serve on the embedded development broker
run:
	$(GO) run ./cmd/inlet serve

## test: every test, against a real Kafka broker and Redis that it installs, starts and stops
test:
	scripts/test.sh

## test-cluster: only the 3-node Kafka cluster tests (TLS, SASL, failover), one package at a time (make test runs them too)
test-cluster:
	scripts/cluster-tests.sh

## test-short: unit and end-to-end tests on the in-process development broker, no services
test-short:
	$(GO) test -short -count=1 ./...

## fuzz: fuzz the batch decoder, then HTTP/1.1 request framing (FuzzFraming: no hidden request served or stored), each for FUZZTIME (default 1m)
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzSplitParse -fuzztime=$(FUZZTIME) ./internal/event/
	$(GO) test -run='^$$' -fuzz='^FuzzFraming$$' -fuzztime=$(FUZZTIME) ./internal/gateway/

## bench: the headline comparison on real Kafka: no-op server, inlet serve --ack none|kafka|spool, ROUNDS=3 interleaved rounds, medians (scripts/bench.sh, about 20 minutes)
bench:
	scripts/bench.sh

## bench-go: Go micro-benchmarks (decode+validate+enrich per event)
bench-go:
	$(GO) test -run='^$$' -bench=. -benchmem ./internal/...

services-start:
	scripts/services.sh start
services-stop:
	scripts/services.sh stop

clean:
	rm -rf inlet .inlet
