package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/inlet-dev/inlet/api/gen/pb/catalogv1"
	"github.com/inlet-dev/inlet/internal/catalog"
)

// catalogClientConfig is what `inlet catalog get|list|set|import|export`
// share: where the catalog is and how to print.
type catalogClientConfig struct {
	// Addr, if set, is the gRPC address of a running inlet; else the store
	// is opened directly (Catalog, DataDir).
	Addr    string
	creds   credentialFlags
	Timeout time.Duration
	Catalog catalog.Config
	DataDir string
	Format  string // json or text
}

// runCatalogClient runs `inlet catalog get|list|set|import|export`.
func runCatalogClient(ctx context.Context, verb string, args []string, env Env) error {
	switch verb {
	case "get", "list", "set", "import", "export":
	default:
		fmt.Fprintf(env.Stderr, "inlet catalog: unknown command %q\n\n%s", verb, catalogUsage)
		return errUsage
	}
	cc := catalogClientConfig{Timeout: 30 * time.Second, Catalog: catalog.DefaultConfig(), DataDir: ".inlet", Format: "json"}
	fs := newFlags("catalog "+verb, env)
	fs.StringVar(&cc.Addr, "addr", "", "reach the catalog of a running inlet over gRPC at `host:port` (its --grpc-listen), with --client-id and its secret; without it, the store is opened directly")
	cc.creds.register(fs)
	fs.DurationVar(&cc.Timeout, "timeout", cc.Timeout, "time limit of the whole command")
	fs.StringVar(&cc.DataDir, "data-dir", cc.DataDir, "without --addr: the directory of the embedded store (<data-dir>/catalog.db)")
	fs.StringVar(&cc.Catalog.RedisAddr, "redis", "", "without --addr: the Redis `host:port` of the shared store")
	registerSome(fs, cc.Catalog.RegisterFlags, "catalog-store", "catalog-redis-prefix", "catalog-timeout")
	fs.StringVar(&cc.Format, "format", cc.Format, "output: json (list: one entry per line) or text (aligned columns)")

	var v catalogVerb
	switch verb {
	case "get":
		v = &catalogGet{}
	case "list":
		v = &catalogList{}
	case "set":
		v = &catalogSet{}
	case "import":
		v = &catalogImport{}
	case "export":
		v = &catalogExport{}
	}
	v.flags(fs)
	pos, err := parseInterspersed(fs, args, env)
	if err != nil {
		return err
	}
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet catalog %s: %v\n", verb, err)
		return errUsage
	}
	if err := v.args(pos); err != nil {
		return usage(err)
	}
	if cc.Format != "json" && cc.Format != "text" {
		return usage(fmt.Errorf("--format %q: want json or text", cc.Format))
	}
	id, secret, err := cc.creds.resolve()
	if err != nil {
		return usage(err)
	}
	if cc.Addr == "" && id != "" {
		return usage(errors.New("--client-id and the secret are for --addr; the store opened directly needs none"))
	}
	if cc.Addr != "" && id == "" {
		return usage(errors.New("--addr needs --client-id and its secret (--secret-file FILE or INLET_SECRET)"))
	}
	ctx, cancel := context.WithTimeout(ctx, cc.Timeout)
	defer cancel()
	var c catalogAccess
	if cc.Addr != "" {
		c, err = dialCatalog(cc.Addr, id, secret)
	} else {
		c, err = openCatalogDirect(cc)
	}
	if err != nil {
		return fmt.Errorf("catalog %s: %w", verb, err)
	}
	defer c.Close()
	if err := v.run(ctx, c, cc, env); err != nil {
		return fmt.Errorf("catalog %s: %w", verb, err)
	}
	return nil
}

// registerSome registers on fs only the named flags of a RegisterFlags.
func registerSome(fs *flag.FlagSet, register func(*flag.FlagSet), names ...string) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	register(all)
	for _, n := range names {
		if f := all.Lookup(n); f != nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	}
}

// parseInterspersed is parseFlags for a command with arguments: flags may
// come before, between and after them ("--" ends the flags). It returns
// the arguments.
func parseInterspersed(fs *flag.FlagSet, args []string, env Env) ([]string, error) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		if v := env.Getenv(name); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// catalogVerb is one of get, list, set, import and export.
type catalogVerb interface {
	flags(fs *flag.FlagSet)
	args(pos []string) error
	run(ctx context.Context, c catalogAccess, cc catalogClientConfig, env Env) error
}

