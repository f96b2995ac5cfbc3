#!/usr/bin/env bash
# Regenerates the committed gRPC and Thrift code under api/gen from the IDL
# files in api/ (make generate). OUT=dir writes the tree elsewhere, for the
# test that checks the committed code is what these files produce.
# Needs Debian's protobuf-compiler, protoc-gen-go, protoc-gen-go-grpc and
# thrift-compiler: apt-get install protobuf-compiler protoc-gen-go
# protoc-gen-go-grpc thrift-compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/inlet-dev/inlet
out=${OUT:-.}
for tool in protoc protoc-gen-go protoc-gen-go-grpc thrift; do
	command -v "$tool" >/dev/null || { echo "generate: $tool not found; apt-get install protobuf-compiler protoc-gen-go protoc-gen-go-grpc thrift-compiler" >&2; exit 1; }
done
mkdir -p "$out/api/gen/pb" "$out/api/gen/thrift"
rm -rf "$out/api/gen/pb/inf" "$out/api/gen/pb/catalogv1" "$out/api/gen/thrift/inf" "$out/api/gen/thrift/catalogv1"
# data.proto is kept as the known design published it, without go_package.
m=Minf/data.proto=$mod/api/gen/pb/inf
protoc -I api \
	--go_out="$out" --go_opt=module=$mod --go_opt=$m \
	--go-grpc_out="$out" --go-grpc_opt=module=$mod --go-grpc_opt=$m \
	inf/data.proto catalog/v1/catalog.proto
for f in api/inf/data.thrift api/catalog/v1/catalog.thrift; do
	thrift --gen go:package_prefix=$mod/api/gen/thrift/,skip_remote -out "$out/api/gen/thrift" "$f"
done
# thrift's Go output is not gofmt-clean; make it so, like everything else.
gofmt -w "$out/api/gen/thrift"
