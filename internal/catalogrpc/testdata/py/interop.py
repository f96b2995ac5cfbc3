"""Interop client of inlet's catalog: Python code generated from the IDL
files (api/inf/data.proto and data.thrift, api/catalog/v1/catalog.proto and
catalog.thrift) calls a running server over gRPC or Thrift.

Usage: interop.py grpc|thrift GEN_DIR ADDR CLIENT_ID SECRET GROUP [framed|buffered]

It checks, and exits non-zero with a message when one fails: first sight
(a new event type gets a code), repeat (the same code), session token
reuse (the answer's token works instead of the secret), bad credentials
(gRPC UNAUTHENTICATED, Thrift TApplicationException / CatalogError 16),
and the Catalog service's Get. On success it prints one JSON object of the
codes it saw, for the Go test to compare across the two protocols.
"""

import json
import sys


def fail(msg):
    print("interop: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run_grpc(addr, client_id, secret, group):
    import grpc
    from inf import data_pb2, data_pb2_grpc
    from catalog.v1 import catalog_pb2, catalog_pb2_grpc

    ch = grpc.insecure_channel(addr)
    grpc.channel_ready_future(ch).result(timeout=10)
    data = data_pb2_grpc.DataStub(ch)
    cat = catalog_pb2_grpc.CatalogStub(ch)

    def lookup(name, cid, token):
        rq = data_pb2.DataTypeRq(authRq=data_pb2.AuthRq(clientId=cid, token=token), groupName=group, enName=name)
        return data.DataType(rq, timeout=10)

    first = lookup("py_grpc_first", client_id, secret)
    check(first.codeId > 0, "grpc first sight: code %d" % first.codeId)
    check(first.authRp.token != "", "grpc first sight: no session token")
    again = lookup("py_grpc_first", client_id, secret)
    check(again.codeId == first.codeId, "grpc repeat: code %d, first %d" % (again.codeId, first.codeId))
    sess = lookup("py_grpc_first", client_id, first.authRp.token)
    check(sess.codeId == first.codeId, "grpc session token: code %d" % sess.codeId)
    shared = lookup("py_shared", "", first.authRp.token)

    bad = {}
    for case, cid, token, want in [
        ("wrong_secret", client_id, secret + "x", "no client has these credentials"),
        ("unknown_client", "nobody-" + client_id, secret, "no client has these credentials"),
        ("missing", "", "", "no credentials"),
        ("tampered_token", client_id, first.authRp.token[:-2] + "xx", "session token"),
    ]:
        try:
            lookup("py_grpc_first", cid, token)
            fail("grpc %s: answered" % case)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, "grpc %s: %s" % (case, e.code()))
            check(want in e.details(), "grpc %s: details %r do not say %r" % (case, e.details(), want))
            check(secret not in e.details(), "grpc %s: details give the secret away" % case)
            bad[case] = e.details()

    got = cat.Get(catalog_pb2.GetRequest(auth=catalog_pb2.Credentials(client_id=client_id, token=first.authRp.token),
                                         group=group, name="py_grpc_first"), timeout=10)
    check(got.entry.code == first.codeId, "grpc Catalog.Get: code %d" % got.entry.code)
    try:
        cat.Get(catalog_pb2.GetRequest(auth=catalog_pb2.Credentials(client_id=client_id, token=secret),
                                       group=group, name="py_never_seen"), timeout=10)
        fail("grpc Catalog.Get of an unknown entry: answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, "grpc Catalog.Get of an unknown entry: %s" % e.code())
    return {"first": first.codeId, "shared": shared.codeId, "bad": bad}


def run_thrift(addr, client_id, secret, group, transport):
    from thrift.Thrift import TApplicationException
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
    from thrift.transport import TSocket, TTransport
    from inf import Data
    from inf.ttypes import AuthRq, DataTypeRq
    from inlet.catalog.v1 import Catalog
    from inlet.catalog.v1.ttypes import CatalogError, Credentials

    host, port = addr.rsplit(":", 1)
    sock = TSocket.TSocket(host, int(port))
    sock.setTimeout(10000)
    trans = TTransport.TFramedTransport(sock) if transport == "framed" else TTransport.TBufferedTransport(sock)
    proto = TBinaryProtocol.TBinaryProtocol(trans)
    data = Data.Client(proto)
    cat = Catalog.Client(TMultiplexedProtocol.TMultiplexedProtocol(proto, "inlet.catalog.v1.Catalog"))
    trans.open()

    def lookup(name, cid, token):
        return data.DataType(DataTypeRq(authrq=AuthRq(clientId=cid, token=token), groupName=group, enName=name))

    first = lookup("py_thrift_first", client_id, secret)
    check(first.codeId > 0, "thrift first sight: code %d" % first.codeId)
    check(first.authrp.token != "", "thrift first sight: no session token")
    again = lookup("py_thrift_first", client_id, secret)
    check(again.codeId == first.codeId, "thrift repeat: code %d, first %d" % (again.codeId, first.codeId))
    sess = lookup("py_thrift_first", client_id, first.authrp.token)
    check(sess.codeId == first.codeId, "thrift session token: code %d" % sess.codeId)
    shared = lookup("py_shared", "", first.authrp.token)

    bad = {}
    for case, cid, token, want in [
        ("wrong_secret", client_id, secret + "x", "no client has these credentials"),
        ("unknown_client", "nobody-" + client_id, secret, "no client has these credentials"),
        ("missing", "", "", "no credentials"),
        ("tampered_token", client_id, first.authrp.token[:-2] + "xx", "session token"),
    ]:
        try:
            lookup("py_thrift_first", cid, token)
            fail("thrift %s: answered" % case)
        except TApplicationException as e:
            msg = e.message or ""
            check(msg.startswith("unauthenticated: "), "thrift %s: message %r" % (case, msg))
            check(want in msg, "thrift %s: message %r does not say %r" % (case, msg, want))
            check(secret not in msg, "thrift %s: message gives the secret away" % case)
            bad[case] = msg
    # The connection still serves after the exceptions; the multiplexed
    # Catalog on the same connection.
    got = cat.Get(Credentials(clientId=client_id, token=first.authrp.token), group, "py_thrift_first")
    check(got.entry.code == first.codeId, "thrift Catalog.Get: code %d" % got.entry.code)
    try:
        cat.Get(Credentials(clientId=client_id, token=secret + "x"), group, "py_thrift_first")
        fail("thrift Catalog.Get with a wrong secret: answered")
    except CatalogError as e:
        check(e.code == 16, "thrift Catalog.Get with a wrong secret: code %d" % e.code)
        check("no client has these credentials" in e.message, "thrift Catalog.Get: message %r" % e.message)
    trans.close()
    return {"first": first.codeId, "shared": shared.codeId, "bad": bad}


def main():
    if len(sys.argv) < 7:
        fail(__doc__)
    proto, gen, addr, client_id, secret, group = sys.argv[1:7]
    sys.path.insert(0, gen)
    if proto == "grpc":
        out = run_grpc(addr, client_id, secret, group)
    elif proto == "thrift":
        out = run_thrift(addr, client_id, secret, group, sys.argv[7] if len(sys.argv) > 7 else "framed")
    else:
        fail("protocol %r: want grpc or thrift" % proto)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
