package views

import (
	"github.com/a-h/templ"

	"math"
	"strconv"
	"strings"
)

// Server-rendered SVG charts. The geometry is computed here, in plain Go, and
// chart.templ only draws what it is given, so the charts need no JavaScript
// and the numbers can be tested without a browser. Every chart has a
// <title> and a <desc>, axis labels in words, and series told apart by name,
// dash pattern and marker shape as well as colour.

// Chart canvas, in SVG user units. The viewBox is small on purpose: the SVG
// scales to its container, so text drawn at 15 units stays readable on a
// phone (about 11 px there) and large on a projector.
const (
	chartW    = 480.0
	chartH    = 330.0
	chartFont = 15.0
)

// Point is one (x, y) value of a series.
type Point struct{ X, Y float64 }

// Series is one line of a line chart.
type Series struct {
	Name   string
	Points []Point
}

// LineChart describes a line chart: one line per series, x and y axes with
// labels, and a legend.
type LineChart struct {
	// ID must be unique on the page; the chart's title and description
	// elements derive their ids from it.
	ID             string
	Title          string
	Desc           string
	XLabel, YLabel string
	Series         []Series
	// LogY draws the y axis on a logarithmic chartScale (values ≤ 0 are left
	// out).
	LogY bool
	// FormatX and FormatY label the ticks; nil means chartNumber.
	FormatX, FormatY func(float64) string
}

// Bar is one bar of a histogram, covering [X0, X1) with height Y.
type Bar struct{ X0, X1, Y float64 }

// Histogram describes a bar chart of counts over a continuous x axis.
type Histogram struct {
	ID             string
	Title          string
	Desc           string
	XLabel, YLabel string
	Bars           []Bar
	// XMin and XMax fix the x domain; if XMax ≤ XMin the bars decide it.
	XMin, XMax       float64
	FormatX, FormatY func(float64) string
	// Ref, when above zero, draws a dashed reference line at that height
	// (the expected average, say) labelled RefLabel.
	Ref      float64
	RefLabel string
	// SpikeLabel names the tallest bar when it is too thin to read; empty
	// means its height.
	SpikeLabel string
}

// chartSeriesStyle gives each series a colour (Okabe–Ito, readable on white and
// by most colour-blind viewers), a dash pattern and a marker shape, so no
// series depends on colour alone.
type chartSeriesStyle struct {
	Color  string
	Dash   string // stroke-dasharray; "" is solid
	Width  string
	Marker string // circle, square, triangle, diamond, cross
}

var chartSeriesStyles = []chartSeriesStyle{
	{"#d55e00", "", "2.5", "circle"},
	{"#7b3294", "9 5", "2.5", "square"},
	// Wide, so that the equal-jitter line, which runs almost on top of
	// it, shows as dots along a band instead of hiding it.
	{"#0072b2", "", "7", "triangle"},
	{"#009e73", "2 4", "3", "diamond"},
	{"#3f3f3f", "12 4 3 4", "2.5", "cross"},
}

func chartStyleFor(i int) chartSeriesStyle { return chartSeriesStyles[i%len(chartSeriesStyles)] }

// chartTick is one labelled position on an axis, already in user units.
type chartTick struct {
	Pos   float64
	Label string
}

// chartFrame is the drawn skeleton shared by both chart kinds.
type chartFrame struct {
	ID, Title, Desc string
	W, H            float64
	// The plot area.
	Left, Right, Top, Bottom float64
	XTicks, YTicks           []chartTick
	XLabel, YLabel           string
	Font                     float64
	Empty                    bool // nothing to plot: show a note instead
}

func (f chartFrame) titleID() string { return f.ID + "-title" }
func (f chartFrame) descID() string  { return f.ID + "-desc" }
func (f chartFrame) labelledBy() string {
	return f.titleID() + " " + f.descID()
}
func (f chartFrame) viewBox() string { return "0 0 " + fmtUnit(f.W) + " " + fmtUnit(f.H) }
func (f chartFrame) midX() float64   { return (f.Left + f.Right) / 2 }
func (f chartFrame) midY() float64   { return (f.Top + f.Bottom) / 2 }
func (f chartFrame) yLabelTransform() string {
	return "rotate(-90 " + fmtUnit(f.Font) + " " + fmtUnit(f.midY()) + ")"
}

