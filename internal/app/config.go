package app

import (
	"flag"
	"fmt"

	"github.com/inlet-dev/inlet/internal/cliflag"
)

// serveLayout groups the flags of `inlet serve` (and `inlet catalog
// serve`) by topic: the sections of -h, the keys of the config file and
// the tables of docs/configuration.md. A flag belongs to the group listing
// it in Flags, else to the group whose Name starts its name (spool-sync is
// sync under spool:); TestServeFlagsHaveGroups fails for a flag no group
// takes. A new flag with a group's prefix needs nothing here; any other
// goes into a group's Flags.
var serveLayout = &cliflag.Layout{
	Groups: []cliflag.Group{
		{Name: "config", Title: "Config file", Flags: []string{"print-config"}},
		{Name: "http", Title: "HTTP listeners", Flags: []string{
			"listen", "ops-listen", "read-header-timeout", "read-timeout", "idle-timeout", "body-idle-timeout",
			"response-write-timeout", "http2-max-streams", "max-header-bytes", "max-conns", "max-requests",
			"cors-origins", "trusted-proxies", "pprof", "metrics-listen"}},
		{Name: "tls", Title: "HTTPS"},
		{Name: "ingest", Title: "Ingest: what a request may hold, where its events go", Flags: []string{
			"topic", "dead-letter-topic", "routes", "max-body-bytes", "max-decompressed-bytes", "max-events",
			"max-event-bytes", "max-inflight-bytes", "produce-timeout", "retry-after"}},
		{Name: "privacy", Title: "IP policy and redaction", Flags: []string{"ip-policy", "ip-truncate-v4", "ip-truncate-v6", "redact-key-file"}},
		{Name: "enrich", Title: "Enrichment: geo-IP, User-Agent, bots", Flags: []string{"geoip-db", "geoip-precision", "parse-ua", "ua-cache-size", "bots", "bot-patterns", "bot-topic"}},
		{Name: "spool", Title: "Ack mode, spool and local state", Flags: []string{"ack", "data-dir"}},
		{Name: "kafka", Title: "Kafka: producer, TLS and SASL", Flags: []string{
			"brokers", "client-id", "compression", "linger", "delivery-timeout",
			"max-buffered-bytes", "max-buffered-records", "max-buffered-topic-share"}},
		{Name: "broker", Title: "Development broker (without --brokers)"},
		{Name: "rpc", Title: "Request-reply", Flags: []string{"reply", "reply-topic", "reply-channel", "instance-id"}},
		{Name: "redis", Title: "Redis: request-reply replies, the shared catalog, shared rate limits"},
		{Name: "ui", Title: "Live page, browser SDK, example shop", Flags: []string{"example"}},
		{Name: "catalog", Title: "Event catalog and tracking plan"},
		{Name: "auth", Title: "Client credentials and rate limits", Flags: []string{
			"clients", "clients-reload-interval", "rate-limit-store", "rate-limit-timeout"}},
		{Name: "catalog-rpc", Title: "The catalog over gRPC and Thrift", Flags: []string{
			"grpc-listen", "grpc-max-streams", "grpc-keepalive-min-time", "thrift-listen", "thrift-transport"}},
		{Name: "shutdown", Title: "Shutdown"},
		{Name: "log", Title: "Logging"},
	},
	CommandOnly: []string{"config", "print-config"},
}

// fileConfig is the flags of a command that reads a config file.
type fileConfig struct {
	file  string
	print bool
}

func (c *fileConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.file, "config", "", "YAML config `file` of the flags, grouped by topic as this help groups them (docs/configuration.md); the environment and flags win over it")
	fs.BoolVar(&c.print, "print-config", false, "print the configuration in effect as a config file, each value's source (default, file, env, flag) beside it, secrets redacted; then exit")
}

// parseLayered parses a command that reads a config file (--config,
// INLET_CONFIG) under its environment and flags, and prints its -h in
// serveLayout's groups, after head.
func parseLayered(fs *flag.FlagSet, args []string, env Env, head string) (*cliflag.Parsed, error) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head+configHelp)
		cliflag.PrintUsage(fs.Output(), fs, serveLayout)
	}
	if env.flagsOnly != nil {
		env.flagsOnly(fs)
		return nil, flag.ErrHelp
	}
	warnEnvSlips(fs, env)
	p, err := cliflag.ParseConfig(fs, args, env.Getenv, serveLayout, "config")
	if err == nil && len(p.Args) > 0 {
		err = cliflag.Usagef(fs, "unexpected argument %q", p.Args[0])
	}
	return p, err
}

const configHelp = `
Every flag can also be set in the environment, as INLET_ and its name in
capitals (--max-events is INLET_MAX_EVENTS), or in a YAML file given with
--config FILE (or INLET_CONFIG), under its group's key and without the
group's prefix (--spool-max-bytes is max-bytes under spool:). Flags win over
the environment, the environment over the file, the file over the defaults.
--print-config shows the result and where each value came from.
docs/configuration.md lists every flag.
`
