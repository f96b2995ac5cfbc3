// Package cliflag has the flag.Value types inlet's packages register their
// flags with, bound straight to the fields of their Config: sizes in bytes
// (1048576, 512KiB, 64MB, 1GiB), comma-separated lists, and IP prefixes.
// Each package registers its own flags (Config.RegisterFlags); only the
// command layer parses them, with Parse.
package cliflag

import (
	"flag"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Integer is the set of field types a byte size can be bound to.
type Integer interface{ ~int | ~int32 | ~int64 }

type bytesValue[T Integer] struct{ p *T }

// Bytes defines a flag of a size in bytes bound to *p; its default is *p.
func Bytes[T Integer](fs *flag.FlagSet, p *T, name, usage string) {
	fs.Var(bytesValue[T]{p}, name, usage)
}

func (b bytesValue[T]) String() string {
	if b.p == nil {
		return "0"
	}
	return FormatBytes(int64(*b.p))
}

func (bytesValue[T]) form() string {
	return "a size: bytes, or with KiB, MiB, GiB (e.g. 512KiB, 64MiB)"
}

func (bytesValue[T]) metavar() string { return "size" }

func (b bytesValue[T]) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	if int64(T(n)) != n {
		return fmt.Errorf("size %q is too large", s)
	}
	*b.p = T(n)
	return nil
}

// ParseBytes parses a size: a number of bytes, optionally followed by KiB,
// MiB, GiB (powers of 1024), KB, MB, GB (powers of 1000) or B.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes, optionally with KiB, MiB or GiB", s)
	}
	return n * mult, nil
}

// FormatBytes formats n the shortest exact way ParseBytes reads back.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

type listValue struct{ p *[]string }

// List defines a flag of a comma-separated list bound to *p; its default
// is *p. Setting it replaces the whole list; empty items are dropped.
func List(fs *flag.FlagSet, p *[]string, name, usage string) {
	fs.Var(listValue{p}, name, usage)
}

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (listValue) form() string    { return "a comma-separated list" }
func (listValue) list()           {}
func (listValue) metavar() string { return "list" }

func (l listValue) Set(s string) error {
	*l.p = SplitList(s)
	return nil
}

// SplitList splits a comma-separated list, trimming spaces and dropping
// empty items.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

type prefixesValue struct{ p *[]netip.Prefix }

// Prefixes defines a flag of comma-separated IPs and CIDR prefixes bound
// to *p (an IP is a prefix of its full length).
func Prefixes(fs *flag.FlagSet, p *[]netip.Prefix, name, usage string) {
	fs.Var(prefixesValue{p}, name, usage)
}

func (v prefixesValue) String() string {
	if v.p == nil {
		return ""
	}
	s := make([]string, len(*v.p))
	for i, p := range *v.p {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (prefixesValue) form() string {
	return "comma-separated IPs or CIDR prefixes (e.g. 10.0.0.0/8,192.0.2.1)"
}
func (prefixesValue) list()           {}
func (prefixesValue) metavar() string { return "prefixes" }

func (v prefixesValue) Set(s string) error {
	ps, err := ParsePrefixes(s)
	if err != nil {
		return err
	}
	*v.p = ps
	return nil
}

// ParsePrefixes parses a comma-separated list of IPs and CIDR prefixes.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range SplitList(s) {
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP or CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
