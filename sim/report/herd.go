package report

import (
	"context"
	"math"
	"net/url"

	"paytwice/sim"
)

// The thundering-herd sweep: what GET /herd draws, GET /api/herd answers
// and paytwice herd prints.

// HerdInput is a herd sweep as the form, the API and the CLI describe it:
// client counts Min, Min+Step, ... up to Max, Trials runs per count and
// strategy, and the seed the trial seeds derive from.
type HerdInput struct {
	Min, Max, Step, Trials int
	Seed                   uint64
}

// DefaultHerdInput is the page's default run: 10 to 200 clients in steps of
// 10, 10 trials, five strategies. The page answers in about 0.2 s on two
// cores and 0.37 s on one (BenchmarkHerdPageDefault). The AWS post's
// experiment (max 190, 100 trials) fits within the page's budget too, and
// takes a few seconds.
func DefaultHerdInput() HerdInput { return HerdInput{Min: 10, Max: 200, Step: 10, Trials: 10, Seed: 1} }

// Config is the sim sweep of the input.
func (in HerdInput) Config() sim.HerdSweepConfig {
	return sim.HerdSweepConfig{MinClients: in.Min, MaxClients: in.Max, Step: in.Step, Trials: in.Trials, Seed: in.Seed}
}

// HerdCost estimates the work of a sweep in "client steps": each trial at N
// clients costs about N + N²/100 of them for the five strategies together
// while the herd is followed event by event (up to sim.MaxEventHerdClients;
// the runs without backoff grow with N², the others about with N), and
// 1,000 + 10·N once it is counted (100,000 clients: about 4.6 s of one
// core for the five, counted as 10 s). One core gets through roughly
// 100,000 a second: the default run is about 50,000, the AWS post's
// experiment (10..190 clients, 100 trials) 437,000.
func HerdCost(in HerdInput) float64 {
	if in.Step < 1 {
		return math.Inf(1)
	}
	cost := 0.0
	for n := in.Min; n <= in.Max; n += in.Step {
		per := float64(n) + float64(n)*float64(n)/100
		if n > sim.MaxEventHerdClients {
			per = 1000 + 10*float64(n)
		}
		cost += float64(in.Trials) * per
	}
	return cost
}

// HerdLimits bound one herd request.
type HerdLimits struct {
	MaxClients int
	MaxTrials  int
	// MaxCost bounds HerdCost; 0 means no bound beyond sim's.
	MaxCost float64
}

// SimHerdLimits are sim's own bounds, with no bound on the cost: on the
// command line the user waits for their own run.
var SimHerdLimits = HerdLimits{MaxClients: sim.MaxHerdClients, MaxTrials: sim.MaxHerdTrials}

// ParseHerdQuery reads min, max, step, trials and seed.
func ParseHerdQuery(q url.Values, lim HerdLimits) (HerdInput, FieldErrors) {
	in := DefaultHerdInput()
	r := paramReader{q: q}
	in.Min = r.integer("min", in.Min, 1, lim.MaxClients)
	in.Max = r.integer("max", in.Max, 1, lim.MaxClients)
	in.Step = r.integer("step", in.Step, 1, lim.MaxClients)
	in.Trials = r.integer("trials", in.Trials, 1, lim.MaxTrials)
	in.Seed = r.seed("seed", in.Seed)
	if !r.errs.has("min") && !r.errs.has("max") && in.Max < in.Min {
		r.fail("max", "must be at least min (%d)", in.Min)
	}
	if len(r.errs) > 0 {
		return in, r.errs
	}
	if lim.MaxCost > 0 {
		if c := HerdCost(in); c > lim.MaxCost {
			r.fail("trials", "this run is about %.1f× what one request may simulate; lower trials or max, or raise step",
				c/lim.MaxCost)
		}
	}
	if len(r.errs) == 0 {
		if err := in.Config().Validate(); err != nil {
			r.errs = append(r.errs, simFieldError(err))
		}
	}
	return in, r.errs.inOrder(herdFields...)
}

// herdFields are the herd parameters in form order.
var herdFields = []string{"min", "max", "step", "trials", "seed"}

// Herd is the JSON of GET /api/herd and of paytwice herd -json.
type Herd struct {
	Params     HerdParams     `json:"params"`
	Strategies []sim.Strategy `json:"strategies"`
	Points     []HerdPoint    `json:"points"`
}

// HerdParams echoes the request and the model's fixed backoff settings.
type HerdParams struct {
	Min         int     `json:"min"`
	Max         int     `json:"max"`
	Step        int     `json:"step"`
	Trials      int     `json:"trials"`
	Seed        uint64  `json:"seed"`
	BaseSeconds float64 `json:"base_seconds"`
	CapSeconds  float64 `json:"cap_seconds"`
}

// HerdPoint is one strategy at one client count, averaged over the
// trials: mean_work is the mean number of writes the server received, and
// mean_completion_seconds the mean time until the last client's write
// succeeded.
type HerdPoint struct {
	Clients               int          `json:"clients"`
	Strategy              sim.Strategy `json:"strategy"`
	Trials                int          `json:"trials"`
	MeanWork              float64      `json:"mean_work"`
	MeanCompletionSeconds float64      `json:"mean_completion_seconds"`
	Truncated             int          `json:"truncated"`
}

// NewHerd shapes sweep points as JSON.
func NewHerd(in HerdInput, pts []sim.HerdPoint) Herd {
	rep := Herd{
		Params: HerdParams{Min: in.Min, Max: in.Max, Step: in.Step, Trials: in.Trials, Seed: in.Seed,
			BaseSeconds: sim.HerdBase.Seconds(), CapSeconds: sim.HerdCap.Seconds()},
		Strategies: sim.Strategies(),
		Points:     make([]HerdPoint, len(pts)),
	}
	for i, p := range pts {
		rep.Points[i] = HerdPoint{Clients: p.Clients, Strategy: p.Strategy, Trials: p.Trials,
			MeanWork: p.MeanWork, MeanCompletionSeconds: p.MeanCompletion.Seconds(), Truncated: p.Truncated}
	}
	return rep
}

// HerdFor parses a query, runs the sweep under ctx and returns its
// report; the error is a FieldErrors for a wrong parameter. The CLI uses it
// with SimHerdLimits.
func HerdFor(ctx context.Context, q url.Values, lim HerdLimits) (Herd, error) {
	in, errs := ParseHerdQuery(q, lim)
	if len(errs) > 0 {
		return Herd{}, errs
	}
	pts, err := sim.HerdSweep(ctx, in.Config())
	if err != nil {
		return Herd{}, err
	}
	return NewHerd(in, pts), nil
}
