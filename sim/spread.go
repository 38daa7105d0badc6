package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Limits of Spread, so a request from a web form stays cheap (at most
// MaxSpreadClients·MaxPolicyRetries arrivals, a few tens of MB at worst).
const (
	MaxSpreadClients = 100000
	// MaxSpreadBins bounds the length of each histogram, small enough to draw
	// as an SVG bar chart.
	MaxSpreadBins = 200
)

// SpreadBin is one bar of a histogram of retry arrivals.
type SpreadBin struct {
	// StartMs is the first millisecond the bin covers; it covers WidthMs
	// milliseconds.
	StartMs int64 `json:"start_ms"`
	WidthMs int64 `json:"width_ms"`
	// Count is the number of retries that arrive in the bin, and PerMs is
	// Count/WidthMs, the load the server sees in that stretch of time.
	Count int     `json:"count"`
	PerMs float64 `json:"per_ms"`
}

// SpreadResult shows how a crowd of clients that all failed at the same
// instant comes back, which is the thundering-herd argument for jitter.
//
// Every client's first request fails at t = 0. Retry k is sent at the time of
// retry k-1 plus the policy's wait for retry k (exponent n = k-1, as in the
// schedule); the requests themselves take no time. Only the retries are
// counted, not the initial requests at t = 0.
type SpreadResult struct {
	Policy  Policy `json:"policy"`
	Clients int    `json:"clients"`
	Seed    uint64 `json:"seed"`

	// FirstRoundFrom and FirstRoundWindow give the interval
	// [from, from+window] over which the first retries can land, from the
	// strategy's formula. A window of zero means every client retries at the
	// same instant.
	FirstRoundFrom   time.Duration `json:"first_round_from_ns"`
	FirstRoundWindow time.Duration `json:"first_round_window_ns"`
	// FirstRoundPerMs is the analytic average load of the first round:
	// Clients divided by the window in milliseconds, where a window shorter
	// than 1 ms counts as 1 ms (everybody in one millisecond). Full jitter,
	// 1000 clients, base 0.5 s: 2 per ms. No jitter: 1000 per ms.
	FirstRoundPerMs float64 `json:"first_round_per_ms"`

	// Requests is the number of simulated retries, Clients·MaxRetries.
	Requests int `json:"requests"`
	// PeakMs is the busiest millisecond (the earliest if several tie), and
	// PeakCount the retries that arrive in it, over all rounds.
	PeakMs    int64 `json:"peak_ms"`
	PeakCount int   `json:"peak_count"`
	// FirstRoundPeakCount is the busiest millisecond of the first round
	// alone, the simulated counterpart of FirstRoundPerMs.
	FirstRoundPeakCount int `json:"first_round_peak_count"`
	// LastMs is the millisecond of the last retry.
	LastMs int64 `json:"last_ms"`
	// Bins covers [0, LastMs] with at most MaxSpreadBins equal bins.
	Bins []SpreadBin `json:"bins"`
	// FirstRoundBins covers just the first retries, from the earliest to
	// the latest, with at most MaxSpreadBins equal bins, so the first-round
	// spike (or its absence) is visible at millisecond resolution.
	FirstRoundBins []SpreadBin `json:"first_round_bins"`
}

// Spread computes the analytic first-round load and simulates, with the given
// seed, when every retry of clients clients arrives. It returns a *ParamError
// for an invalid policy or a client count outside 1..MaxSpreadClients.
// The same arguments always give the same result.
func Spread(p Policy, clients int, seed uint64) (SpreadResult, error) {
	if err := p.Validate(); err != nil {
		return SpreadResult{}, err
	}
	if clients < 1 || clients > MaxSpreadClients {
		return SpreadResult{}, &ParamError{Field: "clients", Msg: fmt.Sprintf("must be between 1 and %d", MaxSpreadClients)}
	}
	r := SpreadResult{Policy: p, Clients: clients, Seed: seed, Requests: clients * p.MaxRetries}
	r.FirstRoundFrom, r.FirstRoundWindow = firstRound(p)
	if p.MaxRetries == 0 {
		return r, nil
	}
	if r.FirstRoundWindow < time.Millisecond {
		r.FirstRoundPerMs = float64(clients)
	} else {
		r.FirstRoundPerMs = float64(clients) / (float64(r.FirstRoundWindow) / float64(time.Millisecond))
	}

	// arrivals is round-major: round k (0-based) occupies
	// arrivals[k*clients : (k+1)*clients].
	arrivals := make([]int64, clients*p.MaxRetries)
	rnd := rand.New(rand.NewPCG(seed, 0x5eed_5bead))
	for i := range clients {
		var t time.Duration
		prev := p.Base
		for k := range p.MaxRetries {
			w := p.Wait(k, prev, rnd)
			t += w
			prev = w
			arrivals[k*clients+i] = t.Milliseconds()
		}
	}
	first := arrivals[:clients]
	r.LastMs = slices.Max(arrivals)
	r.Bins = histogram(arrivals, 0, r.LastMs)
	r.FirstRoundBins = histogram(first, slices.Min(first), slices.Max(first))
	_, r.FirstRoundPeakCount = peak(first)
	r.PeakMs, r.PeakCount = peak(arrivals)
	return r, nil
}

// firstRound gives the interval over which retry 1 can land.
func firstRound(p Policy) (from, window time.Duration) {
	c := p.Ceiling(0)
	switch p.Strategy {
	case Exponential:
		return c, 0
	case FullJitter:
		return 0, c
	case EqualJitter:
		return c / 2, c - c/2
	case Decorrelated:
		return p.Base, min(p.Cap, 3*p.Base) - p.Base
	default: // None
		return 0, 0
	}
}

// histogram counts ms values in [lo, hi] into at most MaxSpreadBins equal
// bins that together cover the whole range.
func histogram(ms []int64, lo, hi int64) []SpreadBin {
	span := hi - lo + 1
	width := (span + MaxSpreadBins - 1) / MaxSpreadBins
	n := (span + width - 1) / width
	bins := make([]SpreadBin, n)
	for i := range bins {
		bins[i].StartMs = lo + int64(i)*width
		bins[i].WidthMs = width
	}
	for _, m := range ms {
		bins[(m-lo)/width].Count++
	}
	for i := range bins {
		bins[i].PerMs = float64(bins[i].Count) / float64(width)
	}
	return bins
}

// peak finds the millisecond with the most arrivals (the earliest on a tie).
// Short spans are counted in an array; long ones are sorted.
func peak(ms []int64) (at int64, count int) {
	lo, hi := slices.Min(ms), slices.Max(ms)
	if hi-lo < 1<<20 {
		counts := make([]int32, hi-lo+1)
		for _, m := range ms {
			counts[m-lo]++
		}
		for i, c := range counts {
			if int(c) > count {
				at, count = lo+int64(i), int(c)
			}
		}
		return at, count
	}
	sorted := slices.Clone(ms)
	slices.Sort(sorted)
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j] == sorted[i] {
			j++
		}
		if j-i > count {
			at, count = sorted[i], j-i
		}
		i = j
	}
	return at, count
}
