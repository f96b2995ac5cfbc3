package privacy

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
)

// Scrub is s with every IP address in it, alone or with a port
// ("192.0.2.7:5123", "[2001:db8::1]:443"), put under p: truncated to its
// prefix (the port dropped), or replaced by "(ip dropped)". Under Keep it
// is s.
func (c IP) Scrub(p Policy, s string) string {
	if p == Keep {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !addrByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && addrByte(s[j]) {
			j++
		}
		if a, n, ok := parseToken(s[i:j]); ok {
			b.WriteString(s[last:i])
			if p == Truncate {
				b.WriteString(c.truncate(a).String())
			} else {
				b.WriteString("(ip dropped)")
			}
			last = i + n
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// addrByte reports whether c may be part of an address, with its port.
func addrByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.' || c == '[' || c == ']'
}

// parseToken reads an address, alone or with a port, from a run of
// addrByte, and how many bytes of it are the address: a sentence's final
// '.' or ':' is not part of it.
func parseToken(t string) (netip.Addr, int, bool) {
	t = strings.TrimRight(t, ".:")
	if ap, err := netip.ParseAddrPort(t); err == nil {
		return ap.Addr().Unmap(), len(t), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(t, "["), "]")); err == nil {
		return a.Unmap(), len(t), true
	}
	return netip.Addr{}, 0, false
}

// LogHandler returns h, but with every address in a record's message and
// string attributes scrubbed (Scrub) under p: for logs that name a
// connection's address before any client is known (net/http's server
// errors). Under Keep it is h.
func (c IP) LogHandler(h slog.Handler, p Policy) slog.Handler {
	if p == Keep {
		return h
	}
	return &scrubHandler{h: h, c: c, p: p}
}

type scrubHandler struct {
	h slog.Handler
	c IP
	p Policy
}

func (s *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, s.c.Scrub(s.p, r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(s.attr(a))
		return true
	})
	return s.h.Handle(ctx, out)
}

func (s *scrubHandler) attr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(s.c.Scrub(s.p, a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(s.c.Scrub(s.p, err.Error()))
		}
	}
	return a
}

func (s *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = s.attr(a)
	}
	return &scrubHandler{h: s.h.WithAttrs(out), c: s.c, p: s.p}
}

func (s *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{h: s.h.WithGroup(name), c: s.c, p: s.p}
}
