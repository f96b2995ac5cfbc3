package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
)

// WriteHTML writes the report as one self-contained page: inline SVG charts
// of latency over time, the percentile spectrum and throughput over time,
// and the figures. It loads nothing, so it opens offline.
func (r *Report) WriteHTML(w io.Writer) error {
	spectrum, err := r.spectrumChart()
	if err != nil {
		return err
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		return err
	}
	title := "inlet bench"
	if r.Target != "" {
		title += ": " + r.Target
	}
	cmd := ""
	if r.Command != "" {
		cmd = " Command: <code>" + html.EscapeString(r.Command) + "</code>"
	}
	// The page is written with fmt and html.EscapeString, not html/template:
	// text/template calls methods by name through reflection, and linking
	// it keeps every exported method of every type in the binary (10.8 MB
	// of the 35.9 MB binary, mostly go-redis's commands).
	_, err = fmt.Fprintf(w, pageHTML, html.EscapeString(title), html.EscapeString(title),
		html.EscapeString(r.Start.Format("2006-01-02 15:04:05 UTC")), cmd, html.EscapeString(text.String()),
		r.latencyChart(), spectrum, r.throughputChart())
	return err
}

// pageHTML is the page, for fmt: title, title, start, command, summary, and
// the latency, spectrum and throughput charts, all escaped already.
const pageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%s</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:960px;color:#222;padding:0 1em}
h1{font-size:1.3em}h2{font-size:1.05em;margin:1.6em 0 .3em}
pre{background:#f6f6f6;padding:.8em;white-space:pre-wrap;font-size:12.5px}
svg{display:block;max-width:100%%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#333}
.grid{stroke:#e4e4e4}.axis{stroke:#888}
</style></head><body>
<h1>%s</h1>
<p>Started %s.%s</p>
<pre>%s</pre>
<h2>Latency over time (per second of completion)</h2>
%s
<h2>Latency by percentile</h2>
%s
<h2>Throughput over time</h2>
%s
</body></html>
`

func (r *Report) latencyChart() string {
	c := chart{YLabel: "latency", LogY: true}
	var p50, p99, mx []point
	for _, s := range r.Series {
		x := float64(s.T) + 0.5
		if s.Max == 0 {
			p50, p99, mx = append(p50, gap), append(p99, gap), append(mx, gap)
			continue
		}
		p50 = append(p50, point{x, s.P50})
		p99 = append(p99, point{x, s.P99})
		mx = append(mx, point{x, s.Max})
	}
	c.Lines = []line{{"max", "#d62728", mx}, {"p99", "#ff7f0e", p99}, {"p50", "#1f77b4", p50}}
	c.timeAxis(len(r.Series))
	return c.svg()
}

func (r *Report) throughputChart() string {
	c := chart{YLabel: "per second", Unit: func(v float64) string { return fmt.Sprintf("%g", v) }}
	var req, ok, bad, due, drop []point
	for _, s := range r.Series {
		x := float64(s.T) + 0.5
		req = append(req, point{x, float64(s.Requests)})
		ok = append(ok, point{x, float64(s.OK)})
		bad = append(bad, point{x, float64(s.Errors)})
		if r.Mode == "open" && float64(s.T) < math.Ceil(r.Duration) {
			due = append(due, point{x, float64(s.Intended)})
			drop = append(drop, point{x, float64(s.Dropped)})
		}
	}
	c.Lines = []line{{"answered", "#1f77b4", req}, {"ok", "#2ca02c", ok}, {"errors", "#d62728", bad}}
	if r.Mode == "open" {
		c.Lines = append(c.Lines, line{"intended", "#7f7f7f", due}, line{"dropped", "#9467bd", drop})
	}
	c.timeAxis(len(r.Series))
	return c.svg()
}

// maxNines is the spectrum's right end: 99.999%.
const maxNines = 5

func (r *Report) spectrumChart() (string, error) {
	c := chart{YLabel: "latency", LogY: true, XMax: maxNines}
	for i, label := range []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%"} {
		c.XTicks = append(c.XTicks, tick{float64(i), label})
	}
	var pts []point
	if r.Latency.Count > 0 {
		h, err := r.histogram()
		if err != nil {
			return "", err
		}
		for _, b := range h.CumulativeDistributionWithTicks(5) {
			q := b.Quantile / 100
			x := float64(maxNines)
			if q < 1 {
				x = min(-math.Log10(1-q), maxNines)
			}
			pts = append(pts, point{x, Millis(b.ValueAt)})
			if x == maxNines {
				break
			}
		}
	}
	c.Lines = []line{{"latency", "#1f77b4", pts}}
	return c.svg(), nil
}

// A chart is a line chart drawn as inline SVG.
type chart struct {
	YLabel string
	LogY   bool
	Unit   func(float64) string // formats a y value of a linear axis
	XMax   float64
	XTicks []tick
	Lines  []line
}

type tick struct {
	v     float64
	label string
}

type point struct{ x, y float64 }

// gap breaks a line.
var gap = point{math.NaN(), math.NaN()}

type line struct {
	name, color string
	pts         []point
}

// timeAxis labels x in seconds of the run.
func (c *chart) timeAxis(seconds int) {
	c.XMax = float64(max(seconds, 1))
	step := niceStep(c.XMax / 10)
	for t := 0.0; t <= c.XMax+1e-9; t += step {
		c.XTicks = append(c.XTicks, tick{t, fmt.Sprintf("%gs", t)})
	}
}

const (
	chartW, chartH         = 900, 300
	padL, padR, padT, padB = 70, 40, 28, 36
)

func (c *chart) svg() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" role="img">`, chartW, chartH, chartW, chartH)
	x0, x1, y0, y1 := float64(padL), float64(chartW-padR), float64(chartH-padB), float64(padT)
	lo, hi := c.yRange()
	yTicks := c.yTicks(lo, hi)
	sy := func(v float64) float64 {
		if c.LogY {
			v = math.Log10(math.Max(v, 1e-3))
		}
		return y0 - (v-lo)/(hi-lo)*(y0-y1)
	}
	sx := func(v float64) float64 { return x0 + v/math.Max(c.XMax, 1e-9)*(x1-x0) }
	for _, t := range yTicks {
		y := sy(t.v)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x0, y, x1, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, x0-6, y+4, html.EscapeString(t.label))
	}
	for _, t := range c.XTicks {
		x := sx(t.v)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x, y0, x, y1)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x, y0+16, html.EscapeString(t.label))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x0, y0, x1, y0)
	fmt.Fprintf(&b, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x0, y0, x0, y1)
	fmt.Fprintf(&b, `<text x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`,
		(y0+y1)/2, (y0+y1)/2, html.EscapeString(c.YLabel))
	lx := x1
	for i := len(c.Lines) - 1; i >= 0; i-- {
		l := c.Lines[i]
		lx -= float64(14 + 7*len(l.name) + 14)
		fmt.Fprintf(&b, `<rect x="%.1f" y="8" width="12" height="4" fill="%s"/><text x="%.1f" y="14">%s</text>`,
			lx, l.color, lx+16, html.EscapeString(l.name))
	}
	empty := true
	for _, l := range c.Lines {
		var d strings.Builder
		pen := false
		n := 0
		for _, p := range l.pts {
			if math.IsNaN(p.y) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f", cmd, sx(p.x), sy(p.y))
			pen = true
			n++
		}
		if n == 0 {
			continue
		}
		empty = false
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"><title>%s</title></path>`,
			d.String(), l.color, html.EscapeString(l.name))
		if n == 1 {
			// One point draws no line: mark it.
			for _, p := range l.pts {
				if !math.IsNaN(p.y) {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, sx(p.x), sy(p.y), l.color)
				}
			}
		}
	}
	if empty {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">no data</text>`, (x0+x1)/2, (y0+y1)/2)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// yRange is the y axis's range, in log10 units for a log axis.
func (c *chart) yRange() (lo, hi float64) {
	var vals []float64
	for _, l := range c.Lines {
		for _, p := range l.pts {
			if !math.IsNaN(p.y) && (!c.LogY || p.y > 0) {
				vals = append(vals, p.y)
			}
		}
	}
	if len(vals) == 0 {
		return 0, 1
	}
	sort.Float64s(vals)
	if c.LogY {
		lo, hi = math.Floor(math.Log10(vals[0])), math.Ceil(math.Log10(vals[len(vals)-1]))
		if hi <= lo {
			hi = lo + 1
		}
		return lo, hi
	}
	hi = vals[len(vals)-1] * 1.1
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi / 5)
	return 0, math.Ceil(hi/step) * step
}

func (c *chart) yTicks(lo, hi float64) []tick {
	if len(c.Lines) == 0 {
		return nil
	}
	var ts []tick
	if c.LogY {
		for e := lo; e <= hi+1e-9; e++ {
			v := math.Pow(10, e)
			ts = append(ts, tick{v, decade(v)})
		}
		return ts
	}
	step := niceStep(hi / 5)
	for v := 0.0; v <= hi+1e-9; v += step {
		ts = append(ts, tick{v, c.Unit(v)})
	}
	return ts
}

// decade labels a power of ten of milliseconds.
func decade(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%gµs", math.Round(v*1e3))
	case v < 1000:
		return fmt.Sprintf("%gms", v)
	}
	return fmt.Sprintf("%gs", v/1e3)
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