// legendItem is one entry of a line chart's legend.
type legendItem struct {
	Name  string
	X, Y  float64 // left end of the sample line, on the text's middle
	Style chartSeriesStyle
}

// drawnSeries is one series in user units.
type drawnSeries struct {
	Name    string
	Style   chartSeriesStyle
	Points  string // polyline points attribute
	Markers []Point
}

// lineDrawing is everything chart.templ needs to draw a line chart.
type lineDrawing struct {
	chartFrame
	Lines  []drawnSeries
	Legend []legendItem
}

// drawnBar is one bar in user units.
type drawnBar struct {
	X, Y, W, H float64
	Title      string
}

// histDrawing is everything chart.templ needs to draw a histogram.
type histDrawing struct {
	chartFrame
	Bars []drawnBar
	// HasRef says whether to draw the reference line at RefY.
	HasRef   bool
	RefY     float64
	RefLabel string
	// RefKeyX, RefKeyY is where the key's label starts; its sample line
	// ends just left of it.
	RefKeyX, RefKeyY float64
	// Spike labels the tallest bar when it is too thin to read: a crowd
	// that arrives within one millisecond.
	HasSpike       bool
	SpikeX, SpikeY float64
	SpikeAnchor    string
	SpikeLabel     string
}

// chartScale maps a data interval onto a pixel interval, linearly or by log10.
type chartScale struct {
	d0, d1 float64 // domain
	p0, p1 float64 // range in user units
	log    bool
}

