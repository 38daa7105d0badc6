package views

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/a-h/templ"
)

// svgNode is a parsed element of a rendered chart.
type svgNode struct {
	Name     string
	Attrs    map[string]string
	Text     string
	Children []*svgNode
}

func (n *svgNode) all(name string) []*svgNode {
	var out []*svgNode
	var walk func(*svgNode)
	walk = func(m *svgNode) {
		for _, c := range m.Children {
			if c.Name == name {
				out = append(out, c)
			}
			walk(c)
		}
	}
	walk(n)
	return out
}

func (n *svgNode) texts() []string {
	var out []string
	for _, t := range n.all("text") {
		out = append(out, strings.TrimSpace(t.Text))
	}
	return out
}

// renderSVG renders a component and parses it as XML, which also proves the
// markup is well formed.
func renderSVG(t *testing.T, c templ.Component) (*svgNode, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	dec := xml.NewDecoder(strings.NewReader(out))
	root := &svgNode{}
	stack := []*svgNode{root}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v\n%s", err, out)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &svgNode{Name: tok.Name.Local, Attrs: map[string]string{}}
			for _, a := range tok.Attr {
				n.Attrs[a.Name.Local] = a.Value
			}
			top := stack[len(stack)-1]
			top.Children = append(top.Children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			stack[len(stack)-1].Text += string(tok)
		}
	}
	if len(root.Children) != 1 || root.Children[0].Name != "svg" {
		t.Fatalf("want one <svg> element, got %s", out)
	}
	return root.Children[0], out
}

var (
	badNumber = regexp.MustCompile(`NaN|\bInf\b`)
	// Coordinate lists and path data hold only plain decimals.
	plainPoints = regexp.MustCompile(`^[0-9., -]*$`)
	plainPath   = regexp.MustCompile(`^[MLHVAZmlhvaz0-9. -]*$`)
)

