package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security is how every Kafka client of inlet encrypts and authenticates
// its connections to the brokers: TLS (optionally with a client
// certificate, mTLS) and SASL PLAIN or SCRAM. The zero value is plaintext
// without authentication, as before. Every subcommand registers the same
// flags (RegisterFlags), so they have the same names and INLET_* variables.
//
// The password is never printed: String, GoString, LogValue and
// MarshalJSON redact it, and no error of this file includes it.
type Security struct {
	// TLS turns TLS on; it is on too when any other TLS field is set
	// (TLSEnabled).
	TLS bool
	// CAFile holds the PEM certificates of the CAs that sign the brokers'
	// certificates; empty: the system's pool.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate (its chain) and
	// key, for brokers that require client authentication (mTLS).
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must hold; empty:
	// the host of each broker's address.
	ServerName string
	// InsecureSkipVerify accepts any broker certificate (logs a warning).
	InsecureSkipVerify bool
	// SASL is the mechanism: "" (none), plain, scram-sha-256 or
	// scram-sha-512.
	SASL string
	// User and Password (or PasswordFile, whose first line is the
	// password) are the SASL credentials.
	User, Password, PasswordFile string
}

// SASL mechanisms, as --kafka-sasl names them.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// RegisterFlags binds s to the --kafka-tls* and --kafka-sasl* flags of fs;
// the defaults are s's values.
func (s *Security) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&s.TLS, "kafka-tls", s.TLS, "connect to Kafka over TLS (on with any --kafka-tls-* flag)")
	fs.StringVar(&s.CAFile, "kafka-tls-ca", s.CAFile, "PEM `file` of the CAs that sign the brokers' certificates (default: the system's)")
	fs.StringVar(&s.CertFile, "kafka-tls-cert", s.CertFile, "PEM client certificate `file`, for brokers that require one (mTLS; with --kafka-tls-key)")
	fs.StringVar(&s.KeyFile, "kafka-tls-key", s.KeyFile, "PEM key `file` of --kafka-tls-cert")
	fs.StringVar(&s.ServerName, "kafka-tls-server-name", s.ServerName, "`name` the brokers' certificates must hold (default: each broker's host)")
	fs.BoolVar(&s.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", s.InsecureSkipVerify, "accept any broker certificate (insecure: for tests only)")
	fs.StringVar(&s.SASL, "kafka-sasl", s.SASL, "SASL `mechanism`: plain, scram-sha-256 or scram-sha-512 (default: none)")
	fs.StringVar(&s.User, "kafka-sasl-user", s.User, "SASL user")
	fs.StringVar(&s.Password, "kafka-sasl-password", s.Password, "SASL password (prefer --kafka-sasl-password-file)")
	fs.StringVar(&s.PasswordFile, "kafka-sasl-password-file", s.PasswordFile, "`file` whose first line is the SASL password")
}

// TLSEnabled reports whether the clients connect over TLS: TLS is set or
// any other TLS setting is.
func (s Security) TLSEnabled() bool {
	return s.TLS || s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" ||
		s.ServerName != "" || s.InsecureSkipVerify
}

// Validate reports the first invalid setting as one line naming the flag:
// a certificate without its key, an unreadable or empty file, a CA file
// without certificates, an expired client certificate, an unknown
// mechanism, credentials without a mechanism or a mechanism without them.
// It reads the files, so it also says what Opts would fail on.
func (s Security) Validate() error {
	_, err := s.tlsConfig(time.Now())
	if err != nil {
		return err
	}
	_, err = s.mechanism()
	return err
}

// Opts returns the client options of s: kgo.DialTLSConfig and kgo.SASL,
// none for the zero value. It validates s first. log (which may be nil)
// gets a warning for InsecureSkipVerify and for a password sent without
// TLS.
func (s Security) Opts(log *slog.Logger) ([]kgo.Opt, error) {
	return s.opts(log, time.Now())
}

