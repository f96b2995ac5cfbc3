package devbroker

import "flag"

// RegisterFlags binds c's fields (all but DataDir) to flags of fs named
// prefix and the setting ("broker-" gives --broker-listen); the defaults
// are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&c.Listen, prefix+"listen", c.Listen, "listen address of the development broker (host:port)")
	fs.IntVar(&c.Partitions, prefix+"partitions", c.Partitions, "partitions of topics the development broker creates on demand")
	fs.BoolVar(&c.SyncWrites, prefix+"sync-writes", c.SyncWrites, "fsync every batch the development broker takes before acknowledging it")
}
