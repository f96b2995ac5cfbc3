package ingest

import (
	"bytes"
	"errors"
	"testing"
	"testing/iotest"

	"github.com/inlet-dev/inlet/internal/membudget"
)

// TestReadAll: a body is read whole, into one buffer of its announced
// length when it announced one (up to maxPresize), also when it sends more
// or less than it announced, and is refused past the limit; the hold is
// charged the buffers' capacity.
func TestReadAll(t *testing.T) {
	t.Parallel()
	const limit = 200 << 10
	tests := []struct {
		name       string
		n          int   // bytes sent
		want       int64 // announced, -1 for none
		tooLarge   bool
		wantCap    int // the buffer's capacity, 0 for any
		oneByteAtA bool
	}{
		{name: "empty", n: 0, want: 0},
		{name: "small, announced", n: 100, want: 100, wantCap: minBuf},
		{name: "a class exactly, announced", n: minBuf, want: minBuf, wantCap: minBuf},
		{name: "a class exactly, unannounced", n: minBuf, want: -1, wantCap: 2 * minBuf},
		{name: "one past a class, announced", n: 8<<10 + 1, want: 8<<10 + 1, wantCap: 16 << 10},
		{name: "maxPresize exactly", n: maxPresize, want: maxPresize, wantCap: maxPresize},
		{name: "past maxPresize grows", n: maxPresize + 10, want: maxPresize + 10, wantCap: 2 * maxPresize},
		{name: "more than announced", n: 5000, want: 4096},
		{name: "less than announced", n: 10, want: 3000},
		{name: "slow reader", n: 9000, want: 9000, oneByteAtA: true},
		{name: "the limit exactly", n: limit, want: -1},
		{name: "past the limit", n: limit + 1, want: -1, tooLarge: true},
		{name: "past the limit, announced less", n: limit + 1, want: 1000, tooLarge: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := bytes.Repeat([]byte("abcdefghij"), tt.n/10+1)[:tt.n]
			var src = bytes.NewReader(body)
			hold := &membudget.Hold{B: membudget.New(1 << 30)}
			defer hold.Release()
			var b []byte
			var err error
			if tt.oneByteAtA {
				b, err = readAll(iotest.OneByteReader(src), limit, tt.want, hold)
			} else {
				b, err = readAll(src, limit, tt.want, hold)
			}
			if tt.tooLarge {
				if !errors.Is(err, errTooLarge) {
					t.Fatalf("readAll of %d bytes: %v, want errTooLarge", tt.n, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("readAll: %v", err)
			}
			if !bytes.Equal(b, body) {
				t.Fatalf("read %d bytes, want the %d sent", len(b), len(body))
			}
			if tt.wantCap != 0 && cap(b) != tt.wantCap {
				t.Errorf("buffer of %d bytes, want %d", cap(b), tt.wantCap)
			}
			if hold.Taken < int64(cap(b)) {
				t.Errorf("hold charged %d bytes for a buffer of %d", hold.Taken, cap(b))
			}
			putBuf(b)
		})
	}
}
