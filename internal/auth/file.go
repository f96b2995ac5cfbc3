package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/inlet-dev/inlet/internal/privacy"
)

// File is the clients file: {"clients":[...]}.
type File struct {
	Clients []Client `json:"clients"`
}

// idPattern is what a client id may be: it appears in Basic credentials,
// metrics labels and enriched events.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidID reports whether id may name a client.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// SecretBytes is the size of a secret's random part: 256 bits.
const SecretBytes = 32

// NewSecret returns a new secret: 32 random bytes, base64url (43
// characters, no padding), and its hex SHA-256 for the clients file.
func NewSecret() (secret, sha256Hex string, err error) {
	b := make([]byte, SecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("auth: reading random bytes for a secret: %w", err)
	}
	secret = base64.RawURLEncoding.EncodeToString(b)
	return secret, HashSecret(secret), nil
}

// HashSecret is the hex SHA-256 of a secret, as the clients file stores it.
//
// A fast, unsalted hash is right here and would be wrong for passwords.
// Stretching (bcrypt, scrypt, argon2) and salts exist because passwords
// come from a small space people choose from, so whoever reads the hashes
// can try likely passwords by the billion; making each try slow is the only
// defence. A secret made by NewSecret has 256 bits from crypto/rand: there
// is nothing likely to try, and inverting SHA-256 on a 2^256 space is out
// of reach however fast one hash is. A fast hash also lets every request
// be checked in well under a microsecond, and lets a bare secret find its
// client by looking its hash up in a map. Never use this for
// secrets people choose.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// decodeOptions make reading the clients file strict: field names exactly
// as written, unknown fields, duplicate names and invalid UTF-8 rejected.
var decodeOptions = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// ParseFile decodes and validates the contents of a clients file.
func ParseFile(b []byte) ([]Client, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New(`empty file: want {"clients":[...]}`)
	}
	var f File
	if err := json.Unmarshal(b, &f, decodeOptions); err != nil {
		return nil, err
	}
	if err := ValidateClients(f.Clients); err != nil {
		return nil, err
	}
	return f.Clients, nil
}

// ValidateClients checks a list of clients: ids unique and well formed, each
// secret_sha256 64 hex digits and no two alike, rate and burst not
// negative, no empty group names, redaction rules that compile (which it
// does: Client.Redaction).
func ValidateClients(cs []Client) error {
	ids := make(map[string]bool, len(cs))
	hashes := make(map[[32]byte]string, len(cs))
	for i := range cs {
		rs, err := privacy.Compile(cs[i].Redact)
		if err != nil {
			return fmt.Errorf("client %q: redact: %w", cs[i].ID, err)
		}
		cs[i].redact = rs
	}
	for i, c := range cs {
		if !ValidID(c.ID) {
			return fmt.Errorf("client %d: id %q: want 1 to 64 of A-Z a-z 0-9 . _ -", i, c.ID)
		}
		if ids[c.ID] {
			return fmt.Errorf("client %q appears twice", c.ID)
		}
		ids[c.ID] = true
		h, err := parseHash(c.SecretSHA256)
		if err != nil {
			return fmt.Errorf("client %q: secret_sha256: %w", c.ID, err)
		}
		if other, dup := hashes[h]; dup {
			return fmt.Errorf("clients %q and %q have the same secret", other, c.ID)
		}
		hashes[h] = c.ID
		if c.Rate < 0 || c.Rate != c.Rate {
			return fmt.Errorf("client %q: rate %v: want 0 (no limit) or more events per second", c.ID, c.Rate)
		}
		if c.Burst < 0 {
			return fmt.Errorf("client %q: burst %d: want 0 (the rate, at least 1) or more", c.ID, c.Burst)
		}
		for _, g := range c.Groups {
			if g == "" {
				return fmt.Errorf("client %q: an empty group name in groups", c.ID)
			}
		}
		for _, g := range c.Topics {
			if _, err := path.Match(g, ""); err != nil || g == "" {
				return fmt.Errorf("client %q: topics: %q is not a glob of topic names", c.ID, g)
			}
		}
	}
	return nil
}

