package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pbinf "github.com/inlet-dev/inlet/api/gen/pb/inf"
	thriftinf "github.com/inlet-dev/inlet/api/gen/thrift/inf"
)

// TestFloors calls DataType on both floors and checks the answers, then
// that the server stops with its context.
func TestFloors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--thrift-listen", "127.0.0.1:0"}, pw)
	}()
	br := bufio.NewReader(pr)
	addrs := map[string]string{}
	for range 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			addrs[k] = v
		}
	}
	go io.Copy(io.Discard, br)
	if addrs["grpc"] == "" || addrs["thrift"] == "" {
		t.Fatalf("floor addresses %v: want grpc and thrift", addrs)
	}

	cc, err := grpc.NewClient(addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	rp, err := pbinf.NewDataClient(cc).DataType(cctx, &pbinf.DataTypeRq{AuthRq: &pbinf.AuthRq{ClientId: "c", Token: "tok"}, GroupName: "g", EnName: "signup"})
	if err != nil {
		t.Fatalf("gRPC floor: %v", err)
	}
	if rp.GetCodeId() != noopCode || rp.GetAuthRp().GetToken() != "tok" || rp.GetCnName() != "signup" {
		t.Fatalf("gRPC floor answered %v", rp)
	}

	conf := &thrift.TConfiguration{ConnectTimeout: 5 * time.Second, SocketTimeout: 10 * time.Second}
	tr := thrift.NewTFramedTransportConf(thrift.NewTSocketConf(addrs["thrift"], conf), conf)
	if err := tr.Open(); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	p := thrift.NewTBinaryProtocolConf(tr, conf)
	trp, err := thriftinf.NewDataClient(thrift.NewTStandardClient(p, p)).DataType(cctx,
		&thriftinf.DataTypeRq{Authrq: &thriftinf.AuthRq{ClientId: "c", Token: "tok"}, GroupName: "g", EnName: "signup"})
	if err != nil {
		t.Fatalf("Thrift floor: %v", err)
	}
	if trp.GetCodeId() != noopCode || trp.GetAuthrp().GetToken() != "tok" || trp.GetCnName() != "signup" {
		t.Fatalf("Thrift floor answered %v", trp)
	}
	tr.Close()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10 s after its context ended")
	}
}

// TestFloorListenFails: when a floor cannot listen, run fails and leaves
// nothing serving: the gRPC floor's address is free again.
func TestFloorListenFails(t *testing.T) {
	t.Parallel()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := free.Addr().String()
	free.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	err = run(context.Background(), []string{"--listen", "127.0.0.1:0", "--grpc-listen", grpcAddr, "--thrift-listen", busy.Addr().String()}, io.Discard)
	if err == nil {
		t.Fatal("run served with the Thrift floor's address in use")
	}
	again, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("the gRPC floor's address is still taken after run failed: %v", err)
	}
	again.Close()
}
