package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/internal/cliflag"
	"github.com/inlet-dev/inlet/internal/kafka"

	"github.com/inlet-dev/inlet/internal/verify"
)

// VerifyConfig configures `inlet verify`.
type VerifyConfig struct {
	Load    verify.LoadConfig
	Brokers []string
	Topic   string
	// Settle is how long to keep reading the topic without news of the run
	// before the acknowledged events not seen are declared lost.
	Settle time.Duration
	// Security is TLS and SASL to the brokers.
	Security kafka.Security
}

// Validate reports the first invalid setting.
func (c VerifyConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0 || c.Topic == "":
		return errors.New("verify: --brokers and --topic are required")
	case c.Settle <= 0:
		return errors.New("verify: --settle must be positive")
	}
	if err := c.Security.Validate(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	return c.Load.Validate()
}

// ParseVerify parses `inlet verify` arguments and environment into a config.
func ParseVerify(args []string, env Env) (VerifyConfig, error) {
	cfg := VerifyConfig{Load: verify.DefaultLoadConfig(), Brokers: []string{"127.0.0.1:9092"}, Topic: "events", Settle: 30 * time.Second}
	fs := newFlags("verify", env)
	l := &cfg.Load
	fs.StringVar(&l.Target, "target", l.Target, "the gateway to check: http://host:port or https://host:port")
	fs.StringVar(&l.TLSCAFile, "tls-ca", "", "PEM `file` of the CAs that sign an https:// --target's certificate (default: the system's)")
	fs.BoolVar(&l.TLSInsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any certificate of an https:// --target (insecure: for tests only)")
	cliflag.List(fs, &cfg.Brokers, "brokers", "Kafka seed brokers the gateway writes to, comma-separated host:port")
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "topic the gateway writes events to")
	fs.IntVar(&l.Events, "events", l.Events, "events to send")
	fs.DurationVar(&l.Duration, "duration", 0, "send for this long instead of a number of --events")
	fs.Float64Var(&l.Rate, "rate", 0, "events per second (0: as fast as the gateway answers)")
	fs.IntVar(&l.Concurrency, "concurrency", l.Concurrency, "requests in flight at most")
	fs.IntVar(&l.Batch, "batch", l.Batch, "events per request")
	fs.DurationVar(&l.Timeout, "timeout", l.Timeout, "time limit of one request")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long to wait for acknowledged events to arrive in the topic before declaring them lost")
	fs.StringVar(&l.Run, "run", "", "run id: event ids are <run>-<n> (default: a new one)")
	cfg.Security.RegisterFlags(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return cfg, err
	}
	if l.Run == "" {
		l.Run = verify.NewRun()
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	usage := func(err error) error {
		fmt.Fprintf(fs.Output(), "inlet %s\n", err)
		return errUsage
	}
	if l.Duration != 0 {
		if given["events"] {
			return cfg, usage(errors.New("verify: give --events or --duration, not both"))
		}
		l.Events = 0
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usage(err)
	}
	return cfg, nil
}

func runVerify(ctx context.Context, args []string, env Env) error {
	cfg, err := ParseVerify(args, env)
	if err != nil {
		return err
	}
	rep, err := Verify(ctx, cfg, env.Stderr)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(env.Stdout, "%s\n", b); err != nil {
		return err
	}
	switch {
	case !rep.OK():
		return fmt.Errorf("verify: %d acknowledged events lost", rep.Lost)
	case rep.Acknowledged == 0:
		// Nothing acknowledged, nothing lost: that proves nothing.
		answers, _ := json.Marshal(rep.Status)
		return fmt.Errorf("verify: %s acknowledged no event (answers: %s)", cfg.Load.Target, answers)
	}
	return nil
}

// Verify sends events to the gateway, reads them back from Kafka and
// reports. It writes its progress to progress. An error means the check
// could not be made (Kafka unreachable, ctx ended), not that events were lost:
// see Report.OK.
func Verify(ctx context.Context, cfg VerifyConfig, progress io.Writer) (verify.Report, error) {
	if err := cfg.Validate(); err != nil {
		return verify.Report{}, err
	}
	// Fail before sending anything if the check cannot be made.
	if err := verify.Ping(ctx, cfg.Brokers, cfg.Security); err != nil {
		return verify.Report{}, err
	}
	lc := cfg.Load
	what := fmt.Sprintf("%d events", lc.Events)
	if lc.Events == 0 {
		what = "events for " + lc.Duration.String()
	}
	rate := "as fast as it answers"
	if lc.Rate > 0 {
		rate = fmt.Sprintf("at %g/s", lc.Rate)
	}
	if lc.TLSInsecureSkipVerify {
		fmt.Fprintf(progress, "verify: warning: --tls-insecure-skip-verify: the certificate of %s is not checked\n", lc.Target)
	}
	fmt.Fprintf(progress, "verify: run %s: sending %s to %s %s, %d per request, %d in flight\n",
		lc.Run, what, lc.Target, rate, lc.Batch, lc.Concurrency)

	l := verify.NewLedger()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				sent, acked := l.Counts()
				fmt.Fprintf(progress, "verify: sent %d, acknowledged %d\n", sent, acked)
			}
		}
	})
	err := verify.Load(ctx, lc, l)
	close(stop)
	wg.Wait()
	if err != nil {
		return verify.Report{}, interrupted(err)
	}
	sent, acked := l.Counts()
	fmt.Fprintf(progress, "verify: sent %d, acknowledged %d; reading topic %s until they all arrived, or nothing new for %v\n",
		sent, acked, cfg.Topic, cfg.Settle)
	seen, err := verify.Delivered(ctx, cfg.Brokers, cfg.Security, cfg.Topic, verify.Prefix(lc.Run), l, cfg.Settle)
	if err != nil {
		return verify.Report{}, interrupted(err)
	}
	rep := verify.Compare(lc.Run, l, seen)
	rep.Target, rep.Topic = lc.Target, cfg.Topic
	fmt.Fprintf(progress, "verify: sent %d, acknowledged %d, delivered %d, lost %d, duplicates %d; %s\n",
		rep.Sent, rep.Acknowledged, rep.Delivered, rep.Lost, rep.Duplicates, rep.AckGaps)
	return rep, nil
}

func interrupted(err error) error {
	if errors.Is(err, context.Canceled) {
		return errors.New("verify: interrupted")
	}
	return err
}
