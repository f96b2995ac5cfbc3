package catalogrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/inlet-dev/inlet/internal/catalog"
)

// CommandConfig is one of `inlet catalog get|list|set|import|export`: the
// catalog of a running inlet over gRPC (Addr), or its store opened
// directly.
type CommandConfig struct {
	Verb string   // get, list, set, import or export
	Args []string // the positional arguments
	// Addr, if set, is the gRPC address of a running inlet, reached with
	// ClientID and Secret; else the store is opened directly (Catalog,
	// with the embedded one in DataDir).
	Addr             string
	ClientID, Secret string
	Timeout          time.Duration // of the whole command
	Catalog          catalog.Config
	DataDir          string
	Format           string // json or text

	Limit, PageSize int // list
	// DisplayName, SchemaFile and Status are set's changes: nil and ""
	// keep what the entry has. SchemaFile "-" reads stdin.
	DisplayName *string
	SchemaFile  string
	Status      string
}

// DefaultCommandConfig returns the documented defaults.
func DefaultCommandConfig() CommandConfig {
	return CommandConfig{Timeout: 30 * time.Second, Catalog: catalog.DefaultConfig(), DataDir: ".inlet", Format: "json", PageSize: 500}
}

// Validate reports the first bad setting or argument, before anything is
// opened.
func (c *CommandConfig) Validate() error {
	want := func(lo, hi int, what string) error {
		if n := len(c.Args); n < lo || n > hi {
			return fmt.Errorf("want %s, got %d arguments", what, n)
		}
		return nil
	}
	var err error
	switch c.Verb {
	case "get", "set":
		err = want(2, 2, "GROUP NAME")
	case "list":
		err = want(0, 1, "at most one GROUP")
	case "import":
		err = want(1, 1, "one FILE (- for stdin)")
	case "export":
		err = want(0, 1, "at most one FILE")
	default:
		return fmt.Errorf("unknown command %q", c.Verb)
	}
	switch st := catalog.Status(c.Status); {
	case err != nil:
		return err
	case c.Limit < 0:
		return errors.New("--limit must not be negative")
	case c.PageSize <= 0 || c.PageSize > maxPageSize:
		return errors.New("--page-size must be 1 to 1000")
	case st != "" && st != catalog.StatusPlanned && st != catalog.StatusObserved && st != catalog.StatusBlocked:
		return fmt.Errorf("--status %q: want planned, observed or blocked", c.Status)
	case c.Format != "json" && c.Format != "text":
		return fmt.Errorf("--format %q: want json or text", c.Format)
	case c.Addr == "" && c.ClientID != "":
		return errors.New("--client-id and the secret are for --addr; the store opened directly needs none")
	case c.Addr != "" && c.ClientID == "":
		return errors.New("--addr needs --client-id and its secret (--secret-file FILE or INLET_SECRET)")
	}
	return nil
}

// RunCommand runs cfg's verb within cfg.Timeout, reading "-" from stdin
// and printing to stdout.
func RunCommand(ctx context.Context, cfg CommandConfig, stdin io.Reader, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var (
		a   access
		err error
	)
	if cfg.Addr != "" {
		a, err = Dial(cfg.Addr, cfg.ClientID, cfg.Secret)
	} else {
		a, err = openDirect(cfg)
	}
	if err != nil {
		return err
	}
	defer a.Close()
	cmd := command{cfg: cfg, a: a, stdin: stdin, stdout: stdout}
	switch cfg.Verb {
	case "get":
		return cmd.get(ctx)
	case "list":
		return cmd.list(ctx)
	case "set":
		return cmd.set(ctx)
	case "import":
		return cmd.importPlan(ctx)
	}
	return cmd.export(ctx)
}

// access is a catalog reached directly or over gRPC (Client).
type access interface {
	Get(ctx context.Context, k catalog.Key) (catalog.Entry, error)
	Each(ctx context.Context, group string, page int, each func(catalog.Entry) bool) error
	Set(ctx context.Context, u Change) (catalog.Entry, error)
	Close() error
}

var (
	_ access = (*Client)(nil)
	_ access = direct{}
)

type command struct {
	cfg    CommandConfig
	a      access
	stdin  io.Reader
	stdout io.Writer
}

func (c command) key() catalog.Key { return catalog.Key{Group: c.cfg.Args[0], Name: c.cfg.Args[1]} }

