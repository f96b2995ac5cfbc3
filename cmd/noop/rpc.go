package main

import (
	"context"
	"fmt"
	"net"

	"github.com/apache/thrift/lib/go/thrift"
	"google.golang.org/grpc"

	pbinf "github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
)

// The floors of the catalog's benchmarks: inf.Data DataType served by
// grpc-go and by Apache Thrift's own server with their default settings,
// answering every call with the token it presented and a fixed code, with
// no credentials, no catalog and no metrics. A load on them measures what
// the two RPC stacks cost on the machine, so that inlet's catalog server
// can be read as a ratio of it.

// noopCode is the code every floor answer carries.
const noopCode = 1

// grpcData answers every DataType at once.
type grpcData struct{ pbinf.UnimplementedDataServer }

func (grpcData) DataType(_ context.Context, rq *pbinf.DataTypeRq) (*pbinf.DataTypeRp, error) {
	return &pbinf.DataTypeRp{AuthRp: &pbinf.AuthRp{Token: rq.GetAuthRq().GetToken()}, CodeId: noopCode, CnName: rq.GetEnName()}, nil
}

// serveGRPC serves inf.Data on ln until ctx ends.
func serveGRPC(ctx context.Context, ln net.Listener) error {
	gs := grpc.NewServer()
	pbinf.RegisterDataServer(gs, grpcData{})
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("gRPC floor: %w", err)
	case <-ctx.Done():
		gs.Stop()
		<-done
		return nil
	}
}

// thriftData answers every DataType at once.
type thriftData struct{}

func (thriftData) DataType(_ context.Context, rq *thriftinf.DataTypeRq) (*thriftinf.DataTypeRp, error) {
	return &thriftinf.DataTypeRp{Authrp: &thriftinf.AuthRp{Token: rq.GetAuthrq().GetToken()}, CodeId: noopCode, CnName: rq.GetEnName()}, nil
}

// listenThrift makes the Thrift floor's server: inf.Data (binary
// protocol, framed transport, as inlet's default) on thrift.TSimpleServer,
// listening on addr.
func listenThrift(addr string) (*thrift.TSimpleServer, net.Addr, error) {
	sock, err := thrift.NewTServerSocket(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("Thrift floor: %w", err)
	}
	conf := &thrift.TConfiguration{}
	srv := thrift.NewTSimpleServer4(
		thriftinf.NewDataProcessor(thriftData{}),
		sock,
		thrift.NewTFramedTransportFactoryConf(thrift.NewTTransportFactory(), conf),
		thrift.NewTBinaryProtocolFactoryConf(conf),
	)
	srv.SetLogger(func(string) {}) // clients hanging up are no news
	if err := srv.Listen(); err != nil {
		return nil, nil, fmt.Errorf("Thrift floor on %s: %w", addr, err)
	}
	return srv, sock.Addr(), nil
}

// serveThrift serves srv until ctx ends.
func serveThrift(ctx context.Context, srv *thrift.TSimpleServer) error {
	done := make(chan error, 1)
	go func() { done <- srv.AcceptLoop() }()
	select {
	case err := <-done:
		return fmt.Errorf("Thrift floor: %w", err)
	case <-ctx.Done():
		thrift.ServerStopTimeout = 1
		_ = srv.Stop()
		<-done
		return nil
	}
}
