package views

// BackoffForm is the backoff page's form as the user typed it, with a
// message for every field that is wrong (keyed by the field's name).
type BackoffForm struct {
	Base, Cap, Retries, Strategy, Clients, Seed string
	Errors                                      map[string]string
	Strategies                                  []SelectOption
	MaxRetries, MaxClients                      int
}

// BackoffRow is one retry of the schedule; times are in seconds.
type BackoffRow struct {
	Retry, N            int
	Ceiling, Min, Max   float64
	Mean                float64
	MeanEstimated, Caps bool
}

// SpreadBin is one bar of an arrivals histogram.
type SpreadBin struct {
	StartMs, WidthMs int64
	Count            int
	PerMs            float64
}

// StrategySpread is one row of the strategy comparison: the same crowd,
// the same seed, another strategy.
type StrategySpread struct {
	Strategy         string
	Current          bool
	FromMs, WindowMs float64
	PerMs            float64
	FirstPeak        int
	PeakMs           int64
	Peak             int
	LastMs           int64
}

// BackoffResult is everything the page shows for a valid form.
type BackoffResult struct {
	Strategy                        string
	Base, Cap                       float64 // seconds
	Retries                         int
	Rows                            []BackoffRow
	MinTotal, WorstTotal, MeanTotal float64
	Clients                         int
	Seed                            uint64
	// The first retry round, from the formula: [From, From+Window] seconds.
	FirstFrom, FirstWindow float64
	FirstPerMs             float64
	FirstPeak              int
	Requests               int
	PeakMs                 int64
	Peak                   int
	LastMs                 int64
	FirstBins, Bins        []SpreadBin
	Compare                []StrategySpread
}

// BackoffView is the backoff page: the form and, when it is valid, the
// result.
type BackoffView struct {
	Form   BackoffForm
	Result *BackoffResult
}

func (r *BackoffResult) anyEstimated() bool {
	for _, row := range r.Rows {
		if row.MeanEstimated {
			return true
		}
	}
	return false
}

// firstRoundText describes the window of the first retry round.
func (r *BackoffResult) firstRoundText() string {
	if r.FirstWindow == 0 {
		return "all at " + Seconds(r.FirstFrom) + " s"
	}
	return "over " + Seconds(r.FirstFrom) + "–" + Seconds(r.FirstFrom+r.FirstWindow) + " s"
}

// firstHistogram is the chart of the first retry round. Its x axis always
// reaches at least the first ceiling (the base), so a spike of clients that
// all retry in the same millisecond shows as a spike, not as a bar as wide
// as the chart.
func (r *BackoffResult) firstHistogram() Histogram {
	h := Histogram{
		ID:      "first-round",
		Title:   "First retry round: requests per millisecond",
		Desc:    r.firstRoundDesc(),
		XLabel:  "milliseconds after the failure",
		YLabel:  "requests per ms",
		Bars:    spreadBars(r.FirstBins, 1),
		XMin:    0,
		XMax:    max(r.Base*1000, spreadBinsEnd(r.FirstBins)),
		FormatY: Rate,
	}
	if r.FirstWindow > 0 {
		h.Ref, h.RefLabel = r.FirstPerMs, "average "+Rate(r.FirstPerMs)+" per ms"
	} else {
		h.SpikeLabel = "all " + Thousands(r.Clients) + " in one ms"
	}
	return h
}

func (r *BackoffResult) firstRoundDesc() string {
	return Thousands(r.Clients) + " clients retry " + r.firstRoundText() + ": " + perMs(r.FirstPerMs) +
		" on average; the busiest single millisecond had " + Thousands(r.FirstPeak) + binWidthNote(r.FirstBins) + "."
}

// allHistogram is the chart of every retry round, in seconds when the
// retries spread over more than two seconds. Its bars are counts per bin:
// over a long run a bin spans many milliseconds, and an average per
// millisecond would hide a one-millisecond spike inside it.
func (r *BackoffResult) allHistogram() Histogram {
	unit, label := 1.0, "milliseconds after the failure"
	end := max(float64(r.LastMs+1), r.Base*1000, 1)
	if end > 2000 {
		unit, label = 1000, "seconds after the failure"
	}
	width := int64(1)
	if len(r.Bins) > 0 {
		width = r.Bins[0].WidthMs
	}
	bars := make([]Bar, 0, len(r.Bins))
	for _, b := range r.Bins {
		bars = append(bars, Bar{X0: float64(b.StartMs) / unit, X1: float64(b.StartMs+b.WidthMs) / unit, Y: float64(b.Count)})
	}
	ylabel := "retries per ms"
	if width > 1 {
		ylabel = "retries per " + Millis(width) + " ms"
	}
	spike := ""
	if width == 1 {
		most := 0
		for _, b := range r.Bins {
			most = max(most, b.Count)
		}
		spike = Thousands(most) + " in one ms"
	}
	return Histogram{
		SpikeLabel: spike,
		ID:         "all-rounds",
		Title:      "Every retry: when they arrive",
		Desc:       "All " + Thousands(r.Requests) + " retries of " + Thousands(r.Clients) + " clients, counted in bins of " + Millis(width) + " ms; the busiest single millisecond, at " + Millis(r.PeakMs) + " ms, had " + Thousands(r.Peak) + ".",
		XLabel:     label,
		YLabel:     ylabel,
		Bars:       bars,
		XMin:       0,
		XMax:       max(end, spreadBinsEnd(r.Bins)) / unit,
		FormatY:    Rate,
	}
}

// bars turns bins into histogram bars, dividing the x values by unit (1 for
// milliseconds, 1000 for seconds); the height stays in requests per ms.
func spreadBars(bins []SpreadBin, unit float64) []Bar {
	out := make([]Bar, 0, len(bins))
	for _, b := range bins {
		out = append(out, Bar{X0: float64(b.StartMs) / unit, X1: float64(b.StartMs+b.WidthMs) / unit, Y: b.PerMs})
	}
	return out
}

func spreadBinsEnd(bins []SpreadBin) float64 {
	if len(bins) == 0 {
		return 0
	}
	b := bins[len(bins)-1]
	return float64(b.StartMs + b.WidthMs)
}

func (f BackoffForm) err(field string) string { return f.Errors[field] }

// simDescribedBy lists the hint and error of a field for aria-describedby.
func simDescribedBy(field string) string { return field + "-hint " + field + "-error" }

// htmxConfig is the content of SimHead's htmx-config meta tag.
const htmxConfig = `{"includeIndicatorStyles":false,"responseHandling":[{"code":"204","swap":false},{"code":"[23]..","swap":true},{"code":"400","swap":true,"error":false},{"code":"503","swap":true,"error":false},{"code":"[45]..","swap":false,"error":true}]}`

// binWidthNote explains bars wider than one millisecond, whose height is the
// average over their width.
func binWidthNote(bins []SpreadBin) string {
	if len(bins) == 0 || bins[0].WidthMs <= 1 {
		return ""
	}
	return " (each bar is " + Millis(bins[0].WidthMs) + " ms wide, so it shows the average of its milliseconds)"
}
