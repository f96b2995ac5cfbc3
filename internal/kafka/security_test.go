package kafka

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inlet-dev/inlet/internal/testkit"
)

// writeCert writes a self-signed ECDSA certificate valid from notBefore to
// notAfter and its PKCS#8 key to dir, returning their paths.
func writeCert(t *testing.T, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

const secret = "s3cr3t-Pa55w0rd-xyzzy"

func TestSecurityValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	cert, key := writeCert(t, dir, "good", now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := writeCert(t, dir, "old", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	_, otherKey := writeCert(t, dir, "other", now.Add(-time.Hour), now.Add(time.Hour))
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyPW := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyPW, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name string
		s    Security
		want string // "" means valid
	}{
		{"zero", Security{}, ""},
		{"tls only", Security{TLS: true}, ""},
		{"ca", Security{CAFile: cert}, ""},
		{"mtls", Security{CAFile: cert, CertFile: cert, KeyFile: key}, ""},
		{"scram", Security{SASL: "SCRAM-SHA-512", User: "u", Password: secret}, ""},
		{"plain file", Security{SASL: "plain", User: "u", PasswordFile: pwFile}, ""},
		{"cert without key", Security{CertFile: cert}, "--kafka-tls-cert needs --kafka-tls-key"},
		{"key without cert", Security{KeyFile: key}, "--kafka-tls-key needs --kafka-tls-cert"},
		{"ca without certificate", Security{CAFile: notPEM}, "--kafka-tls-ca " + notPEM + " holds no PEM certificate"},
		{"ca missing", Security{CAFile: missing}, "--kafka-tls-ca: open " + missing},
		{"key missing", Security{CertFile: cert, KeyFile: missing}, "--kafka-tls-key: open " + missing},
		{"key of another cert", Security{CertFile: cert, KeyFile: otherKey}, "private key does not match public key"},
		{"expired", Security{CertFile: oldCert, KeyFile: oldKey}, "--kafka-tls-cert " + oldCert + " expired on"},
		{"unknown mechanism", Security{SASL: "gssapi", User: "u", Password: secret}, `--kafka-sasl "gssapi": unknown mechanism`},
		{"no user", Security{SASL: "plain", Password: secret}, "needs --kafka-sasl-user"},
		{"no password", Security{SASL: "scram-sha-256", User: "u"}, "needs --kafka-sasl-password or --kafka-sasl-password-file"},
		{"both passwords", Security{SASL: "plain", User: "u", Password: secret, PasswordFile: pwFile}, "not both"},
		{"password file missing", Security{SASL: "plain", User: "u", PasswordFile: missing}, "--kafka-sasl-password-file: open " + missing},
		{"password file empty", Security{SASL: "plain", User: "u", PasswordFile: emptyPW}, "the first line is empty"},
		{"user without mechanism", Security{User: "u", Password: secret}, "need --kafka-sasl"},
	} {
		err := tc.s.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error is not one line without the secret: %q", tc.name, err)
		}
		if _, oerr := tc.s.Opts(nil); oerr == nil {
			t.Errorf("%s: Validate fails but Opts does not", tc.name)
		}
		// A producer's config refuses it too.
		cfg := DefaultConfig()
		cfg.Brokers = []string{testkit.FreeAddr(t)}
		cfg.Security = tc.s
		if _, perr := NewProducer(cfg, slog.New(slog.DiscardHandler), nil); perr == nil {
			t.Errorf("%s: NewProducer accepted it", tc.name)
		}
	}
}

func TestSecurityFlags(t *testing.T) {
	t.Parallel()
	var s Security
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	s.RegisterFlags(fs)
	for _, name := range []string{"kafka-tls", "kafka-tls-ca", "kafka-tls-cert", "kafka-tls-key", "kafka-tls-server-name",
		"kafka-tls-insecure-skip-verify", "kafka-sasl", "kafka-sasl-user", "kafka-sasl-password", "kafka-sasl-password-file"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if err := fs.Parse([]string{"--kafka-tls-server-name=kafka.example", "--kafka-sasl=scram-sha-256", "--kafka-sasl-user=u", "--kafka-sasl-password=" + secret}); err != nil {
		t.Fatal(err)
	}
	if !s.TLSEnabled() || s.TLS {
		t.Errorf("TLSEnabled %v (TLS %v): a --kafka-tls-* flag turns TLS on", s.TLSEnabled(), s.TLS)
	}
	if s.SASL != "scram-sha-256" || s.User != "u" || s.Password != secret {
		t.Errorf("parsed %#v", s)
	}
	if (Security{}).TLSEnabled() {
		t.Error("the zero value has TLS on")
	}
	opts, err := (Security{}).Opts(nil)
	if err != nil || len(opts) != 0 {
		t.Errorf("zero value: %d options, %v; want none", len(opts), err)
	}
	opts, err = s.Opts(nil)
	if err != nil || len(opts) != 2 {
		t.Errorf("TLS and SASL: %d options, %v; want 2", len(opts), err)
	}
}

func TestSecurityNeverPrintsThePassword(t *testing.T) {
	t.Parallel()
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Security{
		{TLS: true, CAFile: "/ca.pem", SASL: "scram-sha-512", User: "inlet", Password: secret},
		{SASL: "plain", User: "inlet", PasswordFile: pwFile},
	} {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		log.Info("settings", "kafka", s)
		log.Info("settings", slog.Any("kafka", s))
		slog.New(slog.NewTextHandler(&logs, nil)).Info("settings", "kafka", s)
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		kcfg := DefaultConfig()
		kcfg.Security = s
		outs := map[string]string{
			"String": s.String(), "%v": fmt.Sprintf("%v", s), "%+v": fmt.Sprintf("%+v", s), "%#v": fmt.Sprintf("%#v", s),
			"%v of a pointer": fmt.Sprintf("%v", &s), "%+v of Config": fmt.Sprintf("%+v", kcfg),
			"slog": logs.String(), "json": string(js),
			"conn error": s.DescribeConnError(fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed)),
		}
		for what, out := range outs {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows the password: %s", what, out)
			}
		}
		if !strings.Contains(s.String(), "user=inlet") || !strings.Contains(logs.String(), `"user":"inlet"`) {
			t.Errorf("String %q / log %s do not describe the settings", s.String(), logs.String())
		}
	}
	// The password file's content does not leak through a mechanism's error either.
	s := Security{SASL: "plain", User: "u", Password: secret, PasswordFile: pwFile}
	if err := s.Validate(); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("both passwords: %v", err)
	}
}

