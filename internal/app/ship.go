package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/ship"
)

// ShipConfig is `inlet ship`'s flags: ship's Config and the logger's.
type ShipConfig struct {
	ship.Config
	log logConfig
}

// ParseShip parses `inlet ship` arguments and environment into a config.
func ParseShip(args []string, env Env) (ShipConfig, error) {
	cfg := ShipConfig{Config: ship.DefaultConfig()}
	fs := newFlags("ship", env)
	fs.StringVar(&cfg.Target, "target", "", "send to the inlet at `URL` (http://host:port); empty: straight to Kafka")
	cliflag.List(fs, &cfg.Brokers, "brokers", "without --target: Kafka seed brokers, comma-separated host:port")
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "without --target: the topic to produce to (partition 0, so lines stay in order)")
	fs.StringVar(&cfg.Format, "format", cfg.Format, "each line is: raw (props.line), json (an object: the props) or logfmt (key=value pairs: the props)")
	fs.StringVar(&cfg.Event, "event", cfg.Event, "the events' name")
	fs.StringVar(&cfg.Key, "key", "", "the events' anon_id, inlet's record key (straight to Kafka too): one key keeps the lines in order (default host:source; straight to Kafka without --key: no record key, partition 0)")
	fs.StringVar(&cfg.File, "file", "", "follow `PATH` like tail -F (across rotation and truncation) instead of reading stdin")
	fs.StringVar(&cfg.Checkpoint, "checkpoint", "", "where the position in --file is kept (default PATH.ship-pos)")
	fs.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often a followed file is checked for new lines, rotation and truncation")
	fs.IntVar(&cfg.BatchSize, "batch-size", cfg.BatchSize, "most lines per batch")
	fs.DurationVar(&cfg.Linger, "linger", cfg.Linger, "how long the first line of a batch waits for more")
	fs.DurationVar(&cfg.SendTimeout, "send-timeout", cfg.SendTimeout, "with --target: how long one attempt to send a batch may take; failed attempts are retried (to Kafka, batches in flight have no deadline: franz-go retries them, in order)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "without --target: how long to wait at start for Kafka to answer, retrying, before giving up with the cause (0: until interrupted)")
	fs.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "on SIGINT/SIGTERM, how long the lines read may take to be acknowledged")
	fs.Func("max-message-bytes", "without --target: the topic's max.message.bytes, if below Kafka's default 1000012: a line over it is rejected at once (a batch Kafka refuses as too large is sent again a line at a time)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 512 {
			return fmt.Errorf("want a number of bytes, at least 512")
		}
		cfg.MaxMessageBytes = int32(n)
		return nil
	})
	fs.StringVar(&cfg.BearerToken, "token", "", "with --target: send Authorization: Bearer `TOKEN`")
	cfg.Security.RegisterFlags(fs)
	cfg.log.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return cfg, errUsage
	}
	return cfg, nil
}

func runShip(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseShip(args, env)
	if err != nil {
		return err
	}
	log, err := cfg.log.logger(env.Stderr)
	if err != nil {
		return err
	}
	stdin := env.Stdin
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	return ship.Run(ctx, cfg.Config, stdin, log)
}
