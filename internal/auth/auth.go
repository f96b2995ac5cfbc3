package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/inlet-dev/inlet/internal/filewatch"
)

// ErrOverBurst is a batch of more events than the client's burst: it
// could never be admitted, so it is refused at once rather than made to
// wait (HTTP 413). errors.Is(err, ErrRateLimited) holds for it too.
var ErrOverBurst error = &kindError{"auth: batch larger than the client's burst", ErrRateLimited}

// kindError is a sentinel that is also another.
type kindError struct {
	msg  string
	also error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.also }

// entry is a loaded client.
type entry struct {
	client *Client
	hash   [32]byte
	fp     [fingerprintLen]byte
	lim    *rate.Limiter // nil: no limit
}

// clientSet is one version of the clients file, replaced whole on reload.
type clientSet struct {
	byID   map[string]*entry
	byHash map[[32]byte]*entry
}

// Authenticator checks client credentials against the clients file, mints
// and verifies session tokens, and applies each client's rate and groups.
// It is safe for concurrent use.
type Authenticator struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	set atomic.Pointer[clientSet]
	key atomic.Pointer[[]byte]
	// verified are session tokens whose MAC was checked with key.
	verified tokenCache
	// fails throttles source addresses that present bad credentials; nil
	// when off.
	fails *failures
	// shared keeps the rates in Redis (Config.RateStore redis); nil:
	// each rate in e.lim only.
	shared *sharedRates
	// dummy is compared with a secret's hash for an unknown client id, so
	// that it takes the time a known one's wrong secret does.
	dummy [32]byte

	reloadMu    sync.Mutex // one reload at a time; guards the files
	clientsFile *filewatch.File
	keyFile     *filewatch.File // nil without Config.TokenKeyFile

	poll      filewatch.Poller
	closeOnce sync.Once
}

// Open loads cfg.ClientsFile (and cfg.TokenKeyFile) and checks them for
// changes every cfg.ReloadInterval until Close. A bad file at Open is an
// error; a bad file on reload is logged and the clients (or key) loaded
// before are kept. reg may be nil.
func Open(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Authenticator, error) {
	cfg = cfg.withDefaults()
	if cfg.ClientsFile == "" {
		return nil, errors.New("auth: no clients file: give --clients FILE (make one with `inlet clients add --file FILE NAME`)")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{cfg: cfg, log: log}
	a.m = newMetrics(a)
	if _, err := rand.Read(a.dummy[:]); err != nil {
		return nil, fmt.Errorf("auth: reading random bytes: %w", err)
	}
	a.fails = newFailures(cfg.FailBurst, cfg.FailEvery, cfg.FailSources, a.m.throttleEvictions.Inc)
	a.clientsFile = filewatch.NewFile(cfg.ClientsFile)
	cs, err := a.readClients()
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	a.set.Store(a.build(cs, nil))
	if cfg.RateStoreKind() == RateStoreRedis {
		a.shared = newSharedRates(cfg, log)
		a.m.fallbacks = a.shared.fallbacks
		a.shared.warm(log, cfg.RedisAddr)
	}
	ok := false
	defer func() {
		if !ok && a.shared != nil {
			_ = a.shared.close()
		}
	}()
	if cfg.TokenKeyFile != "" {
		a.keyFile = filewatch.NewFile(cfg.TokenKeyFile)
		key, err := readKey(cfg.TokenKeyFile)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		a.key.Store(&key)
	} else {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("auth: reading random bytes for the session key: %w", err)
		}
		a.key.Store(&key)
		log.Info("auth: session tokens are signed with a random key made at start: they are valid on this instance only, until it restarts; give every instance the same --auth-token-key-file to share them")
	}
	if reg != nil {
		if err := a.m.register(reg); err != nil {
			return nil, fmt.Errorf("auth: registering metrics: %w", err)
		}
	}
	log.Info("auth: clients loaded", "file", cfg.ClientsFile, "clients", len(cs), "rates", cfg.RateStoreKind(), "redis", cfg.RedisAddr)
	ok = true
	a.poll.Start(cfg.ReloadInterval, func() { _ = a.Check() })
	return a, nil
}

// readKey reads a session key file: its bytes without a trailing newline,
// at least MinKeyBytes of them.
func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --auth-token-key-file: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < MinKeyBytes {
		return nil, fmt.Errorf("--auth-token-key-file %s: %d bytes: want %d or more (for example: head -c 32 /dev/urandom | base64 > %s)", path, len(b), MinKeyBytes, path)
	}
	return b, nil
}