// parseHash decodes a secret_sha256 value.
func parseHash(s string) ([32]byte, error) {
	var h [32]byte
	if len(s) != 64 {
		return h, fmt.Errorf("%d characters: want 64 hex digits (the SHA-256 of the secret)", len(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, errors.New("not hex: want 64 hex digits (the SHA-256 of the secret)")
	}
	return h, nil
}

// CheckHashKey refuses clients with a hash rule when there is no key to
// hash with (haveKey false: no --redact-key-file).
func CheckHashKey(cs []Client, haveKey bool) error {
	if haveKey {
		return nil
	}
	for i := range cs {
		if cs[i].Redaction().Hashes() {
			return fmt.Errorf("client %q: redact: a rule hashes a field, but there is no key: give --redact-key-file", cs[i].ID)
		}
	}
	return nil
}

// ReadFile reads and validates a clients file. Its errors name the file.
func ReadFile(path string) ([]Client, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("clients file %s does not exist: create it with `inlet clients add --file %s NAME`", path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading clients file: %w", err)
	}
	cs, err := ParseFile(b)
	if err != nil {
		return nil, fmt.Errorf("clients file %s: %w", path, err)
	}
	return cs, nil
}

// WriteFile writes a clients file atomically (a temporary file in the same
// directory, synced, renamed over path), readable by its owner only.
func WriteFile(path string, cs []Client) error {
	if err := ValidateClients(cs); err != nil {
		return fmt.Errorf("clients file %s: %w", path, err)
	}
	if cs == nil {
		cs = []Client{}
	}
	b, err := json.Marshal(File{Clients: cs}, json.Deterministic(true), jsontext.Multiline(true), jsontext.WithIndent("  "))
	if err != nil {
		return fmt.Errorf("clients file %s: encoding: %w", path, err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing clients file: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("writing clients file: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("writing clients file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing clients file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing clients file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing clients file: %w", err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		d.Sync() // the rename survives a crash; best effort
		d.Close()
	}
	return nil
}

// readOrEmpty reads a clients file, or none if it does not exist yet.
func readOrEmpty(path string) ([]Client, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return ReadFile(path)
}

// AddClient adds c to the clients file at path (created if missing) with a
// new secret, and returns the secret: the only time it is seen, since the
// file keeps its hash only. c.SecretSHA256 is ignored; c.Created is set to
// now if zero. A client of the same id already there is an error.
//
// AddClient and RemoveClient read, change and rename the whole file: two of
// them run at once on one file may lose one's change.
func AddClient(path string, c Client) (secret string, err error) {
	if !ValidID(c.ID) {
		return "", fmt.Errorf("client id %q: want 1 to 64 of A-Z a-z 0-9 . _ -", c.ID)
	}
	cs, err := readOrEmpty(path)
	if err != nil {
		return "", err
	}
	for _, o := range cs {
		if o.ID == c.ID {
			return "", fmt.Errorf("client %q is already in %s: remove it first to give it a new secret", c.ID, path)
		}
	}
	secret, c.SecretSHA256, err = NewSecret()
	if err != nil {
		return "", err
	}
	if c.Created.IsZero() {
		c.Created = time.Now().UTC().Truncate(time.Second)
	}
	if err := WriteFile(path, append(cs, c)); err != nil {
		return "", err
	}
	return secret, nil
}

// RemoveClient removes the client id from the clients file at path. A
// running inlet refuses its secret and its session tokens once it has
// reloaded the file.
func RemoveClient(path, id string) error {
	cs, err := ReadFile(path)
	if err != nil {
		return err
	}
	for i, c := range cs {
		if c.ID == id {
			return WriteFile(path, append(cs[:i:i], cs[i+1:]...))
		}
	}
	return fmt.Errorf("no client %q in %s", id, path)
}

// PrintClients writes cs as an aligned table for people (`inlet clients
// list`): no secret, nor its hash.
func PrintClients(w io.Writer, cs []Client) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tGROUPS\tTOPICS\tDEFAULT GROUP\tRATE\tBURST\tADMIN\tIP POLICY\tREDACT\tCREATED")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, c := range cs {
		groups, rate, burst := strings.Join(c.Groups, ","), "-", "-"
		if groups == "" {
			groups = "*"
		}
		topics := strings.Join(c.Topics, ",")
		if topics == "" {
			topics = "*"
		}
		if c.Rate > 0 {
			rate = strconv.FormatFloat(c.Rate, 'g', -1, 64) + "/s"
			burst = strconv.Itoa(c.Burst)
			if c.Burst == 0 {
				burst = "auto"
			}
		}
		policy := "-" // --ip-policy's
		if c.IPPolicy != nil {
			policy = c.IPPolicy.String()
		}
		redact := "-"
		if len(c.Redact) > 0 {
			redact = strconv.Itoa(len(c.Redact)) + " rules"
		}
		created := "-"
		if !c.Created.IsZero() {
			created = c.Created.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", c.ID, groups, topics, dash(c.DefaultGroup), rate, burst, c.Admin, policy, redact, created)
	}
	return tw.Flush()
}
