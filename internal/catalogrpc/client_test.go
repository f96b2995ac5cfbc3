package catalogrpc

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/inlet-dev/inlet/internal/catalog"
)

// TestClient: what Client sets it gets and lists; the codes that stand for
// the catalog's errors come back as them; a store that is down is
// ErrUnavailable, even when its error says "dial", and a server that does
// not answer is "cannot reach", told apart by the connection, not the text.
func TestClient(t *testing.T) {
	ts := startServer(t, nil)
	ctx := ctxT(t)
	c, err := Dial(ts.grpcAddr, "admin", secretOf("admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := catalog.Key{Group: "shop", Name: "checkout"}
	dn := "Checkout"
	set, err := c.Set(ctx, Change{Key: k, DisplayName: &dn, Status: catalog.StatusObserved})
	if err != nil || set.DisplayName != dn || set.Status != catalog.StatusObserved || set.Code == 0 {
		t.Fatalf("Set: %+v, %v", set, err)
	}
	if !strings.HasPrefix(c.token, "sess.admin.") {
		t.Errorf("after an answer the client presents %q, want the session token it was given", c.token)
	}
	if got, err := c.Get(ctx, k); err != nil || got.Code != set.Code || got.Status != catalog.StatusObserved {
		t.Errorf("Get: %+v, %v", got, err)
	}
	var listed []catalog.Key
	if err := c.Each(ctx, "shop", 1, func(e catalog.Entry) bool { listed = append(listed, e.Key()); return true }); err != nil || len(listed) != 1 || listed[0] != k {
		t.Errorf("Each: %v, %v", listed, err)
	}

	for _, tc := range []struct {
		name string
		want error
	}{
		{"missing", catalog.ErrNotFound},
		{nameInvalid + "x", catalog.ErrInvalid},
		{nameUnavailable + "x", catalog.ErrUnavailable},
	} {
		_, err := c.Get(ctx, catalog.Key{Group: "shop", Name: tc.name})
		if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("Get %s: %v, want %v", tc.name, err, tc.want)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	g, err := Dial(gone, "admin", secretOf("admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Get(ctx, k); err == nil || errors.Is(err, catalog.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach the catalog at "+gone) {
		t.Errorf("no server: %v", err)
	}
	w, err := Dial(ts.grpcAddr, "admin", "wrong")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Get(ctx, k); err == nil || !strings.Contains(err.Error(), "check --client-id and the secret") {
		t.Errorf("a wrong secret: %v", err)
	}
}