// catalogAccess is a catalog reached directly or over gRPC.
type catalogAccess interface {
	Get(ctx context.Context, k catalog.Key) (catalog.Entry, error)
	// Each calls each with the entries of group ("" for all) in (group,
	// name) order, asking for page at a time, until each returns false.
	Each(ctx context.Context, group string, page int, each func(catalog.Entry) bool) error
	// Set changes what u says of an entry, creating it if need be.
	Set(ctx context.Context, u entryChange) (catalog.Entry, error)
	Close() error
}

// entryChange is what `inlet catalog set` changes: nil fields keep their
// value (are empty in a new entry), status "" keeps the status (planned in
// a new entry). A schema of "" removes it.
type entryChange struct {
	Key         catalog.Key
	DisplayName *string
	Schema      *string
	Status      catalog.Status
}

func keyArgs(pos []string) (catalog.Key, error) {
	if len(pos) != 2 {
		return catalog.Key{}, fmt.Errorf("want GROUP NAME, got %d arguments", len(pos))
	}
	return catalog.Key{Group: pos[0], Name: pos[1]}, nil
}

// --- get ---

type catalogGet struct{ key catalog.Key }

func (g *catalogGet) flags(*flag.FlagSet) {}
func (g *catalogGet) args(pos []string) (err error) {
	g.key, err = keyArgs(pos)
	return err
}

func (g *catalogGet) run(ctx context.Context, c catalogAccess, cc catalogClientConfig, env Env) error {
	e, err := c.Get(ctx, g.key)
	if err != nil {
		return err
	}
	if cc.Format == "text" {
		return writeEntriesText(env.Stdout, []catalog.Entry{e})
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "%s\n", b)
	return err
}

// --- list ---

type catalogList struct {
	group string
	limit int
	page  int
}

func (l *catalogList) flags(fs *flag.FlagSet) {
	fs.IntVar(&l.limit, "limit", 0, "print at most this many entries (0: all)")
	fs.IntVar(&l.page, "page-size", 500, "entries asked for at a time")
}

func (l *catalogList) args(pos []string) error {
	switch {
	case len(pos) > 1:
		return fmt.Errorf("want at most one GROUP, got %d arguments", len(pos))
	case l.limit < 0:
		return errors.New("--limit must not be negative")
	case l.page <= 0 || l.page > 1000:
		return errors.New("--page-size must be 1 to 1000")
	}
	if len(pos) == 1 {
		l.group = pos[0]
	}
	return nil
}

func (l *catalogList) run(ctx context.Context, c catalogAccess, cc catalogClientConfig, env Env) error {
	var all []catalog.Entry // for text, which aligns the columns of all
	enc := json.NewEncoder(env.Stdout)
	n := 0
	err := c.Each(ctx, l.group, l.page, func(e catalog.Entry) bool {
		if l.limit > 0 && n >= l.limit {
			return false
		}
		n++
		if cc.Format == "text" {
			all = append(all, e)
			return true
		}
		return enc.Encode(e) == nil
	})
	if err != nil {
		return err
	}
	if cc.Format == "text" {
		return writeEntriesText(env.Stdout, all)
	}
	return nil
}

func writeEntriesText(w io.Writer, es []catalog.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tNAME\tCODE\tSTATUS\tDISPLAY NAME\tSCHEMA\tUPDATED")
	for _, e := range es {
		schema := "-"
		if len(e.Schema) > 0 {
			schema = fmt.Sprintf("%d B", len(e.Schema))
		}
		dn := e.DisplayName
		if dn == "" {
			dn = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Group, e.Name, e.Code, e.Status, dn, schema, e.Updated.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// --- set ---

type catalogSet struct {
	change      entryChange
	schemaFile  string
	status      string
	displayName optionalString
}

// optionalString is a string flag that knows whether it was given.
type optionalString struct {
	v   string
	set bool
}

func (o *optionalString) String() string { return o.v }
func (o *optionalString) Set(s string) error {
	o.v, o.set = s, true
	return nil
}

func (s *catalogSet) flags(fs *flag.FlagSet) {
	fs.Var(&s.displayName, "display-name", "the entry's display name (\"\" to clear it)")
	fs.StringVar(&s.schemaFile, "schema-file", "", "the JSON Schema of the entry's props from `FILE` (- for stdin; an empty file removes it)")
	fs.StringVar(&s.status, "status", "", "planned, observed or blocked")
}

func (s *catalogSet) args(pos []string) (err error) {
	if s.change.Key, err = keyArgs(pos); err != nil {
		return err
	}
	switch st := catalog.Status(s.status); st {
	case "", catalog.StatusPlanned, catalog.StatusObserved, catalog.StatusBlocked:
		s.change.Status = st
	default:
		return fmt.Errorf("--status %q: want planned, observed or blocked", s.status)
	}
	if s.displayName.set {
		s.change.DisplayName = &s.displayName.v
	}
	return nil
}

func (s *catalogSet) run(ctx context.Context, c catalogAccess, cc catalogClientConfig, env Env) error {
	if s.schemaFile != "" {
		b, err := readInput(s.schemaFile, env)
		if err != nil {
			return fmt.Errorf("reading --schema-file: %w", err)
		}
		b = bytes.TrimSpace(b)
		if len(b) > 0 && !json.Valid(b) {
			return fmt.Errorf("--schema-file %s is not JSON: give a JSON Schema document", s.schemaFile)
		}
		sc := string(b)
		s.change.Schema = &sc
	}
	e, err := c.Set(ctx, s.change)
	if err != nil {
		return err
	}
	if cc.Format == "text" {
		return writeEntriesText(env.Stdout, []catalog.Entry{e})
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "%s\n", b)
	return err
}

// stdin is what "-" reads; tests replace it.
var stdin io.Reader = os.Stdin

func readInput(name string, env Env) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, 64<<20))
	}
	return os.ReadFile(name)
}