// checkNumbers fails on any coordinate that is not a finite number.
func checkNumbers(t *testing.T, svg *svgNode, out string) {
	t.Helper()
	if bad := badNumber.FindString(out); bad != "" {
		t.Errorf("the chart contains %q:\n%s", bad, out)
	}
	var walk func(*svgNode)
	walk = func(n *svgNode) {
		for _, a := range []string{"x", "y", "x1", "x2", "y1", "y2", "width", "height"} {
			if v, ok := n.Attrs[a]; ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
					t.Errorf("<%s %s=%q> is not a number", n.Name, a, v)
				}
				if (a == "width" || a == "height") && f < 0 {
					t.Errorf("<%s %s=%q> is negative", n.Name, a, v)
				}
			}
		}
		if v, ok := n.Attrs["points"]; ok && !plainPoints.MatchString(v) {
			t.Errorf("<%s points=%q> is not a list of plain numbers", n.Name, v)
		}
		if v, ok := n.Attrs["d"]; ok && !plainPath.MatchString(v) {
			t.Errorf("<%s d=%q> is not plain path data", n.Name, v)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(svg)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func herdLikeChart(logY bool) LineChart {
	names := []string{"none", "exponential", "full", "equal", "decorrelated"}
	var series []Series
	for i, name := range names {
		s := Series{Name: name}
		for n := 10; n <= 200; n += 10 {
			s.Points = append(s.Points, Point{X: float64(n), Y: float64(n) * float64(i+1) * 0.37})
		}
		series = append(series, s)
	}
	return LineChart{ID: "c", Title: "Work", Desc: "writes against clients", XLabel: "clients (N)", YLabel: "writes per run", Series: series, LogY: logY}
}

func TestLineChartSVG(t *testing.T) {
	for _, logY := range []bool{false, true} {
		name := "linear"
		if logY {
			name = "log"
		}
		t.Run("a "+name+" chart has one polyline per strategy, a legend and labelled axes", func(t *testing.T) {
			svg, out := renderSVG(t, LineChartSVG(herdLikeChart(logY)))
			checkNumbers(t, svg, out)
			lines := svg.all("polyline")
			if len(lines) != 5 {
				t.Fatalf("%d polylines, want 5", len(lines))
			}
			texts := svg.texts()
			for _, want := range []string{"none", "exponential", "full", "equal", "decorrelated", "clients (N)", "writes per run"} {
				if !contains(texts, want) {
					t.Errorf("no text %q in %q", want, texts)
				}
			}
			for _, l := range lines {
				if pts := strings.Fields(l.Attrs["points"]); len(pts) != 20 {
					t.Errorf("a line has %d points, want 20", len(pts))
				}
			}
			// Every series is named on its group, not by colour alone.
			var named []string
			for _, g := range svg.all("g") {
				if s := g.Attrs["data-series"]; s != "" {
					named = append(named, s)
				}
			}
			if strings.Join(named, ",") != "none,exponential,full,equal,decorrelated" {
				t.Errorf("series groups %v", named)
			}
			if svg.Attrs["role"] != "img" || svg.Attrs["aria-labelledby"] == "" || len(svg.all("title")) == 0 {
				t.Errorf("the chart is not labelled for assistive technology: %v", svg.Attrs)
			}
		})
	}

	t.Run("series are told apart by dash pattern as well as colour", func(t *testing.T) {
		svg, _ := renderSVG(t, LineChartSVG(herdLikeChart(false)))
		seen := map[string]bool{}
		for _, l := range svg.all("polyline") {
			key := l.Attrs["stroke"] + "|" + l.Attrs["stroke-dasharray"] + "|" + l.Attrs["stroke-width"]
			if seen[key] {
				t.Errorf("two lines look the same: %s", key)
			}
			seen[key] = true
		}
		dashed := 0
		for _, l := range svg.all("polyline") {
			if l.Attrs["stroke-dasharray"] != "" {
				dashed++
			}
		}
		if dashed < 3 {
			t.Errorf("only %d dashed lines", dashed)
		}
	})

	t.Run("NaN, infinite and (on a log axis) non-positive values are left out", func(t *testing.T) {
		c := LineChart{ID: "n", XLabel: "x", YLabel: "y", LogY: true, Series: []Series{{Name: "a", Points: []Point{
			{1, 1}, {2, math.NaN()}, {3, math.Inf(1)}, {4, 0}, {5, -1}, {6, 10},
		}}}}
		svg, out := renderSVG(t, LineChartSVG(c))
		checkNumbers(t, svg, out)
		if pts := strings.Fields(svg.all("polyline")[0].Attrs["points"]); len(pts) != 2 {
			t.Errorf("points %v, want the two usable ones", pts)
		}
	})

	t.Run("a chart with nothing to plot says so", func(t *testing.T) {
		svg, out := renderSVG(t, LineChartSVG(LineChart{ID: "e", XLabel: "x", YLabel: "y", Series: []Series{{Name: "a"}}}))
		checkNumbers(t, svg, out)
		if !contains(svg.texts(), "Nothing to draw") {
			t.Errorf("texts %q", svg.texts())
		}
	})

	t.Run("a single point does not divide by zero", func(t *testing.T) {
		c := LineChart{ID: "s", XLabel: "x", YLabel: "y", Series: []Series{{Name: "a", Points: []Point{{100, 5}}}}}
		svg, out := renderSVG(t, LineChartSVG(c))
		checkNumbers(t, svg, out)
	})
}

func TestHistogramSVG(t *testing.T) {
	t.Run("one rect per non-empty bin, with axis labels and a reference line", func(t *testing.T) {
		var bars []Bar
		for i := 0; i < 100; i++ {
			y := float64(i % 4)
			bars = append(bars, Bar{X0: float64(5 * i), X1: float64(5*i + 5), Y: y})
		}
		h := Histogram{ID: "h", Title: "First round", Desc: "d", XLabel: "milliseconds after the failure", YLabel: "requests per ms",
			Bars: bars, XMax: 500, Ref: 2, RefLabel: "average 2 per ms"}
		svg, out := renderSVG(t, HistogramSVG(h))
		checkNumbers(t, svg, out)
		if got := len(svg.all("rect")); got != 75 {
			t.Errorf("%d rects, want 75 (the bins with a count)", got)
		}
		texts := svg.texts()
		for _, want := range []string{"milliseconds after the failure", "requests per ms", "average 2 per ms", "0", "500"} {
			if !contains(texts, want) {
				t.Errorf("no text %q in %q", want, texts)
			}
		}
	})

	t.Run("a one-millisecond spike stays visible and is labelled", func(t *testing.T) {
		h := Histogram{ID: "s", XLabel: "ms", YLabel: "per ms", Bars: []Bar{{0, 1, 1000}}, XMax: 500, SpikeLabel: "all 1,000 in one ms"}
		svg, out := renderSVG(t, HistogramSVG(h))
		checkNumbers(t, svg, out)
		rects := svg.all("rect")
		if len(rects) != 1 {
			t.Fatalf("%d rects", len(rects))
		}
		if w, _ := strconv.ParseFloat(rects[0].Attrs["width"], 64); w < 3 {
			t.Errorf("the spike is %v units wide", w)
		}
		if !contains(svg.texts(), "all 1,000 in one ms") {
			t.Errorf("texts %q", svg.texts())
		}
	})

	t.Run("bad bars are skipped and an empty histogram says so", func(t *testing.T) {
		h := Histogram{ID: "b", XLabel: "x", YLabel: "y", Bars: []Bar{{math.NaN(), 1, 1}, {0, 1, math.Inf(1)}, {2, 1, 3}}}
		svg, out := renderSVG(t, HistogramSVG(h))
		checkNumbers(t, svg, out)
		if !contains(svg.texts(), "Nothing to draw") {
			t.Errorf("texts %q", svg.texts())
		}
	})
}

func TestTicks(t *testing.T) {
	tests := []struct {
		name string
		got  []float64
		want string
	}{
		{"linear ticks are round numbers inside the range", linearTicks(0, 8843, 5), "0 2000 4000 6000 8000"},
		{"linear ticks need not start at zero", linearTicks(10, 200, 5), "50 100 150 200"},
		{"a short log range gets 1-2-5 ticks", logTicks(0.5, 10), "0.5 1 2 5 10"},
		{"a medium log range gets 1-3 ticks", logTicks(0.2, 200), "0.3 1 3 10 30 100"},
		{"a long log range gets powers of ten", logTicks(0.01, 1000), "0.01 0.1 1 10 100 1000"},
		{"the ends of a log range are ticks when no other tick is near", logTicks(0.03, 3000), "0.03 0.1 1 10 100 1000 3000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, v := range tt.got {
				parts = append(parts, strconv.FormatFloat(v, 'g', -1, 64))
			}
			if got := strings.Join(parts, " "); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	t.Run("log bounds round outwards to 1, 2 or 5", func(t *testing.T) {
		if lo, hi := logNice(0.376, false), logNice(104, true); lo != 0.2 || hi != 200 {
			t.Errorf("got %v..%v, want 0.2..200", lo, hi)
		}
	})
}

func TestSimFormats(t *testing.T) {
	tests := []struct{ got, want string }{
		{Seconds(0.5), "0.5"}, {Seconds(15.5), "15.5"}, {Seconds(7.75), "7.75"}, {Seconds(0.25), "0.25"}, {Seconds(8), "8"},
		{Seconds(0), "0"}, {Seconds(0.0005), "0.0005"},
		{SecondsSig(104.112), "104"}, {SecondsSig(7.7312), "7.73"}, {SecondsSig(0.37612), "0.376"},
		{Rate(2), "2"}, {Rate(1000), "1,000"}, {Rate(0.5), "0.5"}, {Rate(1.3333), "1.33"},
		{Thousands(5000), "5,000"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
