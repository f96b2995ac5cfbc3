package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/inlet-dev/inlet/internal/kafka"
)

// Config is `inlet verify`.
type Config struct {
	Load    LoadConfig
	Brokers []string
	Topic   string
	// Settle is how long to keep reading the topic without news of the run
	// before the acknowledged events not seen are declared lost.
	Settle time.Duration
	// Security is TLS and SASL to the brokers.
	Security kafka.Security
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
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

// Main runs `inlet verify` (see Run) and writes its report as JSON to
// stdout, its progress to stderr. It fails if an acknowledged event was
// lost, or if none was acknowledged (that proves nothing).
func Main(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	rep, err := Run(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
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

// Run sends events to the gateway, reads them back from Kafka and
// reports. It writes its progress to progress. An error means the check
// could not be made (Kafka unreachable, ctx ended), not that events were lost:
// see Report.OK.
func Run(ctx context.Context, cfg Config, progress io.Writer) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	// Fail before sending anything if the check cannot be made.
	if err := Ping(ctx, cfg.Brokers, cfg.Security); err != nil {
		return Report{}, err
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

	l := NewLedger()
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
	err := Load(ctx, lc, l)
	close(stop)
	wg.Wait()
	if err != nil {
		return Report{}, interrupted(err)
	}
	sent, acked := l.Counts()
	fmt.Fprintf(progress, "verify: sent %d, acknowledged %d; reading topic %s until they all arrived, or nothing new for %v\n",
		sent, acked, cfg.Topic, cfg.Settle)
	seen, err := Delivered(ctx, cfg.Brokers, cfg.Security, cfg.Topic, Prefix(lc.Run), l, cfg.Settle)
	if err != nil {
		return Report{}, interrupted(err)
	}
	rep := Compare(lc.Run, l, seen)
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
