package report

import (
	"net/url"
	"time"

	"paytwice/sim"
)

// The backoff schedule of one retry policy, its totals and how a crowd of
// clients would retry under it: what GET /backoff draws, GET /api/backoff
// answers and paytwice backoff prints.

// Bounds of a backoff request beyond those of sim.Policy. The page computes
// the spread of every strategy on each keystroke, so the crowd is kept to a
// size that costs milliseconds, not seconds.
const (
	MaxBackoffClients = 10000
	MinBackoffBase    = time.Millisecond
)

// BackoffInput is a checked backoff request.
type BackoffInput struct {
	Policy  sim.Policy
	Clients int
	Seed    uint64
}

// DefaultBackoffInput is the article's worked example: base 0.5 s, cap 8 s,
// 5 retries, full jitter, and a crowd of 1,000 clients.
func DefaultBackoffInput() BackoffInput {
	return BackoffInput{Policy: sim.DefaultPolicy(), Clients: 1000, Seed: 1}
}

// ParseBackoffQuery reads base and cap (seconds), retries, strategy,
// clients and seed; a missing parameter takes its default, a present but
// wrong one is reported by name.
func ParseBackoffQuery(q url.Values) (BackoffInput, FieldErrors) {
	in := DefaultBackoffInput()
	r := paramReader{q: q}
	in.Policy.Base = r.seconds("base", in.Policy.Base, MinBackoffBase, sim.MaxPolicyCap)
	in.Policy.Cap = r.seconds("cap", in.Policy.Cap, MinBackoffBase, sim.MaxPolicyCap)
	in.Policy.MaxRetries = r.integer("retries", in.Policy.MaxRetries, 0, sim.MaxPolicyRetries)
	in.Policy.Strategy = r.strategy("strategy", in.Policy.Strategy)
	in.Clients = r.integer("clients", in.Clients, 1, MaxBackoffClients)
	in.Seed = r.seed("seed", in.Seed)
	if !r.errs.has("base") && !r.errs.has("cap") && in.Policy.Cap < in.Policy.Base {
		r.fail("cap", "must be at least the base (%s s)", secondsText(in.Policy.Base))
	}
	if len(r.errs) == 0 {
		// Everything above should have caught it; keep sim's word as the
		// last check, under the form's field names.
		if err := in.Policy.Validate(); err != nil {
			r.errs = append(r.errs, simFieldError(err))
		}
	}
	return in, r.errs.inOrder(backoffFields...)
}

// backoffFields are the backoff parameters in form order.
var backoffFields = []string{"base", "cap", "retries", "strategy", "clients", "seed"}

// Backoff is the report of a backoff policy: the JSON of GET /api/backoff
// and of paytwice backoff -json. Times are seconds (as JSON numbers) unless the name says ms.
type Backoff struct {
	Params   BackoffParams    `json:"params"`
	Schedule []BackoffRow     `json:"schedule"`
	Totals   BackoffTotals    `json:"totals"`
	Spread   BackoffSpread    `json:"spread"`
	Compare  []BackoffCompare `json:"compare"`
}

// BackoffParams echoes the request.
type BackoffParams struct {
	BaseSeconds float64      `json:"base_seconds"`
	CapSeconds  float64      `json:"cap_seconds"`
	Retries     int          `json:"retries"`
	Strategy    sim.Strategy `json:"strategy"`
	Clients     int          `json:"clients"`
	Seed        uint64       `json:"seed"`
}

// BackoffRow is one retry. Retry counts from 1 and uses exponent
// n = retry − 1, so the first retry's ceiling is the base.
type BackoffRow struct {
	Retry          int     `json:"retry"`
	N              int     `json:"n"`
	CeilingSeconds float64 `json:"ceiling_seconds"`
	MinSeconds     float64 `json:"min_seconds"`
	MaxSeconds     float64 `json:"max_seconds"`
	MeanSeconds    float64 `json:"mean_seconds"`
	MeanEstimated  bool    `json:"mean_estimated"`
	HitsCap        bool    `json:"hits_cap"`
}

// BackoffTotals sums the rows: the shortest, longest and mean total wait,
// not counting the requests themselves.
type BackoffTotals struct {
	MinSeconds   float64 `json:"min_seconds"`
	WorstSeconds float64 `json:"worst_seconds"`
	MeanSeconds  float64 `json:"mean_seconds"`
}

