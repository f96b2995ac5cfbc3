package cliflag

import (
	"flag"
	"io"
	"net/netip"
	"reflect"
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