func (s chartScale) at(v float64) float64 {
	a, b, x := s.d0, s.d1, v
	if s.log {
		a, b, x = math.Log10(a), math.Log10(b), math.Log10(v)
	}
	if b == a {
		return (s.p0 + s.p1) / 2
	}
	return s.p0 + (x-a)/(b-a)*(s.p1-s.p0)
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// niceStep returns a round step (1, 2 or 5 × 10^k) that cuts span into about
// n pieces.
func niceStep(span float64, n int) float64 {
	if span <= 0 || !isFinite(span) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / mag; {
	case f <= 1:
		return mag
	case f <= 2:
		return 2 * mag
	case f <= 5:
		return 5 * mag
	default:
		return 10 * mag
	}
}

// linearTicks returns the multiples of a nice step inside [lo, hi].
func linearTicks(lo, hi float64, n int) []float64 {
	step := niceStep(hi-lo, n)
	var out []float64
	for v := math.Ceil(lo/step-1e-9) * step; v <= hi+step*1e-9; v += step {
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		out = append(out, v)
		if len(out) > 50 { // cannot happen with a sane step; never loop long
			break
		}
	}
	return out
}

// chartRightMargin leaves room for half of the last x tick label when that
// tick sits at the right end of the axis, so it is not cut off.
func chartRightMargin(xs []float64, xmin, xmax float64, fx func(float64) string, font float64) float64 {
	m := 16.0
	if n := len(xs); n > 0 && xmax > xmin && (xmax-xs[n-1])/(xmax-xmin) < 0.08 {
		m = max(m, chartTextWidth(fx(xs[n-1]), font)/2+4)
	}
	return m
}

// logNice rounds v > 0 down (or up) to 1, 2 or 5 times a power of ten.
func logNice(v float64, up bool) float64 {
	e := math.Floor(math.Log10(v))
	p := math.Pow(10, e)
	m := v / p
	steps := []float64{1, 2, 5, 10}
	if up {
		for _, s := range steps {
			if m <= s*(1+1e-9) {
				return s * p
			}
		}
		return 10 * p
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if m >= steps[i]*(1-1e-9) {
			return steps[i] * p
		}
	}
	return p
}

// decade returns m·10^e, dividing for negative e so 3·10^-1 is exactly the
// float64 nearest to 0.3 and prints as "0.3".
func decade(m, e float64) float64 {
	if e < 0 {
		return m / math.Pow(10, -e)
	}
	return m * math.Pow(10, e)
}

// logTicks returns ticks for a log axis over [lo, hi] (both > 0): 1-2-5
// multiples over a short range, 1-3 multiples over a medium one, powers of
// ten over a long one; plus the ends of the range when they are not too
// close to another tick.
func logTicks(lo, hi float64) []float64 {
	e0, e1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	in := func(v float64) bool { return v >= lo*(1-1e-9) && v <= hi*(1+1e-9) }
	mults := []float64{1}
	switch span := math.Log10(hi / lo); {
	case span <= 1.5:
		mults = []float64{1, 2, 5}
	case span <= 3.2:
		mults = []float64{1, 3}
	}
	var out []float64
	for e := e0; e <= e1; e++ {
		for _, m := range mults {
			if v := decade(m, e); in(v) {
				out = append(out, v)
			}
		}
	}
	far := func(v float64) bool {
		for _, t := range out {
			if math.Abs(math.Log10(v/t)) < 0.45 {
				return false
			}
		}
		return true
	}
	if far(lo) {
		out = append([]float64{lo}, out...)
	}
	if far(hi) {
		out = append(out, hi)
	}
	return out
}

// chartNumber prints a chartTick value compactly: thousands separators for
// whole numbers, up to three significant decimals otherwise.
func chartNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return chartGroupThousands(int64(v))
	}
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// chartGroupThousands prints 12345 as "12,345".
func chartGroupThousands(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// fmtUnit prints a coordinate with at most one decimal, which is plenty for
// a viewBox a few hundred units wide.
func fmtUnit(v float64) string {
	if !isFinite(v) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func chartFormatOr(f func(float64) string) func(float64) string {
	if f == nil {
		return chartNumber
	}
	return f
}

// chartLegendLayout places the legend entries in rows across the top of the
// chart and returns them with the y where the plot area may begin.
func chartLegendLayout(names []string, left, right, top, font float64) ([]legendItem, float64) {
	if len(names) == 0 {
		return nil, top
	}
	const sample = 26.0 // length of the sample line
	gap := font * 1.2
	rowH := font * 1.5
	x, y := left, top+rowH/2
	var items []legendItem
	for i, name := range names {
		w := sample + 6 + chartTextWidth(name, font)
		if x > left && x+w > right {
			x, y = left, y+rowH
		}
		items = append(items, legendItem{Name: name, X: x, Y: y, Style: chartStyleFor(i)})
		x += w + gap
	}
	return items, y + rowH/2 + font*0.4
}

// chartTextWidth estimates the width of a label in a sans-serif font; good enough
// to lay out a legend and the left margin.
func chartTextWidth(s string, font float64) float64 {
	return float64(len([]rune(s))) * font * 0.56
}

// Drawing of a line chart.
func (c LineChart) drawing() lineDrawing {
	f := chartFrame{ID: c.ID, Title: c.Title, Desc: c.Desc, W: chartW, H: chartH, XLabel: c.XLabel, YLabel: c.YLabel, Font: chartFont}
	fx, fy := chartFormatOr(c.FormatX), chartFormatOr(c.FormatY)

	// Data bounds over the usable points.
	usable := func(p Point) bool { return isFinite(p.X) && isFinite(p.Y) && (!c.LogY || p.Y > 0) }
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	names := make([]string, len(c.Series))
	for i, s := range c.Series {
		names[i] = s.Name
		for _, p := range s.Points {
			if !usable(p) {
				continue
			}
			xmin, xmax = min(xmin, p.X), max(xmax, p.X)
			ymin, ymax = min(ymin, p.Y), max(ymax, p.Y)
		}
	}

	legend, top := chartLegendLayout(names, 8, f.W-8, 4, f.Font*0.93)
	d := lineDrawing{Legend: legend}
	f.Top = top + f.Font*0.6
	f.Bottom = f.H - f.Font*3.2
	f.Right = f.W - 16
	if xmin > xmax { // no usable point at all
		f.Empty = true
		f.Left = f.Font * 4
		d.chartFrame = f
		return d
	}
	if xmin == xmax {
		xmin, xmax = xmin-1, xmax+1
	}

	// The y domain: from 0 on a linear chartScale, whole decades on a log one.
	var ys []float64
	if c.LogY {
		lo, hi := logNice(ymin, false), logNice(ymax, true)
		if hi <= lo {
			hi = logNice(lo*1.01, true)
		}
		ymin, ymax = lo, hi
		ys = logTicks(ymin, ymax)
	} else {
		ymin = min(0, ymin)
		if ymax <= ymin {
			ymax = ymin + 1
		}
		step := niceStep(ymax-ymin, 5)
		ymax = math.Ceil(ymax/step-1e-9) * step
		ys = linearTicks(ymin, ymax, 5)
	}

	sx, sy := f.placeAxes(xmin, xmax, ymin, ymax, ys, c.LogY, fx, fy)

	for i, s := range c.Series {
		ds := drawnSeries{Name: s.Name, Style: chartStyleFor(i)}
		var pts []string
		var drawn []Point
		for _, p := range s.Points {
			if !usable(p) {
				continue
			}
			q := Point{sx.at(p.X), sy.at(p.Y)}
			drawn = append(drawn, q)
			pts = append(pts, fmtUnit(q.X)+","+fmtUnit(q.Y))
		}
		ds.Points = strings.Join(pts, " ")
		// About five markers per line: enough to tell the lines apart
		// without clutter. Each series starts at a different offset so the
		// markers of lines that run together do not sit on each other.
		every := max(1, (len(drawn)+4)/5)
		for j := (i * every / len(chartSeriesStyles)) % every; j < len(drawn); j += every {
			ds.Markers = append(ds.Markers, drawn[j])
		}
		d.Lines = append(d.Lines, ds)
	}
	d.chartFrame = f
	return d
}

// Drawing of a histogram.
func (h Histogram) drawing() histDrawing {
	f := chartFrame{ID: h.ID, Title: h.Title, Desc: h.Desc, W: chartW, H: chartH, XLabel: h.XLabel, YLabel: h.YLabel, Font: chartFont}
	fx, fy := chartFormatOr(h.FormatX), chartFormatOr(h.FormatY)
	f.Top = f.Font
	if h.Ref > 0 && isFinite(h.Ref) {
		f.Top = f.Font * 2.4 // room for the reference line's key above the bars
	}
	f.Bottom = f.H - f.Font*3.2
	f.Right = f.W - 16

	xmin, xmax := h.XMin, h.XMax
	ymax := 0.0
	var bars []Bar
	for _, b := range h.Bars {
		if !isFinite(b.X0) || !isFinite(b.X1) || !isFinite(b.Y) || b.X1 < b.X0 || b.Y < 0 {
			continue
		}
		bars = append(bars, b)
		ymax = max(ymax, b.Y)
	}
	if h.XMax <= h.XMin {
		xmin, xmax = math.Inf(1), math.Inf(-1)
		for _, b := range bars {
			xmin, xmax = min(xmin, b.X0), max(xmax, b.X1)
		}
	}
	if len(bars) == 0 || xmin >= xmax {
		f.Empty = true
		f.Left = f.Font * 4
		return histDrawing{chartFrame: f}
	}
	if h.Ref > 0 && isFinite(h.Ref) {
		ymax = max(ymax, h.Ref)
	}
	if ymax == 0 {
		ymax = 1
	}
	step := niceStep(ymax, 5)
	ymax = math.Ceil(ymax/step-1e-9) * step
	ys := linearTicks(0, ymax, 5)
	sx, sy := f.placeAxes(xmin, xmax, 0, ymax, ys, false, fx, fy)
	d := histDrawing{chartFrame: f}
	if h.Ref > 0 && isFinite(h.Ref) {
		d.HasRef, d.RefY, d.RefLabel = true, sy.at(h.Ref), h.RefLabel
		// The key sits above the plot, right-aligned: a label drawn on
		// the line itself would cover the bars.
		d.RefKeyY = f.Font * 0.9
		// Room for the label drawn up to a third larger (phones).
		d.RefKeyX = f.Right - chartTextWidth(h.RefLabel, f.Font*1.3) - 6
	}
	for _, b := range bars {
		if b.Y == 0 {
			continue
		}
		x0, x1 := sx.at(max(b.X0, xmin)), sx.at(min(b.X1, xmax))
		w := max(x1-x0, 3) // a one-millisecond spike must stay visible
		x0 = min(x0, f.Right-w)
		y := sy.at(b.Y)
		d.Bars = append(d.Bars, drawnBar{X: x0, Y: y, W: w, H: f.Bottom - y,
			Title: fx(b.X0) + "–" + fx(b.X1) + ": " + fy(b.Y)})
	}
	// Label the tallest bar only when the bars are few and thin (a spike
	// in an otherwise empty chart), not in a histogram full of narrow bars.
	tallest, covered := -1, 0.0
	for i, b := range d.Bars {
		covered += b.W
		if tallest < 0 || b.H > d.Bars[tallest].H {
			tallest = i
		}
	}
	if tallest >= 0 && d.Bars[tallest].W < 8 && covered < 0.15*(f.Right-f.Left) {
		b := d.Bars[tallest]
		d.HasSpike, d.SpikeY = true, b.Y+f.Font
		if b.X+b.W+6+chartTextWidth(h.SpikeLabel, f.Font) < f.Right {
			d.SpikeX, d.SpikeAnchor = b.X+b.W+6, "start"
		} else {
			d.SpikeX, d.SpikeAnchor = b.X-6, "end"
		}
		d.SpikeLabel = h.SpikeLabel
		if d.SpikeLabel == "" {
			d.SpikeLabel = fy(ymaxOf(bars))
		}
	}
	return d
}

// chartMarkerPath draws a marker of the given shape centred on p, as an SVG path,
// so every shape is one element with the series' colour.
func chartMarkerPath(shape string, p Point) string {
	const r = 4.5
	x, y := p.X, p.Y
	u := func(v float64) string { return fmtUnit(v) }
	switch shape {
	case "square":
		return "M" + u(x-r) + " " + u(y-r) + "h" + u(2*r) + "v" + u(2*r) + "h" + u(-2*r) + "z"
	case "triangle":
		return "M" + u(x) + " " + u(y-r*1.2) + "L" + u(x+r*1.1) + " " + u(y+r*0.8) + "L" + u(x-r*1.1) + " " + u(y+r*0.8) + "z"
	case "diamond":
		return "M" + u(x) + " " + u(y-r*1.3) + "L" + u(x+r) + " " + u(y) + "L" + u(x) + " " + u(y+r*1.3) + "L" + u(x-r) + " " + u(y) + "z"
	case "cross":
		return "M" + u(x-r) + " " + u(y-r) + "L" + u(x+r) + " " + u(y+r) + "M" + u(x-r) + " " + u(y+r) + "L" + u(x+r) + " " + u(y-r)
	default: // circle, as two arcs
		return "M" + u(x-r) + " " + u(y) + "a" + u(r) + " " + u(r) + " 0 1 0 " + u(2*r) + " 0a" + u(r) + " " + u(r) + " 0 1 0 " + u(-2*r) + " 0z"
	}
}

// chartMarkerFill: open shapes for the cross (it has no inside), filled otherwise.
func chartMarkerFill(s chartSeriesStyle) string {
	if s.Marker == "cross" {
		return "none"
	}
	return s.Color
}

// chartDashAttr gives a series' dash pattern as an attribute, or none when solid.
func chartDashAttr(s chartSeriesStyle) templ.Attributes {
	if s.Dash == "" {
		return templ.Attributes{}
	}
	return templ.Attributes{"stroke-dasharray": s.Dash}
}

func ymaxOf(bars []Bar) float64 {
	m := 0.0
	for _, b := range bars {
		m = max(m, b.Y)
	}
	return m
}

// placeAxes fits the plot area between the widest y label and the room
// the last x label needs, then places the ticks: ys as given, five x
// ticks. It returns the scales from data to pixels.
func (f *chartFrame) placeAxes(xmin, xmax, ymin, ymax float64, ys []float64, logY bool, fx, fy func(float64) string) (sx, sy chartScale) {
	widest := 0.0
	for _, v := range ys {
		widest = max(widest, chartTextWidth(fy(v), f.Font))
	}
	f.Left = f.Font*1.9 + widest + 6

	xs := linearTicks(xmin, xmax, 5)
	f.Right = f.W - chartRightMargin(xs, xmin, xmax, fx, f.Font)
	sx = chartScale{d0: xmin, d1: xmax, p0: f.Left, p1: f.Right}
	sy = chartScale{d0: ymin, d1: ymax, p0: f.Bottom, p1: f.Top, log: logY}
	for _, v := range ys {
		f.YTicks = append(f.YTicks, chartTick{Pos: sy.at(v), Label: fy(v)})
	}
	for _, v := range xs {
		f.XTicks = append(f.XTicks, chartTick{Pos: sx.at(v), Label: fx(v)})
	}
	return sx, sy
}
