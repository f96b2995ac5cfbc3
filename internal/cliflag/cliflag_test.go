package cliflag

import (
	"errors"
	"flag"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "1048576", want: 1 << 20},
		{in: "512KiB", want: 512 << 10},
		{in: "64MB", want: 64e6},
		{in: "1GiB", want: 1 << 30},
		{in: " 2 MiB ", want: 2 << 20},
		{in: "10B", want: 10},
		{in: "-1", bad: true},
		{in: "1.5MiB", bad: true},
		{in: "lots", bad: true},
		{in: "99999999999GiB", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var v int64
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			Bytes(fs, &v, "size", "")
			err := fs.Parse([]string{"-size", tc.in})
			if tc.bad {
				if err == nil {
					t.Fatalf("%q accepted as %d", tc.in, v)
				}
				return
			}
			if err != nil || v != tc.want {
				t.Fatalf("%q: %d, %v; want %d", tc.in, v, err, tc.want)
			}
			if back, err := ParseBytes(FormatBytes(v)); err != nil || back != v {
				t.Fatalf("FormatBytes(%d) = %q does not read back: %d, %v", v, FormatBytes(v), back, err)
			}
		})
	}
}

func TestBytesOverflowsNarrowField(t *testing.T) {
	var v int32
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	Bytes(fs, &v, "size", "")
	if err := fs.Parse([]string{"-size", "4GiB"}); err == nil {
		t.Fatalf("4GiB accepted into an int32 as %d", v)
	}
}

func TestListAndPrefixes(t *testing.T) {
	l := []string{"default"}
	var ps []netip.Prefix
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	List(fs, &l, "list", "")
	Prefixes(fs, &ps, "proxies", "")
	if def := fs.Lookup("list").DefValue; def != "default" {
		t.Fatalf("default shown as %q", def)
	}
	if err := fs.Parse([]string{"-list", " a, ,b ", "-proxies", "10.0.0.0/8, 127.0.0.1,::ffff:192.168.1.1"}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l, []string{"a", "b"}) {
		t.Fatalf("list %q", l)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("192.168.1.1/32")}
	if !reflect.DeepEqual(ps, want) {
		t.Fatalf("prefixes %v, want %v", ps, want)
	}
	if _, err := ParsePrefixes("10.0.0.0/8,nope"); err == nil {
		t.Fatal("a bad prefix was accepted")
	}
}

// TestParse: the environment, then the flags, which win; positional
// arguments anywhere, "--" ending the flags.
func TestParse(t *testing.T) {
	env := map[string]string{"INLET_NAME": "env", "INLET_N": "7"}
	for _, tc := range []struct {
		args    []string
		name    string
		n       int
		pos     []string
		wantErr error
	}{
		{args: nil, name: "env", n: 7},
		{args: []string{"--name", "flag"}, name: "flag", n: 7},
		{args: []string{"a", "--name", "flag", "b", "--n", "1", "c"}, name: "flag", n: 1, pos: []string{"a", "b", "c"}},
		{args: []string{"a", "--", "--name", "x"}, name: "env", n: 7, pos: []string{"a", "--name", "x"}},
		{args: []string{"--nope"}, wantErr: ErrUsage},
		{args: []string{"-h"}, wantErr: flag.ErrHelp},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		name := fs.String("name", "default", "")
		n := fs.Int("n", 0, "")
		pos, err := Parse(fs, tc.args, func(k string) string { return env[k] })
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("%q: error %v, want %v", tc.args, err, tc.wantErr)
			continue
		}
		if err == nil && (*name != tc.name || *n != tc.n || !reflect.DeepEqual(pos, tc.pos)) {
			t.Errorf("%q: name %q n %d pos %q, want %q %d %q", tc.args, *name, *n, pos, tc.name, tc.n, tc.pos)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("n", 0, "")
	if _, err := Parse(fs, nil, func(k string) string { return map[string]string{"INLET_N": "x"}[k] }); err == nil || !strings.Contains(err.Error(), `INLET_N="x"`) {
		t.Errorf("a bad environment value: %v", err)
	}
}

func TestRegister(t *testing.T) {
	register := func(fs *flag.FlagSet) { fs.Int("a", 0, ""); fs.Int("b", 0, ""); fs.Int("c", 0, "") }
	var got []string
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	Register(fs, register, Except("b"))
	fs.VisitAll(func(f *flag.Flag) { got = append(got, f.Name) })
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	Register(fs, register, Only("b", "d"))
	fs.VisitAll(func(f *flag.Flag) { got = append(got, f.Name) })
	if !reflect.DeepEqual(got, []string{"a", "c", "b"}) {
		t.Errorf("registered %q", got)
	}
}
