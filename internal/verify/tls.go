package verify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
)

// tlsConfig is the client TLS configuration for cfg's https:// target: the
// CAs of TLSCAFile (else the system's), TLS 1.2 at least. It is nil for an
// http:// target.
func (c LoadConfig) tlsConfig() (*tls.Config, error) {
	u, err := url.Parse(c.Target)
	if err != nil || u.Scheme != "https" {
		return nil, nil
	}
	tc, err := ClientTLS(c.TLSCAFile, c.TLSInsecureSkipVerify)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	return tc, nil
}

// ClientTLS is the client TLS configuration of a command that talks to a
// gateway over https:// (inlet verify, inlet bench http): the CAs in the
// PEM file caFile (the system's when ""), TLS 1.2 at least, and with
// insecure no verification of the gateway's certificate at all (the
// caller warns). Errors name the --tls-ca flag.
func ClientTLS(caFile string, insecure bool) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // the user's explicit choice, warned about by the command
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// checkTLS makes one TLS handshake with the target, so that a certificate
// tc does not verify fails the check at once, in one line, rather than
// every request. Failing to connect at all is not an error here: Load
// counts those requests.
func checkTLS(ctx context.Context, c LoadConfig, tc *tls.Config) error {
	u, err := url.Parse(c.Target)
	if err != nil {
		return err
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	d := tls.Dialer{Config: tc, NetDialer: &net.Dialer{}}
	hctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	conn, err := d.DialContext(hctx, "tcp", addr)
	if err != nil {
		if d := describeCertError(err, c.TLSCAFile); d != "" {
			return fmt.Errorf("verify: %s: %s", c.Target, d)
		}
		return nil
	}
	return conn.Close()
}

// describeCertError says in a few words why the gateway's certificate was
// refused, or "" when err is not about the certificate.
func describeCertError(err error, caFile string) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		verr      *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknownCA):
		if caFile == "" {
			return "the gateway's certificate is not signed by a CA this system trusts: give its CA with --tls-ca"
		}
		return "the gateway's certificate is not signed by --tls-ca " + caFile
	case errors.As(err, &hostErr):
		return fmt.Sprintf("the gateway's certificate is not valid for %q: use a name it holds in --target", hostErr.Host)
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "the gateway's certificate has expired or is not valid yet (or this clock is wrong)"
		}
		return "the gateway's certificate is invalid: " + invalid.Error()
	case errors.As(err, &verr):
		return "the gateway's certificate does not verify: " + verr.Err.Error()
	}
	return ""
}