// readClients reads the clients file, and refuses hash rules without a
// key (Config.RedactKey).
func (a *Authenticator) readClients() ([]Client, error) {
	cs, err := ReadFile(a.cfg.ClientsFile)
	if err == nil {
		err = CheckHashKey(cs, a.cfg.RedactKey)
		if err != nil {
			err = fmt.Errorf("clients file %s: %w", a.cfg.ClientsFile, err)
		}
	}
	return cs, err
}

// build makes the lookup maps of a validated client list, keeping the rate
// limiters (and their state) of clients of old.
func (a *Authenticator) build(cs []Client, old *clientSet) *clientSet {
	s := &clientSet{byID: make(map[string]*entry, len(cs)), byHash: make(map[[32]byte]*entry, len(cs))}
	now := a.cfg.Now()
	for i := range cs {
		c := &cs[i]
		h, _ := parseHash(c.SecretSHA256) // validated
		e := &entry{client: c, hash: h, fp: fingerprint(h)}
		if c.Rate > 0 {
			lim, burst := rate.Limit(c.Rate), burstOf(c)
			if o := old.get(c.ID); o != nil && o.lim != nil {
				e.lim = o.lim
				if e.lim.Limit() != lim {
					e.lim.SetLimitAt(now, lim)
				}
				if e.lim.Burst() != burst {
					e.lim.SetBurstAt(now, burst)
				}
			} else {
				e.lim = rate.NewLimiter(lim, burst)
			}
		}
		s.byID[c.ID] = e
		s.byHash[h] = e
	}
	return s
}

func (s *clientSet) get(id string) *entry {
	if s == nil {
		return nil
	}
	return s.byID[id]
}

// burstOf is a client's burst: Burst, else its rate rounded up, at least 1.
func burstOf(c *Client) int {
	if c.Burst > 0 {
		return c.Burst
	}
	return int(max(1, math.Min(math.Ceil(c.Rate), math.MaxInt32)))
}

// Reload reads the clients file (and the key file) now, changed or not,
// and reports why it could not; the set loaded before is kept then.
func (a *Authenticator) Reload() error { return a.reload(true) }

// Check looks at the clients file (and the key file) now, as the poll
// does, and reloads those that changed.
func (a *Authenticator) Check() error { return a.reload(false) }

func (a *Authenticator) reload(force bool) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	errC := a.reloadClients(force)
	var errK error
	if a.keyFile != nil {
		errK = a.reloadKey(force)
	}
	return errors.Join(errC, errK)
}

