package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"paytwice/sim/report"
	"paytwice/views"
)

// runBackoff is "paytwice backoff": the schedule of a retry policy, its
// totals and how a crowd of clients would retry under it; the numbers of
// GET /api/backoff, as a table or (-json) as the same JSON.
func runBackoff(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("backoff", "Prints the wait before each retry of a policy (retry 1 uses n = 0), the worst-case and mean\n"+
		"total wait, and how a crowd of clients that fail at the same instant comes back.", stdout, stderr)
	def := report.DefaultBackoffInput()
	vals := map[string]*string{
		"base":     fs.String("base", views.Seconds(def.Policy.Base.Seconds()), "first ceiling, in seconds (or a duration such as 500ms)"),
		"cap":      fs.String("cap", views.Seconds(def.Policy.Cap.Seconds()), "largest wait, in seconds"),
		"retries":  fs.String("retries", fmt.Sprint(def.Policy.MaxRetries), "retries after the first request"),
		"strategy": fs.String("strategy", string(def.Policy.Strategy), "none, exponential, full, equal or decorrelated"),
		"clients":  fs.String("clients", fmt.Sprint(def.Clients), "clients that fail at the same instant"),
		"seed":     fs.String("seed", fmt.Sprint(def.Seed), "seed of the simulated crowd"),
	}
	asJSON := fs.Bool("json", false, "print the JSON of GET /api/backoff instead of tables")
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	rep, err := report.BackoffFor(query(vals))
	if err != nil {
		return flagError(err)
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	printBackoff(stdout, rep)
	return nil
}

func printBackoff(w io.Writer, rep report.Backoff) {
	p := rep.Params
	st := string(p.Strategy)
	fmt.Fprintf(w, "Backoff schedule: %s, base %s s, cap %s s, %d retries\n",
		strings.ToLower(views.StrategyLabel(st)), views.Seconds(p.BaseSeconds), views.Seconds(p.CapSeconds), p.Retries)
	fmt.Fprintf(w, "%s, with ceiling c = min(cap, base × 2^n)\n", views.StrategyFormula(st))
	fmt.Fprintln(w, "Retry 1 is the first retry after the original request failed; it uses n = 0.")
	fmt.Fprintln(w)

	estimated := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "retry\tn\tceiling c\twait\tmean")
	for _, r := range rep.Schedule {
		ceiling := views.Seconds(r.CeilingSeconds) + " s"
		wait := waitText(r.MinSeconds, r.MaxSeconds)
		if r.HitsCap {
			if st == "decorrelated" {
				wait += " (cap)"
			} else {
				ceiling += " (cap)"
			}
		}
		mean := views.Seconds(r.MeanSeconds) + " s"
		if r.MeanEstimated {
			estimated = true
			mean = "≈ " + views.Seconds(roundTo(r.MeanSeconds, 2)) + " s"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", r.Retry, r.N, ceiling, wait, mean)
	}
	tw.Flush()
	fmt.Fprintln(w)
	mean := views.Seconds(rep.Totals.MeanSeconds) + " s"
	if estimated {
		mean = "≈ " + views.Seconds(roundTo(rep.Totals.MeanSeconds, 2)) + " s (≈: estimated by simulating 20,000 clients)"
	}
	fmt.Fprintf(w, "worst-case total wait  %s s\n", views.Seconds(rep.Totals.WorstSeconds))
	fmt.Fprintf(w, "mean total wait        %s\n", mean)
	if st == "decorrelated" {
		fmt.Fprintln(w, "Decorrelated jitter ignores n (the ceiling is shown for comparison); once 3 × the previous wait")
		fmt.Fprintln(w, "passes the cap, every draw above it is cut to exactly the cap, so many late waits equal the cap.")
	}
	if p.Retries == 0 {
		return
	}

	s := rep.Spread
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Herd: %s clients fail at the same instant (seed %d)\n", views.Thousands(s.Clients), p.Seed)
	fmt.Fprintf(w, "first retry round: %s, %s requests per ms on average; busiest ms: %s\n",
		roundWindow(s.FirstRoundFromSeconds*1000, s.FirstRoundWindowSeconds*1000), views.Rate(s.FirstRoundPerMs),
		views.Thousands(s.FirstRoundPeakCount))
	fmt.Fprintf(w, "all %s retries: busiest ms is %s ms with %s; the last arrives at %s ms\n",
		views.Thousands(s.Requests), views.Millis(s.PeakMs), views.Thousands(s.PeakCount), views.Millis(s.LastMs))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The same crowd with every strategy:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\tfirst round\tavg per ms\tbusiest ms (first round)\tbusiest ms (all)\tlast retry")
	for _, c := range rep.Compare {
		mark := ""
		if c.Strategy == p.Strategy {
			mark = " *"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s at %s ms\t%s ms\n", c.Strategy, mark,
			roundWindow(c.FirstRoundFromSeconds*1000, c.FirstRoundWindowSeconds*1000), views.Rate(c.FirstRoundPerMs),
			views.Thousands(c.FirstRoundPeakCount), views.Thousands(c.PeakCount), views.Millis(c.PeakMs), views.Millis(c.LastMs))
	}
	tw.Flush()
}

func waitText(lo, hi float64) string {
	if lo == hi {
		return views.Seconds(hi) + " s"
	}
	return views.Seconds(lo) + " – " + views.Seconds(hi) + " s"
}

// roundWindow describes where the first round lands, in milliseconds.
func roundWindow(fromMs, windowMs float64) string {
	if windowMs < 1 {
		return "all at " + views.Rate(fromMs) + " ms"
	}
	return "over " + views.Rate(fromMs) + "–" + views.Rate(fromMs+windowMs) + " ms"
}

func roundTo(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}
