package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestRefusedBy: the brokers refusing the TLS or SASL settings is told
// from an outage (which --ack spool rides out while ready).
func TestRefusedBy(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("pinging kafka: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"wrong password", wrap(kerr.SaslAuthenticationFailed), true},
		{"mechanism not enabled", wrap(kerr.UnsupportedSaslMechanism), true},
		{"SASL on a plain listener", wrap(kerr.IllegalSaslState), true},
		{"unknown CA", wrap(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), true},
		{"wrong host", wrap(x509.HostnameError{Host: "kafka"}), true},
		{"broker certificate expired", wrap(x509.CertificateInvalidError{Reason: x509.Expired}), true},
		{"client certificate refused", wrap(&net.OpError{Op: "remote error", Err: tls.AlertError(42)}), true},
		{"TLS to a plaintext port", wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), true},
		{"broker down", wrap(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), false},
		{"timeout", wrap(context.DeadlineExceeded), false},
		{"leader moving", wrap(kerr.NotLeaderForPartition), false},
		{"other", errors.New("x"), false},
	} {
		if got := refusedBy(tc.err); got != tc.want {
			t.Errorf("%s: refusedBy(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
