package gateway

import "testing"

func TestWithoutParam(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ q, want string }{
		{"", ""},
		{"k=s", ""},
		{"a=1&k=s&b=2", "a=1&b=2"},
		{"k=s&k=t&a=%20x", "a=%20x"},
		{"%6B=s&a=1", "a=1"}, // k escaped
		{"kk=1&k&a", "kk=1&a"},
		{"a=1&&b=%zz", "a=1&b=%zz"},
	} {
		if got := withoutParam(tt.q, "k"); got != tt.want {
			t.Errorf("withoutParam(%q) = %q, want %q", tt.q, got, tt.want)
		}
	}
}
