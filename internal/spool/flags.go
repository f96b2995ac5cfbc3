package spool

import (
	"flag"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// RegisterFlags binds c's fields (all but Dir) to flags of fs named prefix
// and the setting ("spool-" gives --spool-sync); the defaults are c's
// values.
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&c.Sync, prefix+"sync", c.Sync, "always (fsync before answering; survives machine crashes) or interval (fsync every --"+prefix+"sync-interval; survives process crashes)")
	fs.DurationVar(&c.SyncInterval, prefix+"sync-interval", c.SyncInterval, "fsync period with --"+prefix+"sync interval (at most 1s)")
	cliflag.Bytes(fs, &c.SegmentBytes, prefix+"segment-bytes", "size at which a spool segment file is closed and a new one started")
	cliflag.Bytes(fs, &c.MaxBytes, prefix+"max-bytes", "disk the spool may use; past it inlet answers 503 with Retry-After")
}