func TestSecurityInsecureSkipVerifyWarns(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := (Security{InsecureSkipVerify: true}).Opts(log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "insecure-skip-verify") {
		t.Errorf("no warning: %q", logs.String())
	}
	logs.Reset()
	if _, err := (Security{TLS: true}).Opts(log); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Errorf("a warning without insecure-skip-verify: %q", logs.String())
	}
}

// TestKgoConnErrorText: the two kgo errors DescribeConnError can only
// match by their text (see there) still have it, from kgo itself: a
// plaintext client answered with a TLS alert, as Kafka's TLS listeners
// answer, and answered by an HTTP server (as one answers bytes it cannot
// read).
func TestKgoConnErrorText(t *testing.T) {
	t.Parallel()
	alert := listen(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 512))
		_, _ = c.Write([]byte{21, 3, 3, 0, 2, 2, 10}) // fatal unexpected_message, TLS 1.2
	})
	web := listen(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 512))
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	})
	for name, tc := range map[string]struct{ addr, want string }{
		"TLS alert": {alert, "the broker answered in TLS: that listener requires TLS (--kafka-tls)"},
		"HTTP":      {web, "an HTTP server answered, not a Kafka broker"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			connFails(t, []string{tc.addr}, Security{}, nil, tc.want)
		})
	}
}

// listen serves each connection to a local address with serve, until the
// test ends.
func listen(tb testing.TB, serve func(net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestDescribeConnError(t *testing.T) {
	t.Parallel()
	s := Security{CAFile: "/etc/ca.pem", CertFile: "/etc/client.crt", KeyFile: "/etc/client.key", SASL: "scram-sha-512", User: "inlet", Password: secret}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("sasl: %w", kerr.SaslAuthenticationFailed), `SASL authentication failed for user "inlet" with SCRAM-SHA-512`},
		{kerr.UnsupportedSaslMechanism, "do not accept SASL mechanism SCRAM-SHA-512"},
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "the brokers' certificate is not signed by --kafka-tls-ca /etc/ca.pem"},
		{x509.HostnameError{Host: "10.0.0.1", Certificate: &x509.Certificate{}}, `not valid for "10.0.0.1": set --kafka-tls-server-name`},
		{x509.CertificateInvalidError{Reason: x509.Expired}, "the brokers' certificate has expired"},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate")}, "the broker ended the TLS handshake: it refused the client certificate --kafka-tls-cert /etc/client.crt"},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, "not a TLS listener"},
		{fmt.Errorf("pinging: %w", &kgo.ErrFirstReadEOF{}), "not a TLS listener"},
		{errors.New("invalid large response size 352518912 > limit 104857600; the first three bytes received appear to be a tls alert record for TLS v1.2; is this a plaintext connection speaking to a tls endpoint?"), "that listener requires TLS"},
		{errors.New("dial tcp 127.0.0.1:1: connect:\nconnection refused"), "kafka: dial tcp 127.0.0.1:1: connect: connection refused"},
	} {
		got := s.DescribeConnError(tc.err)
		if !strings.Contains(got, tc.want) || strings.Contains(got, "\n") {
			t.Errorf("%v: got %q, want one line with %q", tc.err, got, tc.want)
		}
		wrapped := s.ConnErr(tc.err)
		if wrapped.Error() != got || !errors.Is(wrapped, tc.err) {
			t.Errorf("ConnErr(%v) = %v, not the description wrapping the error", tc.err, wrapped)
		}
	}
	noCA := Security{TLS: true}
	if got := noCA.DescribeConnError(x509.UnknownAuthorityError{}); !strings.Contains(got, "give their CA with --kafka-tls-ca") {
		t.Errorf("without a CA file: %q", got)
	}
	noCert := Security{TLS: true}
	if got := noCert.DescribeConnError(&kgo.ErrFirstReadEOF{}); !strings.Contains(got, "not a TLS listener") {
		t.Errorf("TLS, first read EOF: %q", got)
	}
	if got := (Security{}).DescribeConnError(&kgo.ErrFirstReadEOF{}); !strings.Contains(got, "requires TLS (--kafka-tls) or SASL") {
		t.Errorf("plaintext, first read EOF: %q", got)
	}
	if got := noCert.DescribeConnError(&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}); !strings.Contains(got, "requires a client certificate") {
		t.Errorf("without a client certificate: %q", got)
	}
	if s.ConnErr(nil) != nil {
		t.Error("ConnErr(nil) is not nil")
	}
}