// --- import ---

type catalogImport struct{ file string }

func (i *catalogImport) flags(*flag.FlagSet) {}
func (i *catalogImport) args(pos []string) error {
	if len(pos) != 1 {
		return fmt.Errorf("want one FILE (- for stdin), got %d arguments", len(pos))
	}
	i.file = pos[0]
	return nil
}

func (i *catalogImport) run(ctx context.Context, c catalogAccess, cc catalogClientConfig, env Env) error {
	b, err := readInput(i.file, env)
	if err != nil {
		return fmt.Errorf("reading the tracking plan: %w", err)
	}
	plan, err := catalog.DecodePlan(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", i.file, err)
	}
	// What the plan changes, said before it is written.
	var created, changed, same int
	for _, ev := range plan.Events {
		e, err := c.Get(ctx, catalog.Key{Group: ev.Group, Name: ev.Name})
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			created++
		case err != nil:
			return err
		case samePlanned(e, ev):
			same++
		default:
			changed++
		}
	}
	n, err := importPlan(ctx, c, b, plan)
	if err != nil {
		if n > 0 {
			return fmt.Errorf("%d of %d events imported, then: %w", n, len(plan.Events), err)
		}
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "imported %d events: %d created, %d changed, %d unchanged\n", n, created, changed, same)
	return err
}

// importPlan writes plan (whose text is b): directly with the catalog's
// Import (checked whole before anything is written), over gRPC an Upsert
// per event.
func importPlan(ctx context.Context, c catalogAccess, b []byte, plan catalog.Plan) (int, error) {
	if d, ok := c.(*directCatalog); ok {
		return d.cat.Import(ctx, bytes.NewReader(b))
	}
	for i, ev := range plan.Events {
		k := catalog.Key{Group: ev.Group, Name: ev.Name}
		if ev.Code != 0 {
			e, err := c.Get(ctx, k)
			if err == nil && e.Code != ev.Code {
				return i, fmt.Errorf("event %d (%s/%s): code %d, but the catalog has code %d for it (codes cannot be changed)", i, k.Group, k.Name, ev.Code, e.Code)
			}
		}
		dn, schema, st := ev.DisplayName, "", ev.Status
		if len(ev.Schema) > 0 && string(ev.Schema) != "null" {
			schema = string(ev.Schema)
		}
		if st == "" {
			st = catalog.StatusPlanned
		}
		if _, err := c.Set(ctx, entryChange{Key: k, DisplayName: &dn, Schema: &schema, Status: st}); err != nil {
			return i, fmt.Errorf("event %d (%s/%s): %w", i, k.Group, k.Name, err)
		}
	}
	return len(plan.Events), nil
}

// samePlanned says whether importing ev leaves e as it is.
func samePlanned(e catalog.Entry, ev catalog.PlanEvent) bool {
	st := ev.Status
	if st == "" {
		st = catalog.StatusPlanned
	}
	return e.DisplayName == ev.DisplayName && e.Status == st && sameJSON(e.Schema, []byte(ev.Schema))
}

