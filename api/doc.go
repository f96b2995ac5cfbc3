// Package api holds inlet's wire contracts: the IDL files of the catalog's
// gRPC and Thrift services (inf/ and catalog/v1/) and, under gen/, the Go
// code generated from them by `make generate` (scripts/generate.sh), which
// is committed. Its test checks that the committed code is what the IDL
// files produce.
package api