func (a *Authenticator) reloadClients(force bool) error {
	if !a.clientsFile.Changed(force) {
		return nil
	}
	old := a.set.Load()
	cs, err := a.readClients()
	if err != nil {
		a.m.reloadErrors.Inc()
		a.log.Error("auth: clients file not reloaded: keeping the clients loaded before; fix the file", "err", err, "clients", len(old.byID))
		return fmt.Errorf("auth: %w", err)
	}
	s := a.build(cs, old)
	a.set.Store(s)
	var added, removed []string
	for id := range s.byID {
		if old.byID[id] == nil {
			added = append(added, id)
		}
	}
	for id := range old.byID {
		if s.byID[id] == nil {
			removed = append(removed, id)
			a.m.rateLimited.DeleteLabelValues(id)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	a.log.Info("auth: clients file reloaded", "file", a.cfg.ClientsFile, "clients", len(s.byID), "added", added, "removed", removed)
	return nil
}

func (a *Authenticator) reloadKey(force bool) error {
	if !a.keyFile.Changed(force) {
		return nil
	}
	key, err := readKey(a.cfg.TokenKeyFile)
	if err != nil {
		a.m.reloadErrors.Inc()
		a.log.Error("auth: session key not reloaded: keeping the key loaded before; fix the file", "err", err)
		return fmt.Errorf("auth: %w", err)
	}
	if !bytes.Equal(key, *a.key.Load()) {
		a.key.Store(&key)
		a.log.Info("auth: session key changed: session tokens signed with the old key are refused from now on; clients present their secret again", "file", a.cfg.TokenKeyFile)
	}
	return nil
}

// Close stops checking the files for changes, and closes the connections
// to Redis.
func (a *Authenticator) Close() error {
	a.poll.Close()
	var err error
	a.closeOnce.Do(func() {
		if a.shared != nil {
			err = a.shared.close()
		}
	})
	return err
}

// Clients returns the clients loaded now, in id order.
func (a *Authenticator) Clients() []Client {
	s := a.set.Load()
	out := make([]Client, 0, len(s.byID))
	for _, e := range s.byID {
		out = append(out, *e.client)
	}
	slices.SortFunc(out, func(x, y Client) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// Client returns the loaded client id, if there is one.
func (a *Authenticator) Client(id string) (Client, bool) {
	e := a.set.Load().byID[id]
	if e == nil {
		return Client{}, false
	}
	return *e.client, true
}

// Authenticate checks a client's credentials: token is its secret or a
// session token. clientID may be "" when the token identifies the client
// (a session token names it; a secret is found by its hash). For a secret
// the answer carries a new session token (Principal.Session) the client
// may present instead until Principal.Expires; for a session token, that
// token. Errors wrap ErrMissing, ErrBadCredentials, ErrExpired,
// ErrTampered or ErrWrongClient, and never contain the token. Failures are
// not throttled: see AuthenticateFrom.
func (a *Authenticator) Authenticate(clientID, token string) (Principal, error) {
	return a.AuthenticateFrom("", clientID, token)
}

// AuthenticateFrom is Authenticate for a caller at source, an IP address
// (the peer's, or the client's behind a trusted proxy): once source has
// presented bad credentials too often (Config.FailBurst, FailEvery), it is
// refused with ErrThrottled, whatever its credentials, until its failures
// have aged out. A source that is not an IP address ("") is not throttled.
func (a *Authenticator) AuthenticateFrom(source, clientID, token string) (Principal, error) {
	if err := a.throttled(source); err != nil {
		return Principal{}, err
	}
	p, err := a.authenticate(clientID, token, true)
	if err != nil {
		a.failed(source, err)
	}
	return p, err
}

// throttled refuses source while it has failed too often.
func (a *Authenticator) throttled(source string) error {
	if d := a.fails.wait(source, a.cfg.Now()); d > 0 {
		err := &throttleError{wait: d}
		a.m.fail(err)
		return err
	}
	return nil
}

// failed counts a refused credential, and, when it was a guess (not
// missing credentials nor a session token past its expiry), a failure of
// source.
func (a *Authenticator) failed(source string, err error) {
	a.m.fail(err)
	if !errors.Is(err, ErrMissing) && !errors.Is(err, ErrExpired) {
		a.fails.fail(source, a.cfg.Now())
	}
}

// authenticate is Authenticate; with mint false, a secret gets no session
// token (an HTTP request has no way to hand one back, and minting is an
// HMAC per request).
func (a *Authenticator) authenticate(clientID, token string, mint bool) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("%w: give the client's secret or a session token", ErrMissing)
	}
	s := a.set.Load()
	if IsSessionToken(token) {
		return a.session(s, clientID, token)
	}
	h := sha256.Sum256([]byte(token))
	var e *entry
	if clientID == "" {
		// A map lookup by the hash: its timing depends on the hash, which
		// tells nothing of the secret.
		if e = s.byHash[h]; e == nil {
			return Principal{}, ErrBadCredentials
		}
	} else {
		// One path for an unknown id and a wrong secret: an unknown id's
		// secret is compared with a hash no secret has, in the same time.
		e = s.byID[clientID]
		want := &a.dummy
		if e != nil {
			want = &e.hash
		}
		if subtle.ConstantTimeCompare(h[:], want[:]) != 1 || e == nil {
			return Principal{}, ErrBadCredentials
		}
	}
	if !mint {
		return Principal{Client: e.client}, nil
	}
	exp := a.cfg.Now().Add(a.cfg.TokenTTL).Truncate(time.Second)
	tok, err := mintToken(*a.key.Load(), e.client.ID, e.fp, exp)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Client: e.client, Session: tok, Expires: exp}, nil
}

// session checks a session token: its MAC, then its expiry, then that it
// is clientID's, then that its client (and secret) is still in the file.
func (a *Authenticator) session(s *clientSet, clientID, token string) (Principal, error) {
	key := a.key.Load()
	c, ok := a.verified.get(key, token)
	if !ok {
		var err error
		if c, err = parseToken(*key, token); err != nil {
			return Principal{}, err
		}
		a.verified.add(key, token, c)
	}
	if !a.cfg.Now().Before(c.exp) {
		return Principal{}, fmt.Errorf("%w at %s: present the secret again for a new one", ErrExpired, c.exp.UTC().Format(time.RFC3339))
	}
	if clientID != "" && clientID != c.id {
		// Whether clientID exists or not: the answer must not tell.
		return Principal{}, ErrWrongClient
	}
	e := s.byID[c.id]
	if e == nil {
		return Principal{}, fmt.Errorf("%w: client %q of this session token was removed", ErrBadCredentials, c.id)
	}
	if subtle.ConstantTimeCompare(c.fp[:], e.fp[:]) != 1 {
		return Principal{}, fmt.Errorf("%w: client %q has a new secret since this session token was made: present it", ErrExpired, c.id)
	}
	return Principal{Client: e.client, Session: token, Expires: c.exp}, nil
}

// tokenCacheSize bounds the session tokens remembered as verified: past it
// the cache starts again empty.
const tokenCacheSize = 4096

// tokenCache remembers what session tokens say once their MAC checked, so
// that a client presenting its token on every call costs a map lookup
// rather than two base64 decodes and an HMAC each time. What a token says
// is checked on every call still (expiry, client, secret's fingerprint).
// Entries are of one key: a new key empties it. Only a token presented
// before, byte for byte, is found; the lookup's timing depends on a seeded
// hash of the presented token, which tells an attacker nothing of tokens
// they do not already hold.
type tokenCache struct {
	mu  sync.RWMutex
	key *[]byte
	m   map[string]claims
}

func (t *tokenCache) get(key *[]byte, token string) (claims, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.key != key {
		return claims{}, false
	}
	c, ok := t.m[token]
	return c, ok
}

func (t *tokenCache) add(key *[]byte, token string, c claims) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.key != key || len(t.m) >= tokenCacheSize {
		t.key, t.m = key, make(map[string]claims)
	}
	t.m[token] = c
}