func sameJSON(a, b []byte) bool {
	norm := func(x []byte) string {
		if len(bytes.TrimSpace(x)) == 0 || string(bytes.TrimSpace(x)) == "null" {
			return ""
		}
		var v any
		if json.Unmarshal(x, &v) != nil {
			return string(x)
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	return norm(a) == norm(b)
}

// --- export ---

type catalogExport struct{ file string }

func (x *catalogExport) flags(*flag.FlagSet) {}
func (x *catalogExport) args(pos []string) error {
	switch len(pos) {
	case 0:
	case 1:
		x.file = pos[0]
	default:
		return fmt.Errorf("want at most one FILE, got %d arguments", len(pos))
	}
	return nil
}

func (x *catalogExport) run(ctx context.Context, c catalogAccess, cc catalogClientConfig, env Env) error {
	var buf bytes.Buffer
	if d, ok := c.(*directCatalog); ok {
		if err := d.cat.Export(ctx, &buf); err != nil {
			return err
		}
	} else {
		// The plan the catalog's Export writes, from the pages of List.
		p := catalog.Plan{Events: []catalog.PlanEvent{}}
		if err := c.Each(ctx, "", 1000, func(e catalog.Entry) bool {
			p.Events = append(p.Events, catalog.PlanEvent{Group: e.Group, Name: e.Name, Code: e.Code,
				DisplayName: e.DisplayName, Status: e.Status, Schema: jsontext.Value(e.Schema)})
			return true
		}); err != nil {
			return err
		}
		if err := jsonv2.MarshalWrite(&buf, p, jsontext.WithIndent("  ")); err != nil {
			return fmt.Errorf("writing the tracking plan: %w", err)
		}
		buf.WriteString("\n")
	}
	if x.file == "" || x.file == "-" {
		_, err := env.Stdout.Write(buf.Bytes())
		return err
	}
	// Written whole or not at all: a failed export leaves no half file.
	tmp, err := os.CreateTemp(filepath.Dir(x.file), ".export-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), x.file)
}

// --- the store, directly ---

type directCatalog struct{ cat *catalog.Catalog }

func openCatalogDirect(cc catalogClientConfig) (*directCatalog, error) {
	cfg := cc.Catalog
	if cfg.StoreKind() == catalog.StoreEmbedded {
		if err := os.MkdirAll(cc.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("creating --data-dir: %w", err)
		}
		cfg.Path = filepath.Join(cc.DataDir, "catalog.db")
	}
	cat, err := catalog.Open(cfg, nil, nil)
	if err != nil {
		if strings.Contains(err.Error(), "in use by another") {
			return nil, fmt.Errorf("the embedded store %s is locked by a running inlet: reach its catalog with --addr host:port (its --grpc-listen) and --client-id, or stop it", cfg.Path)
		}
		return nil, err
	}
	return &directCatalog{cat: cat}, nil
}

func (d *directCatalog) Get(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	e, err := d.cat.Get(ctx, k)
	if errors.Is(err, catalog.ErrNotFound) {
		return e, fmt.Errorf("%w: %s/%s (inlet catalog list %s shows the group's)", catalog.ErrNotFound, k.Group, k.Name, k.Group)
	}
	return e, err
}

func (d *directCatalog) Each(ctx context.Context, group string, page int, each func(catalog.Entry) bool) error {
	var after catalog.Key
	for {
		es, err := d.cat.List(ctx, group, after, page)
		if err != nil {
			return err
		}
		for _, e := range es {
			if !each(e) {
				return nil
			}
		}
		if len(es) < page {
			return nil
		}
		after = es[len(es)-1].Key()
	}
}

func (d *directCatalog) Set(ctx context.Context, u entryChange) (catalog.Entry, error) {
	if err := catalog.ValidateKey(u.Key); err != nil {
		return catalog.Entry{}, err
	}
	e, err := d.cat.Get(ctx, u.Key)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		e = catalog.Entry{Group: u.Key.Group, Name: u.Key.Name, Status: catalog.StatusPlanned}
	case err != nil:
		return e, err
	}
	if u.DisplayName != nil {
		e.DisplayName = *u.DisplayName
	}
	if u.Schema != nil {
		e.Schema = nil
		if *u.Schema != "" {
			e.Schema = json.RawMessage(*u.Schema)
		}
	}
	if u.Status != "" {
		e.Status = u.Status
	}
	return d.cat.Upsert(ctx, e)
}

func (d *directCatalog) Close() error { return d.cat.Close() }

// --- a running inlet, over gRPC ---

type remoteCatalog struct {
	addr   string
	conn   *grpc.ClientConn
	cl     catalogv1.CatalogClient
	id     string
	token  string // the secret, then the session token of the last answer
	secret string
}

func dialCatalog(addr, id, secret string) (*remoteCatalog, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", addr, err)
	}
	return &remoteCatalog{addr: addr, conn: conn, cl: catalogv1.NewCatalogClient(conn), id: id, token: secret, secret: secret}, nil
}

func (r *remoteCatalog) Close() error { return r.conn.Close() }

func (r *remoteCatalog) creds() *catalogv1.Credentials {
	return &catalogv1.Credentials{ClientId: r.id, Token: r.token}
}

// answered takes the session token of an answer for the next calls.
func (r *remoteCatalog) answered(s *catalogv1.Session) {
	if s.GetToken() != "" {
		r.token = s.GetToken()
	}
}

// fail makes a gRPC error one line that says what to do.
func (r *remoteCatalog) fail(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%w: %s", catalog.ErrNotFound, msg)
	case codes.Unauthenticated:
		return fmt.Errorf("%s: check --client-id and the secret (--secret-file or INLET_SECRET) against the clients file of the inlet at %s", msg, r.addr)
	case codes.PermissionDenied:
		return fmt.Errorf("%s (set, import: give an admin client; inlet clients add --admin)", msg)
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", catalog.ErrInvalid, msg)
	case codes.Unavailable:
		if isTransportMsg(msg) {
			return fmt.Errorf("cannot reach the catalog at %s (%s): is inlet running with --grpc-listen %s?", r.addr, msg, r.addr)
		}
		return fmt.Errorf("%s: the catalog's store is unavailable; retry", msg)
	case codes.DeadlineExceeded:
		return fmt.Errorf("no answer from %s in time (%s): raise --timeout or check the server", r.addr, msg)
	}
	return fmt.Errorf("%s (gRPC %s)", msg, st.Code())
}

