package testkit

import (
	"errors"
	"net"
	"net/http"
	"testing"
)

// TestServeTwo: both addresses answer while the test runs; its cleanup
// shuts the server down and checks that both serves returned.
func TestServeTwo(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })}
	serve := func(ln net.Listener) error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	t.Run("serve", func(t *testing.T) {
		a, b := ServeTwo(t, serve, serve, srv.Shutdown)
		for _, addr := range []string{a, b} {
			if r := Do(t, "GET", "http://"+addr+"/", nil); r.Status != http.StatusNoContent {
				t.Errorf("%s: %s", addr, r)
			}
		}
	})
}