// print writes one entry, indented JSON or a text table.
func (c command) print(e catalog.Entry) error {
	if c.cfg.Format == "text" {
		return writeEntriesText(c.stdout, []catalog.Entry{e})
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

func (c command) get(ctx context.Context) error {
	e, err := c.a.Get(ctx, c.key())
	if err != nil {
		return err
	}
	return c.print(e)
}

func (c command) list(ctx context.Context) error {
	group := ""
	if len(c.cfg.Args) == 1 {
		group = c.cfg.Args[0]
	}
	var all []catalog.Entry // for text, which aligns the columns of all
	enc := json.NewEncoder(c.stdout)
	n := 0
	err := c.a.Each(ctx, group, c.cfg.PageSize, func(e catalog.Entry) bool {
		if c.cfg.Limit > 0 && n >= c.cfg.Limit {
			return false
		}
		n++
		if c.cfg.Format == "text" {
			all = append(all, e)
			return true
		}
		return enc.Encode(e) == nil
	})
	if err != nil || c.cfg.Format != "text" {
		return err
	}
	return writeEntriesText(c.stdout, all)
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

func (c command) set(ctx context.Context) error {
	u := Change{Key: c.key(), DisplayName: c.cfg.DisplayName, Status: catalog.Status(c.cfg.Status)}
	if c.cfg.SchemaFile != "" {
		b, err := c.read(c.cfg.SchemaFile)
		if err != nil {
			return fmt.Errorf("reading --schema-file: %w", err)
		}
		b = bytes.TrimSpace(b)
		if len(b) > 0 && !json.Valid(b) {
			return fmt.Errorf("--schema-file %s is not JSON: give a JSON Schema document", c.cfg.SchemaFile)
		}
		sc := string(b)
		u.Schema = &sc
	}
	e, err := c.a.Set(ctx, u)
	if err != nil {
		return err
	}
	return c.print(e)
}

// read reads a file, or stdin for "-".
func (c command) read(name string) ([]byte, error) {
	if name == "-" {
		if c.stdin == nil {
			return nil, nil
		}
		return io.ReadAll(io.LimitReader(c.stdin, 64<<20))
	}
	return os.ReadFile(name)
}

func (c command) importPlan(ctx context.Context) error {
	file := c.cfg.Args[0]
	b, err := c.read(file)
	if err != nil {
		return fmt.Errorf("reading the tracking plan: %w", err)
	}
	plan, err := catalog.DecodePlan(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	// What the plan changes, said before it is written.
	var created, changed, same int
	for _, ev := range plan.Events {
		e, err := c.a.Get(ctx, catalog.Key{Group: ev.Group, Name: ev.Name})
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
	n, err := c.write(ctx, b, plan)
	if err != nil {
		if n > 0 {
			return fmt.Errorf("%d of %d events imported, then: %w", n, len(plan.Events), err)
		}
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "imported %d events: %d created, %d changed, %d unchanged\n", n, created, changed, same)
	return err
}

// write writes plan (whose text is b): directly with the catalog's Import
// (checked whole before anything is written), over gRPC a Set per event.
func (c command) write(ctx context.Context, b []byte, plan catalog.Plan) (int, error) {
	if d, ok := c.a.(direct); ok {
		return d.cat.Import(ctx, bytes.NewReader(b))
	}
	for i, ev := range plan.Events {
		k := catalog.Key{Group: ev.Group, Name: ev.Name}
		if ev.Code != 0 {
			e, err := c.a.Get(ctx, k)
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
		if _, err := c.a.Set(ctx, Change{Key: k, DisplayName: &dn, Schema: &schema, Status: st}); err != nil {
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

func (c command) export(ctx context.Context) error {
	var buf bytes.Buffer
	if d, ok := c.a.(direct); ok {
		if err := d.cat.Export(ctx, &buf); err != nil {
			return err
		}
	} else {
		// The plan the catalog's Export writes, from the pages of List.
		p := catalog.Plan{Events: []catalog.PlanEvent{}}
		if err := c.a.Each(ctx, "", maxPageSize, func(e catalog.Entry) bool {
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
	if len(c.cfg.Args) == 0 || c.cfg.Args[0] == "-" {
		_, err := c.stdout.Write(buf.Bytes())
		return err
	}
	// Written whole or not at all: a failed export leaves no half file.
	file := c.cfg.Args[0]
	tmp, err := os.CreateTemp(filepath.Dir(file), ".export-*")
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
	return os.Rename(tmp.Name(), file)
}

// direct is the catalog's store opened directly.
type direct struct{ cat *catalog.Catalog }

func openDirect(cfg CommandConfig) (direct, error) {
	cc := cfg.Catalog
	if cc.StoreKind() == catalog.StoreEmbedded {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return direct{}, fmt.Errorf("creating --data-dir: %w", err)
		}
		cc.Path = filepath.Join(cfg.DataDir, "catalog.db")
	}
	cat, err := catalog.Open(cc, nil, nil)
	if errors.Is(err, catalog.ErrLocked) {
		return direct{}, fmt.Errorf("the embedded store %s is locked by a running inlet: reach its catalog with --addr host:port (its --grpc-listen) and --client-id, or stop it", cc.Path)
	}
	return direct{cat}, err
}

func (d direct) Get(ctx context.Context, k catalog.Key) (catalog.Entry, error) {
	e, err := d.cat.Get(ctx, k)
	if errors.Is(err, catalog.ErrNotFound) {
		return e, fmt.Errorf("%w: %s/%s (inlet catalog list %s shows the group's)", catalog.ErrNotFound, k.Group, k.Name, k.Group)
	}
	return e, err
}

func (d direct) Each(ctx context.Context, group string, page int, each func(catalog.Entry) bool) error {
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

func (d direct) Set(ctx context.Context, u Change) (catalog.Entry, error) {
	return d.cat.Update(ctx, u.Key, u.apply)
}

func (d direct) Close() error { return d.cat.Close() }
