package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inlet-dev/inlet/internal/filewatch"
)

// HTTPS for clients: --tls-cert and --tls-key, served through
// tls.Config.GetCertificate from a certReloader, so that a new certificate
// (SIGHUP, or the files changed) is used by the next handshake while the
// connections open go on with the one they have: none is dropped.

// validateTLS checks the HTTPS settings and that the files hold a usable
// certificate and key.
func (c Config) validateTLS() error {
	switch {
	case c.TLSCert == "" && c.TLSKey == "" && c.TLSListen == "":
		return nil
	case c.TLSCert == "" || c.TLSKey == "":
		return errors.New("--tls-cert and --tls-key go together (and --tls-listen needs them)")
	case c.TLSReloadInterval < 0:
		return errors.New("--tls-reload-interval must not be negative")
	}
	_, err := loadCert(c.TLSCert, c.TLSKey)
	return err
}

// loadCert reads and checks a certificate and its key.
func loadCert(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %w", certFile, err)
		}
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("--tls-cert %s expired on %s: renew it", certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, nil
}

// certReloader holds the HTTPS certificate and loads it again when its
// poller, or a SIGHUP (Gateway.Reload), sees either file change. A certificate that does not
// load (unreadable, a key that does not match, expired) is logged and the
// one in use kept; it is tried again at the files' next change (a
// certificate written before its key loads at the key's write).
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	cert              atomic.Pointer[tls.Certificate]

	mu    sync.Mutex // one load at a time; guards the files
	files [2]*filewatch.File
	poll  filewatch.Poller
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log,
		files: [2]*filewatch.File{filewatch.NewFile(certFile), filewatch.NewFile(keyFile)}}
	c, err := loadCert(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert.Store(c)
	return r, nil
}

// getCertificate is tls.Config.GetCertificate.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// reload loads the certificate and key when either file changed since the
// last look, or force; on failure the certificate in use stays, and the
// error is logged and returned. Both files are looked at every time, so that a
// change to one is not reported again at the next look.
func (r *certReloader) reload(why string, force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cert, key := r.files[0].Changed(force), r.files[1].Changed(force)
	if !cert && !key {
		return nil
	}
	c, err := loadCert(r.certFile, r.keyFile)
	if err != nil {
		r.log.Error("HTTPS certificate not reloaded; keeping the one in use", "why", why, "err", err,
			"in_use_expires", r.cert.Load().Leaf.NotAfter.UTC().Format(time.RFC3339))
		return err
	}
	r.cert.Store(c)
	r.log.Info("HTTPS certificate reloaded", "why", why, "subject", c.Leaf.Subject.String(),
		"dns", c.Leaf.DNSNames, "expires", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// watch reloads when the files change, looking every interval until Close.
func (r *certReloader) watch(interval time.Duration) {
	r.poll.Start(interval, func() { _ = r.reload("the files changed", false) })
}

// Close stops watching the files.
func (r *certReloader) Close() { r.poll.Close() }

// tlsConfig is the HTTPS server's configuration: TLS 1.2 at least, the
// certificate from r on every handshake.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
}