// opts is Opts checking the client certificate's validity at now (the zero
// time: not at all, for tests of what the brokers say about it).
func (s Security) opts(log *slog.Logger, now time.Time) ([]kgo.Opt, error) {
	tc, err := s.tlsConfig(now)
	if err != nil {
		return nil, err
	}
	m, err := s.mechanism()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var opts []kgo.Opt
	if tc != nil {
		if s.InsecureSkipVerify {
			log.Warn("kafka: --kafka-tls-insecure-skip-verify: the brokers' certificates are not checked; anyone on the path can read and change the traffic")
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m != nil {
		if tc == nil && strings.EqualFold(s.SASL, SASLPlain) {
			log.Warn("kafka: --kafka-sasl plain without --kafka-tls sends the password in clear")
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// tlsConfig returns s's TLS configuration (nil when TLS is off), checking
// the client certificate's validity at now unless now is zero.
func (s Security) tlsConfig(now time.Time) (*tls.Config, error) {
	if !s.TLSEnabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify} //nolint:gosec // InsecureSkipVerify is the user's explicit choice, and logged
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--kafka-tls-ca %s holds no PEM certificate", s.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case s.CertFile != "" && s.KeyFile == "":
		return nil, errors.New("--kafka-tls-cert needs --kafka-tls-key (the certificate's private key)")
	case s.KeyFile != "" && s.CertFile == "":
		return nil, errors.New("--kafka-tls-key needs --kafka-tls-cert (the client certificate)")
	case s.CertFile != "":
		for _, f := range []struct{ flag, path string }{{"--kafka-tls-cert", s.CertFile}, {"--kafka-tls-key", s.KeyFile}} {
			if _, err := os.ReadFile(f.path); err != nil {
				return nil, fmt.Errorf("%s: %w", f.flag, err)
			}
		}
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-cert %s / --kafka-tls-key %s: %w", s.CertFile, s.KeyFile, err)
		}
		if !now.IsZero() {
			leaf := cert.Leaf
			if leaf == nil {
				if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
					return nil, fmt.Errorf("--kafka-tls-cert %s: %w", s.CertFile, err)
				}
			}
			if now.After(leaf.NotAfter) {
				return nil, fmt.Errorf("--kafka-tls-cert %s expired on %s: the brokers will refuse it; renew it", s.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
			}
			if now.Before(leaf.NotBefore) {
				return nil, fmt.Errorf("--kafka-tls-cert %s is not valid before %s: the brokers will refuse it (or this clock is wrong)", s.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
			}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// mechanism returns s's SASL mechanism, nil when SASL is off.
func (s Security) mechanism() (sasl.Mechanism, error) {
	mech := strings.ToLower(s.SASL)
	if mech == "" {
		if s.User != "" || s.Password != "" || s.PasswordFile != "" {
			return nil, errors.New("--kafka-sasl-user and --kafka-sasl-password need --kafka-sasl (plain, scram-sha-256 or scram-sha-512)")
		}
		return nil, nil
	}
	switch mech {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		return nil, fmt.Errorf("--kafka-sasl %q: unknown mechanism (want plain, scram-sha-256 or scram-sha-512)", s.SASL)
	}
	if s.User == "" {
		return nil, fmt.Errorf("--kafka-sasl %s needs --kafka-sasl-user", mech)
	}
	if s.Password != "" && s.PasswordFile != "" {
		return nil, errors.New("give --kafka-sasl-password or --kafka-sasl-password-file, not both")
	}
	pass := s.Password
	if s.PasswordFile != "" {
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-sasl-password-file: %w", err)
		}
		pass, _, _ = strings.Cut(string(b), "\n")
		pass = strings.TrimSuffix(pass, "\r")
		if pass == "" {
			return nil, fmt.Errorf("--kafka-sasl-password-file %s: the first line is empty", s.PasswordFile)
		}
	}
	if pass == "" {
		return nil, fmt.Errorf("--kafka-sasl %s needs --kafka-sasl-password or --kafka-sasl-password-file", mech)
	}
	switch mech {
	case SASLPlain:
		return plain.Auth{User: s.User, Pass: pass}.AsMechanism(), nil
	case SASLScramSHA256:
		return scram.Auth{User: s.User, Pass: pass}.AsSha256Mechanism(), nil
	default:
		return scram.Auth{User: s.User, Pass: pass}.AsSha512Mechanism(), nil
	}
}

// redacted is s without its password, for printing.
func (s Security) redacted() map[string]any {
	m := map[string]any{}
	if s.TLSEnabled() {
		m["tls"] = true
		for k, v := range map[string]string{"ca": s.CAFile, "cert": s.CertFile, "key": s.KeyFile, "server_name": s.ServerName} {
			if v != "" {
				m[k] = v
			}
		}
		if s.InsecureSkipVerify {
			m["insecure_skip_verify"] = true
		}
	}
	if s.SASL != "" || s.User != "" {
		m["sasl"] = s.SASL
		m["user"] = s.User
	}
	switch {
	case s.PasswordFile != "":
		m["password_file"] = s.PasswordFile
	case s.Password != "":
		m["password"] = "REDACTED"
	}
	return m
}

// String describes s for a banner or a log line, without the password:
// e.g. "tls ca=/etc/ca.pem sasl=scram-sha-512 user=inlet password=REDACTED".
func (s Security) String() string {
	m := s.redacted()
	if len(m) == 0 {
		return "plaintext"
	}
	var b strings.Builder
	for _, k := range []string{"tls", "ca", "cert", "key", "server_name", "insecure_skip_verify", "sasl", "user", "password", "password_file"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if v == true {
			b.WriteString(k)
			continue
		}
		fmt.Fprintf(&b, "%s=%v", k, v)
	}
	return b.String()
}

// GoString is String, so that %#v does not print the password either.
func (s Security) GoString() string { return "kafka.Security{" + s.String() + "}" }

// LogValue implements slog.LogValuer: s's settings as a group, the
// password redacted.
func (s Security) LogValue() slog.Value {
	m := s.redacted()
	attrs := make([]slog.Attr, 0, len(m))
	for _, k := range []string{"tls", "ca", "cert", "key", "server_name", "insecure_skip_verify", "sasl", "user", "password", "password_file"} {
		if v, ok := m[k]; ok {
			attrs = append(attrs, slog.Any(k, v))
		}
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON writes s without its password.
func (s Security) MarshalJSON() ([]byte, error) { return json.Marshal(s.redacted()) }

// ConnError is a failure to connect to Kafka, described in one line that
// says the likely cause and what to do (Error), with the client's error
// kept for errors.Is and errors.As (Unwrap).
type ConnError struct {
	Desc string
	Err  error
}

func (e *ConnError) Error() string { return e.Desc }
func (e *ConnError) Unwrap() error { return e.Err }

// ConnErr wraps err, a failure to reach or talk to the brokers with s's
// settings, in a ConnError whose message says what is wrong when it is a
// known TLS or SASL failure (DescribeConnError); nil stays nil.
func (s Security) ConnErr(err error) error {
	if err == nil {
		return nil
	}
	return &ConnError{Desc: s.DescribeConnError(err), Err: err}
}

// DescribeConnError returns one line for err, a failure to reach or talk to
// the brokers with s's settings: what it means for a known TLS or SASL
// failure (wrong credentials, a broker certificate not signed by
// --kafka-tls-ca or not for the name dialed, a client certificate the
// broker refused, TLS against a plaintext port or plaintext against a TLS
// or SASL one), else "kafka: " and err.
func (s Security) DescribeConnError(err error) string {
	if d := s.describe(err); d != "" {
		return "kafka: " + d + " (" + oneLine(err) + ")"
	}
	return "kafka: " + oneLine(err)
}

func (s Security) describe(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		opErr     *net.OpError
		recErr    tls.RecordHeaderError
		firstEOF  *kgo.ErrFirstReadEOF
	)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Sprintf("SASL authentication failed for user %q with %s: wrong user or password (--kafka-sasl-user, --kafka-sasl-password)", s.User, strings.ToUpper(s.SASL))
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Sprintf("the brokers do not accept SASL mechanism %s on this listener (--kafka-sasl)", strings.ToUpper(s.SASL))
	case errors.Is(err, kerr.IllegalSaslState):
		return "the brokers do not expect SASL on this listener: drop --kafka-sasl or use their SASL listener"
	case errors.As(err, &unknownCA):
		if s.CAFile == "" {
			return "the brokers' certificate is not signed by a CA this system trusts: give their CA with --kafka-tls-ca"
		}
		return "the brokers' certificate is not signed by --kafka-tls-ca " + s.CAFile
	case errors.As(err, &hostErr):
		return fmt.Sprintf("the brokers' certificate is not valid for %q: set --kafka-tls-server-name to a name it holds", hostErr.Host)
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "the brokers' certificate has expired or is not valid yet (or this clock is wrong)"
		}
		return "the brokers' certificate is invalid"
	case errors.As(err, &recErr):
		return "the brokers did not answer in TLS: that address is not a TLS listener (drop --kafka-tls or use the brokers' TLS port)"
	case errors.As(err, &firstEOF):
		if s.TLSEnabled() {
			return "the broker closed the connection at once: that address is probably not a TLS listener (drop --kafka-tls or use the brokers' TLS port)"
		}
		if s.SASL == "" {
			return "the broker closed the connection at once: that listener probably requires TLS (--kafka-tls) or SASL (--kafka-sasl)"
		}
		return "the broker closed the connection at once: that listener probably requires TLS (--kafka-tls)"
	// kgo's guesses from a response size that reads as a TLS alert or as
	// "HTTP" (brokerCxn.readSizeAndBody in franz-go v1.22.3) are errors made with
	// fmt.Errorf and nothing to match but their text: no type, no
	// sentinel, no %w. TestKgoConnErrorText fails when kgo changes it.
	case strings.Contains(err.Error(), "plaintext connection speaking to a tls endpoint"):
		return "the broker answered in TLS: that listener requires TLS (--kafka-tls)"
	case strings.Contains(err.Error(), "the beginning of an HTTP response"):
		return "an HTTP server answered, not a Kafka broker: check the brokers' addresses and ports"
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		if s.CertFile == "" {
			return "the broker ended the TLS handshake: it requires a client certificate (--kafka-tls-cert, --kafka-tls-key)"
		}
		return "the broker ended the TLS handshake: it refused the client certificate --kafka-tls-cert " + s.CertFile + " (expired, or not signed by a CA the brokers trust)"
	}
	return ""
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
