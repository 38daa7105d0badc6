package views

import (
	"math"
	"strconv"
)

// HerdForm is the herd page's form as the user typed it.
type HerdForm struct {
	Min, Max, Step, Trials, Seed string
	// Scale is the completion chart's y axis: "log" or "linear".
	Scale                 string
	Errors                map[string]string
	MaxClients, MaxTrials int
}

func (f HerdForm) err(field string) string { return f.Errors[field] }

// HerdRow is one client count: the mean work and the mean completion time
// (seconds) of each strategy, in HerdResult.Strategies order.
type HerdRow struct {
	Clients          int
	Work, Completion []float64
}

// HerdResult is a finished sweep.
type HerdResult struct {
	Strategies []string
	Rows       []HerdRow
	Trials     int
	Seed       uint64
	LogScale   bool
	// Elapsed is how long the request waited for the sweep (seconds);
	// Cached says it came from the cache.
	Elapsed   float64
	Cached    bool
	Truncated int
}

// HerdView is the herd page.
type HerdView struct {
	Form   HerdForm
	Result *HerdResult
	// Problem explains a run that could not finish (time-out).
	Problem string
}

func (r *HerdResult) series(metric func(HerdRow) []float64) []Series {
	out := make([]Series, len(r.Strategies))
	for i, s := range r.Strategies {
		out[i].Name = s
		for _, row := range r.Rows {
			out[i].Points = append(out[i].Points, Point{X: float64(row.Clients), Y: metric(row)[i]})
		}
	}
	return out
}

func (r *HerdResult) workChart() LineChart {
	return LineChart{
		ID:     "herd-work",
		Title:  "Work: writes the server received",
		Desc:   "Mean number of conditional writes per run against the number of clients, one line per backoff strategy.",
		XLabel: "clients (N)",
		YLabel: "writes per run",
		Series: r.series(func(h HerdRow) []float64 { return h.Work }),
	}
}

func (r *HerdResult) completionChart() LineChart {
	label := "seconds"
	if r.LogScale {
		label = "seconds (log scale)"
	}
	return LineChart{
		ID:      "herd-time",
		Title:   "Completion time: until the last client is done",
		Desc:    "Mean time until the last client's write succeeded, against the number of clients, one line per backoff strategy.",
		XLabel:  "clients (N)",
		YLabel:  label,
		Series:  r.series(func(h HerdRow) []float64 { return h.Completion }),
		LogY:    r.LogScale,
		FormatY: SecondsSig,
	}
}

// at returns the value of strategy s in a row's metric, or NaN.
func (r *HerdResult) at(values []float64, s string) float64 {
	for i, name := range r.Strategies {
		if name == s && i < len(values) {
			return values[i]
		}
	}
	return math.NaN()
}

// last is the row with the most clients, where the strategies differ most.
func (r *HerdResult) last() HerdRow {
	if len(r.Rows) == 0 {
		return HerdRow{}
	}
	return r.Rows[len(r.Rows)-1]
}

// herdRatio prints a/b as "4.6×", or "–" when it cannot be computed.
func herdRatio(a, b float64) string {
	if !isFinite(a) || !isFinite(b) || b <= 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 1, 64) + "×"
}

// leastWork names the strategy with the least mean work in a row.
func (r *HerdResult) leastWork(row HerdRow) string {
	best, bestV := "", math.Inf(1)
	for i, s := range r.Strategies {
		if i < len(row.Work) && row.Work[i] < bestV {
			best, bestV = s, row.Work[i]
		}
	}
	return best
}

// mostWork names the strategy with the most mean work in a row.
func (r *HerdResult) mostWork(row HerdRow) string {
	worst, worstV := "", math.Inf(-1)
	for i, s := range r.Strategies {
		if i < len(row.Work) && row.Work[i] > worstV {
			worst, worstV = s, row.Work[i]
		}
	}
	return worst
}

// herdFailed is the share of a run's writes that failed, in percent: every
// client's write succeeds once, every other write was a collision.
func herdFailed(work float64, clients int) string {
	if !isFinite(work) || work <= 0 || clients <= 0 {
		return "–"
	}
	return strconv.Itoa(int(math.Round(100*max(0, work-float64(clients))/work))) + "%"
}

func herdWork(v float64) string {
	if !isFinite(v) {
		return "–"
	}
	return Thousands(int(math.Round(v)))
}

// strategyShort is a strategy's name short enough for a table column on a
// phone.
func strategyShort(s string) string {
	switch s {
	case "exponential":
		return "exp."
	case "decorrelated":
		return "decorr."
	}
	return s
}

// politeFinish compares the completion times of the strategies that do back
// off, in words that stay true whatever the numbers are.
func (r *HerdResult) politeFinish(row HerdRow) string {
	full := r.at(row.Completion, "full")
	best, bestV := "", math.Inf(1)
	for i, s := range r.Strategies {
		if s != "none" && i < len(row.Completion) && row.Completion[i] < bestV {
			best, bestV = s, row.Completion[i]
		}
	}
	others := "decorrelated " + SecondsSig(r.at(row.Completion, "decorrelated")) + " s, equal " +
		SecondsSig(r.at(row.Completion, "equal")) + " s"
	switch {
	case !isFinite(full) || best == "":
		return ""
	case best == "full":
		return "Among the strategies that do back off, full jitter finishes first (" + SecondsSig(full) + " s; " + others + ")."
	case full <= bestV*1.15:
		return "Among the strategies that do back off, full jitter (" + SecondsSig(full) + " s) is close to the quickest, " +
			StrategyLabel(best) + " (" + SecondsSig(bestV) + " s)."
	default:
		return "Among the strategies that do back off, " + StrategyLabel(best) + " finishes first here (" + SecondsSig(bestV) +
			" s); full jitter takes " + SecondsSig(full) + " s."
	}
}