// FromHTTP authenticates an HTTP request by, in this order:
//
//	Authorization: Bearer <token>
//	Authorization: Basic base64(<client id>:<token>)  (the write-key convention;
//	               base64(<token>:) with an empty password works too)
//	?k=<token>     (pixels and sendBeacon, which cannot set headers)
//
// where token is a secret or a session token. A secret gets no new session
// token (Principal.Session is empty). No credentials: ErrMissing;
// a malformed Authorization header: ErrMissing with what is wrong.
// source is the caller's address, throttled as AuthenticateFrom does.
func (a *Authenticator) FromHTTP(r *http.Request, source string) (Principal, error) {
	if err := a.throttled(source); err != nil {
		return Principal{}, err
	}
	p, err := a.fromHTTP(r)
	if err != nil {
		a.failed(source, err)
	}
	return p, err
}

func (a *Authenticator) fromHTTP(r *http.Request) (Principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, _ := strings.Cut(strings.TrimSpace(h), " ")
		cred = strings.TrimSpace(cred)
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			if cred == "" {
				return Principal{}, fmt.Errorf("%w: empty Bearer token in the Authorization header", ErrMissing)
			}
			return a.authenticate("", cred, false)
		case strings.EqualFold(scheme, "Basic"):
			id, tok, err := parseBasic(cred)
			if err != nil {
				return Principal{}, err
			}
			return a.authenticate(id, tok, false)
		default:
			if len(scheme) > 16 || strings.ContainsFunc(scheme, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
				return Principal{}, fmt.Errorf("%w: malformed Authorization header: want Bearer TOKEN or Basic CREDENTIALS", ErrMissing)
			}
			return Principal{}, fmt.Errorf("%w: Authorization scheme %q: want Bearer or Basic", ErrMissing, scheme)
		}
	}
	if k := r.URL.Query().Get(QueryParam); k != "" {
		return a.authenticate("", k, false)
	}
	return Principal{}, fmt.Errorf("%w: send Authorization: Bearer <secret or session token>, Basic with the client id as user, or k=<token> in the query", ErrMissing)
}

// QueryParam is the query parameter that carries credentials (k=).
const QueryParam = "k"

