package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"paytwice/sim/report"
	"paytwice/views"
)

// runHerd is "paytwice herd": the thundering-herd simulation over a range
// of client counts, printed as two tables (or -json, the JSON of GET
// /api/herd). Its defaults are those of the /herd page; the AWS post's
// experiment is -max 190 -trials 100. Ctrl-C stops it.
func runHerd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("herd", "Simulates N clients contending for one versioned row under each backoff strategy\n"+
		"(base 5 ms, cap 2 s, network hops of about 10 ms) and prints the mean work and completion time.", stdout, stderr)
	def := report.DefaultHerdInput()
	vals := map[string]*string{
		"min":    fs.String("min", fmt.Sprint(def.Min), "fewest clients"),
		"max":    fs.String("max", fmt.Sprint(def.Max), "most clients"),
		"step":   fs.String("step", fmt.Sprint(def.Step), "step between client counts"),
		"trials": fs.String("trials", fmt.Sprint(def.Trials), "runs averaged per client count and strategy"),
		"seed":   fs.String("seed", fmt.Sprint(def.Seed), "seed the runs' seeds derive from"),
	}
	asJSON := fs.Bool("json", false, "print the JSON of GET /api/herd instead of tables")
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	start := time.Now()
	rep, err := report.HerdFor(ctx, query(vals), report.SimHerdLimits)
	if err != nil {
		return flagError(err)
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	printHerd(stdout, rep, time.Since(start))
	return nil
}

func printHerd(w io.Writer, rep report.Herd, took time.Duration) {
	p := rep.Params
	counts := 0
	for n := p.Min; n <= p.Max; n += p.Step {
		counts++
	}
	fmt.Fprintf(w, "Thundering herd: %d to %d clients in steps of %d, %d trials, seed %d\n", p.Min, p.Max, p.Step, p.Trials, p.Seed)
	fmt.Fprintf(w, "backoff base %s ms, cap %s s; %s runs in %s s\n", views.Seconds(p.BaseSeconds*1000), views.Seconds(p.CapSeconds),
		views.Thousands(len(rep.Strategies)*counts*p.Trials), views.Seconds(took.Seconds()))

	type cell struct{ work, secs float64 }
	byN := map[int]map[string]cell{}
	var ns []int
	for _, pt := range rep.Points {
		if byN[pt.Clients] == nil {
			byN[pt.Clients] = map[string]cell{}
			ns = append(ns, pt.Clients)
		}
		byN[pt.Clients][string(pt.Strategy)] = cell{pt.MeanWork, pt.MeanCompletionSeconds}
	}
	table := func(title string, value func(cell) string) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "N\t")
		for _, s := range rep.Strategies {
			fmt.Fprintf(tw, "%s\t", s)
		}
		fmt.Fprintln(tw)
		for _, n := range ns {
			fmt.Fprintf(tw, "%d\t", n)
			for _, s := range rep.Strategies {
				fmt.Fprintf(tw, "%s\t", value(byN[n][string(s)]))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	table("Work: mean writes the server received per run", func(c cell) string { return views.Thousands(int(c.work + 0.5)) })
	table("Completion: mean seconds until the last client is done", func(c cell) string { return views.SecondsSig(c.secs) })
}
