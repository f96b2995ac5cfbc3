package report_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inlet-dev/inlet/internal/bench"
	"github.com/inlet-dev/inlet/internal/bench/report"
)

// smallReport runs a short open loop with a few server errors.
func smallReport(tb testing.TB) *report.Report {
	tb.Helper()
	var n atomic.Int64
	target := func(ctx context.Context) bench.Result {
		i := n.Add(1)
		time.Sleep(time.Duration(i%7) * 300 * time.Microsecond) // a spread of latencies
		if i%10 == 0 {
			return bench.Result{Status: "503", Sent: 100, Events: 5}
		}
		return bench.Result{Status: "200", OK: true, Sent: 100, Received: 20, Events: 5}
	}
	cfg := bench.Config{Rate: 300, Workers: 10, Warmup: 100 * time.Millisecond, Duration: 1200 * time.Millisecond, Timeout: 5 * time.Second, MaxLag: time.Second}
	rep, err := bench.Run(context.Background(), cfg, target)
	if err != nil {
		tb.Fatal(err)
	}
	rep.Target = "POST http://127.0.0.1:1/v1/batch"
	return rep
}

func TestReportFormats(t *testing.T) {
	t.Parallel()
	rep := smallReport(t)

	t.Run("JSON round-trips", func(t *testing.T) {
		var a bytes.Buffer
		if err := rep.WriteJSON(&a); err != nil {
			t.Fatal(err)
		}
		back, err := report.ReadJSON(bytes.NewReader(a.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := back.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() {
			t.Fatalf("JSON changed in a round trip:\n%s\n%s", a.String(), b.String())
		}
		if back.Requests != rep.Requests || back.Latency != rep.Latency || back.Status["503"] == 0 || len(back.Series) < 2 {
			t.Errorf("read back %+v", back)
		}
		// The histogram travels with it: the same percentile file.
		var h1, h2 bytes.Buffer
		if err := rep.WriteHgrm(&h1); err != nil {
			t.Fatal(err)
		}
		if err := back.WriteHgrm(&h2); err != nil {
			t.Fatal(err)
		}
		if h1.String() != h2.String() {
			t.Error("the histogram read back from JSON differs")
		}
	})

	t.Run("hgrm parses", func(t *testing.T) {
		var buf bytes.Buffer
		if err := rep.WriteHgrm(&buf); err != nil {
			t.Fatal(err)
		}
		rows, total := parseHgrm(t, buf.String())
		if total != rep.Latency.Count || rows[len(rows)-1].count != total || rows[len(rows)-1].pct != 1 {
			t.Errorf("total %d, last row %+v; want %d", total, rows[len(rows)-1], rep.Latency.Count)
		}
		for i, r := range rows {
			if i > 0 && (r.value < rows[i-1].value || r.pct < rows[i-1].pct || r.count < rows[i-1].count) {
				t.Fatalf("row %d %+v after %+v: not monotonic", i, r, rows[i-1])
			}
			if r.pct >= 0.99 {
				if r.value < rep.Latency.P99-0.001 {
					t.Errorf("%.6f percentile at %.3fms, below p99 %.3fms", r.pct, r.value, rep.Latency.P99)
				}
				break
			}
		}
	})

	t.Run("HTML is self-contained", func(t *testing.T) {
		var buf bytes.Buffer
		r := *rep
		r.Command = `inlet bench http --target "http://h/v1/events?a=<b>&c"`
		if err := r.WriteHTML(&buf); err != nil {
			t.Fatal(err)
		}
		page := buf.String()
		if !strings.Contains(page, `<code>inlet bench http --target &#34;http://h/v1/events?a=&lt;b&gt;&amp;c&#34;</code>`) || strings.Contains(page, "<b>") {
			t.Errorf("the command is not escaped:\n%s", page)
		}
		if !strings.Contains(page, "max-width:100%;") || strings.Contains(page, "%!") {
			t.Errorf("a formatting verb is left in the page:\n%s", page)
		}
		if strings.Count(page, "<svg") != 3 || !strings.Contains(page, "</html>") || !strings.Contains(page, "<path d=\"M") {
			t.Fatalf("want 3 charts with lines:\n%s", page)
		}
		external := regexp.MustCompile(`(?i)(src|href|xlink:href|action)\s*=\s*["']?\s*(https?:)?//|@import|url\(|<script[^>]*src|<link`)
		if m := external.FindString(page); m != "" {
			t.Errorf("the page loads something: %q", m)
		}
		// Each chart is well-formed SVG.
		for _, svg := range regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page, -1) {
			d := xml.NewDecoder(strings.NewReader(svg))
			for {
				if _, err := d.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("chart is not well-formed: %v\n%s", err, svg)
				}
			}
		}
		if !strings.Contains(page, "p99.9") || !strings.Contains(page, "99.999%") {
			t.Error("the page lacks the summary or the percentile axis")
		}
	})

	t.Run("text", func(t *testing.T) {
		var buf bytes.Buffer
		if err := rep.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"open loop at 300 req/s", "503: ", "p99.9", "send lag", "dropped"} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("summary lacks %q:\n%s", want, buf.String())
			}
		}
	})
}

type hgrmRow struct {
	value, pct float64
	count      int64
}

// parseHgrm reads HdrHistogram's percentile distribution text.
func parseHgrm(tb testing.TB, s string) (rows []hgrmRow, total int64) {
	tb.Helper()
	sc := bufio.NewScanner(strings.NewReader(s))
	if !sc.Scan() || !strings.Contains(sc.Text(), "Value") || !strings.Contains(sc.Text(), "Percentile") {
		tb.Fatalf("no header: %q", sc.Text())
	}
	footer := regexp.MustCompile(`^#\[Max\s*=\s*([\d.]+), Total count\s*=\s*(\d+)\]`)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#["):
			if m := footer.FindStringSubmatch(line); m != nil {
				total, _ = strconv.ParseInt(m[2], 10, 64)
			}
		default:
			f := strings.Fields(line)
			if len(f) != 4 {
				tb.Fatalf("row %q: want 4 fields", line)
			}
			v, err1 := strconv.ParseFloat(f[0], 64)
			p, err2 := strconv.ParseFloat(f[1], 64)
			c, err3 := strconv.ParseInt(f[2], 10, 64)
			if err := errors.Join(err1, err2, err3); err != nil || f[3] != "inf" && !isFloat(f[3]) {
				tb.Fatalf("row %q: %v", line, err)
			}
			rows = append(rows, hgrmRow{v, p, c})
		}
	}
	if len(rows) < 10 || total == 0 {
		tb.Fatalf("%d rows, total %d:\n%s", len(rows), total, s)
	}
	return rows, total
}

func isFloat(s string) bool { _, err := strconv.ParseFloat(s, 64); return err == nil }
