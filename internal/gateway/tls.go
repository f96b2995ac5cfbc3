package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
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

// certReloader holds the HTTPS certificate and loads it again on Reload,
// or when poll sees the files' modification times change. A certificate
// that does not load (unreadable, a key that does not match, expired) is
// logged and the one in use kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	cert              atomic.Pointer[tls.Certificate]

	mu    sync.Mutex // one load at a time; guards mtime
	mtime [2]time.Time
}

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	r.mtime = r.modTimes()
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

func (r *certReloader) modTimes() [2]time.Time {
	var m [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			m[i] = fi.ModTime()
		}
	}
	return m
}

// Reload loads the certificate and key again. On failure the certificate
// in use stays, and the error is logged and returned.
func (r *certReloader) Reload(why string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload(why, r.modTimes())
}

func (r *certReloader) reload(why string, mtime [2]time.Time) error {
	c, err := loadCert(r.certFile, r.keyFile)
	if err != nil {
		r.log.Error("HTTPS certificate not reloaded; keeping the one in use", "why", why, "err", err,
			"in_use_expires", r.cert.Load().Leaf.NotAfter.UTC().Format(time.RFC3339))
		return err
	}
	r.mtime = mtime
	r.cert.Store(c)
	r.log.Info("HTTPS certificate reloaded", "why", why, "subject", c.Leaf.Subject.String(),
		"dns", c.Leaf.DNSNames, "expires", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// poll reloads when the files' modification times changed since the last
// load, every interval until stop is closed. A failed load is tried again
// at the next change only (a certificate written before its key loads at
// the key's write).
func (r *certReloader) poll(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var failed [2]time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		if m := r.modTimes(); m != r.mtime && m != failed {
			if r.reload("the files changed", m) != nil {
				failed = m
			}
		}
		r.mu.Unlock()
	}
}

// tlsConfig is the HTTPS server's configuration: TLS 1.2 at least, the
// certificate from r on every handshake.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate}
}