// BackoffSpread is the herd: Clients clients whose first request failed at
// t = 0 retry under the policy.
type BackoffSpread struct {
	Clients int `json:"clients"`
	// The first retry round can land in [from, from + window]; per_ms is
	// clients ÷ window (a window under 1 ms counts as 1 ms).
	FirstRoundFromSeconds   float64 `json:"first_round_from_seconds"`
	FirstRoundWindowSeconds float64 `json:"first_round_window_seconds"`
	FirstRoundPerMs         float64 `json:"first_round_per_ms"`
	// The simulated busiest millisecond of the first round.
	FirstRoundPeakCount int `json:"first_round_peak_count"`
	// Every retry of every client: how many, the busiest millisecond (the
	// peak bin) and when the last one arrives.
	Requests       int             `json:"requests"`
	PeakMs         int64           `json:"peak_ms"`
	PeakCount      int             `json:"peak_count"`
	LastMs         int64           `json:"last_ms"`
	FirstRoundBins []sim.SpreadBin `json:"first_round_bins"`
	Bins           []sim.SpreadBin `json:"bins"`
}

// BackoffCompare is the same crowd under another strategy.
type BackoffCompare struct {
	Strategy                sim.Strategy `json:"strategy"`
	FirstRoundFromSeconds   float64      `json:"first_round_from_seconds"`
	FirstRoundWindowSeconds float64      `json:"first_round_window_seconds"`
	FirstRoundPerMs         float64      `json:"first_round_per_ms"`
	FirstRoundPeakCount     int          `json:"first_round_peak_count"`
	PeakMs                  int64        `json:"peak_ms"`
	PeakCount               int          `json:"peak_count"`
	LastMs                  int64        `json:"last_ms"`
}

// NewBackoff computes the schedule, the spread of the chosen strategy
// and, for comparison, the spread of every strategy with the same seed.
func NewBackoff(in BackoffInput) (Backoff, error) {
	p := in.Policy
	sched, err := p.Schedule()
	if err != nil {
		return Backoff{}, err
	}
	rep := Backoff{
		Params: BackoffParams{BaseSeconds: p.Base.Seconds(), CapSeconds: p.Cap.Seconds(), Retries: p.MaxRetries,
			Strategy: p.Strategy, Clients: in.Clients, Seed: in.Seed},
		Schedule: make([]BackoffRow, 0, len(sched.Rows)),
		Totals: BackoffTotals{MinSeconds: sched.MinTotal.Seconds(), WorstSeconds: sched.WorstTotal.Seconds(),
			MeanSeconds: sched.MeanTotal.Seconds()},
	}
	for _, r := range sched.Rows {
		rep.Schedule = append(rep.Schedule, BackoffRow{Retry: r.Retry, N: r.N, CeilingSeconds: r.Ceiling.Seconds(),
			MinSeconds: r.Min.Seconds(), MaxSeconds: r.Max.Seconds(), MeanSeconds: r.Mean.Seconds(),
			MeanEstimated: r.MeanEstimated, HitsCap: r.HitsCap})
	}
	for _, st := range sim.Strategies() {
		q := p
		q.Strategy = st
		sp, err := sim.Spread(q, in.Clients, in.Seed)
		if err != nil {
			return Backoff{}, err
		}
		rep.Compare = append(rep.Compare, BackoffCompare{Strategy: st,
			FirstRoundFromSeconds: sp.FirstRoundFrom.Seconds(), FirstRoundWindowSeconds: sp.FirstRoundWindow.Seconds(),
			FirstRoundPerMs: sp.FirstRoundPerMs, FirstRoundPeakCount: sp.FirstRoundPeakCount,
			PeakMs: sp.PeakMs, PeakCount: sp.PeakCount, LastMs: sp.LastMs})
		if st == p.Strategy {
			rep.Spread = BackoffSpread{Clients: sp.Clients,
				FirstRoundFromSeconds: sp.FirstRoundFrom.Seconds(), FirstRoundWindowSeconds: sp.FirstRoundWindow.Seconds(),
				FirstRoundPerMs: sp.FirstRoundPerMs, FirstRoundPeakCount: sp.FirstRoundPeakCount,
				Requests: sp.Requests, PeakMs: sp.PeakMs, PeakCount: sp.PeakCount, LastMs: sp.LastMs,
				FirstRoundBins: nonNil(sp.FirstRoundBins), Bins: nonNil(sp.Bins)}
		}
	}
	return rep, nil
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// BackoffFor parses a query and computes its report; the error is a
// FieldErrors when a parameter is wrong. The CLI passes its flags as the
// query.
func BackoffFor(q url.Values) (Backoff, error) {
	in, errs := ParseBackoffQuery(q)
	if len(errs) > 0 {
		return Backoff{}, errs
	}
	return NewBackoff(in)
}