// WithoutCredentials is the raw query q without its credentials (every
// k= parameter, however its name is escaped, with a value or not), the
// other parameters as they were sent. Use it wherever a query is kept or
// shown: a record, a dead letter, a log line, a page. It returns q itself
// when there is nothing to take out.
func WithoutCredentials(q string) string {
	if !strings.Contains(q, QueryParam) && !strings.Contains(q, "%") {
		return q
	}
	has := false
	for part := range strings.SplitSeq(q, "&") {
		if isCredential(part) {
			has = true
			break
		}
	}
	if !has {
		return q // without allocating: most queries
	}
	var b strings.Builder
	for part := range strings.SplitSeq(q, "&") {
		if isCredential(part) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(part)
	}
	return b.String()
}

// isCredential reports whether the query pair part is a k= (its name
// escaped or not; a name that cannot be unescaped but may spell k is
// taken as one).
func isCredential(part string) bool {
	name, _, _ := strings.Cut(part, "=")
	if name == QueryParam {
		return true
	}
	if !strings.Contains(name, "%") {
		return false
	}
	u, err := url.QueryUnescape(name)
	return u == QueryParam || (err != nil && strings.Contains(strings.ToLower(name), "%6b"))
}

// parseBasic reads Basic credentials: (id, token), or ("", token) for a
// token as the user with an empty password (or as the password with an
// empty user).
func parseBasic(cred string) (id, token string, err error) {
	b, err := base64.StdEncoding.DecodeString(cred)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(cred); err != nil {
			return "", "", fmt.Errorf("%w: malformed Basic credentials: not base64", ErrMissing)
		}
	}
	user, pass, ok := strings.Cut(string(b), ":")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%w: malformed Basic credentials: want base64(client-id:secret)", ErrMissing)
	case user == "" && pass == "":
		return "", "", fmt.Errorf("%w: empty Basic credentials", ErrMissing)
	case pass == "":
		return "", user, nil
	case user == "":
		return "", pass, nil
	}
	return user, pass, nil
}

// Allow takes n tokens (a batch of n events, or one call) from p's client's
// rate limit. Over the rate it refuses with an error wrapping
// ErrRateLimited and how long until n tokens are there (for Retry-After);
// n more than the client's burst is refused at once with ErrOverBurst.
// A client without a rate is always allowed. With Config.RateStore redis
// the tokens are taken in Redis, shared by every instance on it; when
// Redis does not answer within Config.RateTimeout they are taken from this
// instance's own limiter (counted and logged), and Redis is left alone
// for Config.RateRetry. Allow never blocks longer than RateTimeout.
func (a *Authenticator) Allow(p Principal, n int) (retryAfter time.Duration, err error) {
	if p.Client == nil {
		return 0, fmt.Errorf("%w: no authenticated client", ErrMissing)
	}
	e := a.set.Load().byID[p.Client.ID]
	if e == nil {
		a.m.fail(ErrBadCredentials)
		return 0, fmt.Errorf("%w: client %q was removed", ErrBadCredentials, p.Client.ID)
	}
	if e.lim == nil || n <= 0 {
		return 0, nil
	}
	rt, burst := float64(e.lim.Limit()), e.lim.Burst()
	if n > burst {
		a.m.rateLimited.WithLabelValues(e.client.ID).Inc()
		return 0, fmt.Errorf("%w: %d events at once, client %q may send at most %d: send smaller batches", ErrOverBurst, n, e.client.ID, burst)
	}
	d, shared := time.Duration(0), false
	if a.shared != nil {
		d, shared = a.shared.allow(e.client.ID, rt, burst, n)
	}
	if !shared {
		now := a.cfg.Now()
		r := e.lim.ReserveN(now, n)
		if d = r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
		}
	}
	if d > 0 {
		a.m.rateLimited.WithLabelValues(e.client.ID).Inc()
		return d, fmt.Errorf("%w: client %q may send %g events/s (burst %d); retry in %v", ErrRateLimited, e.client.ID, rt, burst, d.Round(time.Millisecond))
	}
	return 0, nil
}

// AllowGroup refuses (ErrForbidden) a group p's client is not limited to;
// a client with no groups may use all.
func (a *Authenticator) AllowGroup(p Principal, group string) error {
	if p.Client == nil {
		return fmt.Errorf("%w: no authenticated client", ErrMissing)
	}
	if len(p.Client.Groups) == 0 || slices.Contains(p.Client.Groups, group) {
		return nil
	}
	a.m.fail(ErrForbidden)
	return fmt.Errorf("%w: client %q may not use group %q", ErrForbidden, p.Client.ID, group)
}

