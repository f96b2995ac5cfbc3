package catalogrpc

import (
	"flag"
	"io"
	"testing"
)

// TestMaxMessageBytesTakesUnits: sizes take KiB, MiB and GiB, as every
// other size flag of inlet does (README).
func TestMaxMessageBytesTakesUnits(t *testing.T) {
	for in, want := range map[string]int{"4MiB": 4 << 20, "512KiB": 512 << 10, "1048576": 1 << 20} {
		c := DefaultConfig()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		if err := fs.Parse([]string{"--catalog-rpc-max-message-bytes", in}); err != nil || c.MaxMessageBytes != want {
			t.Errorf("%s: %d, %v; want %d", in, c.MaxMessageBytes, err, want)
		}
	}
}