func isTransportMsg(msg string) bool {
	return strings.Contains(msg, "connection error") || strings.Contains(msg, "transport") || strings.Contains(msg, "dial")
}

func (r *remoteCatalog) Get(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	rp, err := r.cl.Get(ctx, &catalogv1.GetRequest{Auth: r.creds(), Group: k.Group, Name: k.Name})
	if err != nil {
		return catalog.Entry{}, r.fail(err)
	}
	r.answered(rp.GetSession())
	return fromPB(rp.GetEntry()), nil
}

func (r *remoteCatalog) Each(ctx context.Context, group string, page int, each func(catalog.Entry) bool) error {
	token := ""
	for {
		rp, err := r.cl.List(ctx, &catalogv1.ListRequest{Auth: r.creds(), Group: group, PageSize: int32(page), PageToken: token})
		if err != nil {
			return r.fail(err)
		}
		r.answered(rp.GetSession())
		for _, e := range rp.GetEntries() {
			if !each(fromPB(e)) {
				return nil
			}
		}
		if token = rp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func (r *remoteCatalog) Set(ctx context.Context, u entryChange) (catalog.Entry, error) {
	rq := &catalogv1.UpsertRequest{Auth: r.creds(), Group: u.Key.Group, Name: u.Key.Name, DisplayName: u.DisplayName, Schema: u.Schema, Status: toPBStatus(u.Status)}
	rp, err := r.cl.Upsert(ctx, rq)
	if err != nil {
		return catalog.Entry{}, r.fail(err)
	}
	r.answered(rp.GetSession())
	return fromPB(rp.GetEntry()), nil
}

func toPBStatus(s catalog.Status) catalogv1.Status {
	switch s {
	case catalog.StatusPlanned:
		return catalogv1.Status_STATUS_PLANNED
	case catalog.StatusObserved:
		return catalogv1.Status_STATUS_OBSERVED
	case catalog.StatusBlocked:
		return catalogv1.Status_STATUS_BLOCKED
	}
	return catalogv1.Status_STATUS_UNSPECIFIED
}

func fromPB(e *catalogv1.Entry) catalog.Entry {
	out := catalog.Entry{Group: e.GetGroup(), Name: e.GetName(), Code: e.GetCode(), DisplayName: e.GetDisplayName(),
		Created: time.UnixMilli(e.GetCreatedUnixMs()).UTC(), Updated: time.UnixMilli(e.GetUpdatedUnixMs()).UTC()}
	if e.GetSchema() != "" {
		out.Schema = json.RawMessage(e.GetSchema())
	}
	switch e.GetStatus() {
	case catalogv1.Status_STATUS_PLANNED:
		out.Status = catalog.StatusPlanned
	case catalogv1.Status_STATUS_OBSERVED:
		out.Status = catalog.StatusObserved
	case catalogv1.Status_STATUS_BLOCKED:
		out.Status = catalog.StatusBlocked
	}
	return out
}