// HTTPStatus is the HTTP status of an error of this package: 401 for
// missing or bad credentials, 403 for ErrForbidden, 429 for
// ErrRateLimited and ErrThrottled, 413 for ErrOverBurst; 200 for nil and
// 500 for others.
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrOverBurst):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrMissing), errors.Is(err, ErrBadCredentials), errors.Is(err, ErrExpired), errors.Is(err, ErrTampered), errors.Is(err, ErrWrongClient):
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// Challenges of a 401's WWW-Authenticate header.
const (
	Realm           = "inlet"
	BearerChallenge = `Bearer realm="inlet"`
	// BasicChallenge makes browsers ask for a user and password: send it
	// only where that is wanted (not to pixels and beacons).
	BasicChallenge = `Basic realm="inlet", charset="UTF-8"`
)

// WWWAuthenticate is the WWW-Authenticate value of a 401 for err: the
// Bearer challenge, with error="invalid_token" (RFC 6750) when credentials
// were given but refused. The description is the error's kind only.
func WWWAuthenticate(err error) string {
	for _, k := range []error{ErrBadCredentials, ErrExpired, ErrTampered, ErrWrongClient} {
		if errors.Is(err, k) {
			return BearerChallenge + `, error="invalid_token", error_description="` + strings.TrimPrefix(k.Error(), "auth: ") + `"`
		}
	}
	return BearerChallenge
}

// Reason is a short label of an error of this package, as the metrics
// count it: missing, bad_credentials, expired, tampered, wrong_client,
// forbidden, throttled, rate_limited, over_burst, or "" for others.
func Reason(err error) string {
	for _, k := range reasons {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return ""
}

var reasons = []struct {
	err  error
	name string
}{
	{ErrMissing, "missing"}, {ErrBadCredentials, "bad_credentials"},
	{ErrExpired, "expired"}, {ErrTampered, "tampered"}, {ErrWrongClient, "wrong_client"},
	{ErrForbidden, "forbidden"}, {ErrThrottled, "throttled"},
	{ErrOverBurst, "over_burst"}, {ErrRateLimited, "rate_limited"},
}

// metrics are the package's Prometheus metrics.
type metrics struct {
	failures          *prometheus.CounterVec
	rateLimited       *prometheus.CounterVec
	reloadErrors      prometheus.Counter
	clients           prometheus.GaugeFunc
	throttleEvictions prometheus.Counter
	throttleSources   prometheus.GaugeFunc
	fallbacks         prometheus.Counter // with shared rates only
}

func newMetrics(a *Authenticator) *metrics {
	m := &metrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_auth_failures_total",
			Help: "Credentials refused, by reason (missing, bad_credentials, expired, tampered, wrong_client, forbidden, throttled: refused unchecked, its address having failed too often).",
		}, []string{"reason"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inlet_auth_rate_limited_total",
			Help: "Requests refused over their client's rate, by client id (of the clients file).",
		}, []string{"client"}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_auth_reload_errors_total",
			Help: "Reloads of the clients or key file that failed (the previous contents were kept).",
		}),
		clients: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_auth_clients",
			Help: "Clients loaded from the clients file.",
		}, func() float64 {
			if s := a.set.Load(); s != nil {
				return float64(len(s.byID))
			}
			return 0
		}),
		throttleEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inlet_auth_throttle_evictions_total",
			Help: "Addresses with recent bad credentials forgotten to make room for another (the table holds 65,536): each gets its --auth-fail-burst again.",
		}),
		throttleSources: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inlet_auth_throttle_sources",
			Help: "Source addresses remembered for their recent bad credentials.",
		}, func() float64 { return float64(a.fails.len()) }),
	}
	for _, k := range reasons[:7] {
		m.failures.WithLabelValues(k.name) // export zeros
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{m.failures, m.rateLimited, m.reloadErrors, m.clients, m.throttleEvictions, m.throttleSources}
	if m.fallbacks != nil {
		cs = append(cs, m.fallbacks)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// fail counts a refused credential.
func (m *metrics) fail(err error) {
	if r := Reason(err); r != "" && r != "rate_limited" && r != "over_burst" {
		m.failures.WithLabelValues(r).Inc()
	}
}
