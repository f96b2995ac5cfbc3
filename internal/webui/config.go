// Package webui serves inlet's browser side from the gateway: the tracker
// at /sdk/inlet.js, the live events page at /ui with its server-sent event
// stream, and the example shop at /example/. The gateway feeds the stream
// through a Live hub (see Live.Publish); nothing here reads Kafka.
package webui

import (
	"errors"
	"flag"
)

// Config configures the browser side of `inlet serve`.
type Config struct {
	UI         bool // the live events page at /ui
	Example    bool // the example shop at /example/
	MaxViewers int  // live pages open at once; more are answered 503
	// ViewerBuffer is the items queued for one live page; past it the page
	// is sent a sample and told how many it missed.
	ViewerBuffer int
	// ShowRejectedContent shows what a client sent in a rejected event on
	// the live page (--ui-show-rejected-content); by default the page shows
	// why it was rejected only: a rejected event is often one that carries
	// what it must not (a card number in props, a secret in a field).
	ShowRejectedContent bool
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{UI: true, MaxViewers: 8, ViewerBuffer: 256}
}

// RegisterFlags binds c's fields to flags of fs; the defaults are c's values.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.UI, "ui", c.UI, "serve the live events page at /ui (events as they are acknowledged, with their user ids and props; rejections; rates): with --auth, to admin clients only (HTTP Basic); without, to anyone who can reach the port")
	fs.BoolVar(&c.Example, "example", c.Example, "serve the example shop page, which uses inlet.js, at /example/")
	fs.IntVar(&c.MaxViewers, "ui-max-viewers", c.MaxViewers, "live events pages open at once; more are refused with 503")
	fs.BoolVar(&c.ShowRejectedContent, "ui-show-rejected-content", c.ShowRejectedContent, "show what clients sent in rejected events on the live page, not only why they were rejected")
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if c.MaxViewers < 1 || c.ViewerBuffer < 1 {
		return errors.New("webui: --ui-max-viewers and the viewer buffer must be at least 1")
	}
	return nil
}
