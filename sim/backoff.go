package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Strategy names a way of choosing how long a client waits before it retries.
// The values are the short names used in URLs, JSON and CLI flags, so they are
// plain strings rather than an int enum.
type Strategy string

// The five strategies compared by the AWS Architecture Blog post
// "Exponential Backoff And Jitter". c below is the ceiling min(cap, base·2^n).
const (
	// None retries at once (wait 0): the behaviour that turns an outage into
	// a retry storm, kept as the baseline.
	None Strategy = "none"
	// Exponential waits exactly c. It spaces the retries of one client but
	// keeps a crowd of clients in lockstep, so they collide again each round.
	Exponential Strategy = "exponential"
	// FullJitter waits uniform(0, c): the article's and this project's
	// choice, because it spreads a crowd the most with the shortest formula.
	FullJitter Strategy = "full"
	// EqualJitter waits c/2 + uniform(0, c/2): never shorter than half the
	// ceiling, at the price of less spreading than FullJitter.
	EqualJitter Strategy = "equal"
	// Decorrelated waits min(cap, uniform(base, 3·prev)), where prev is the
	// previous wait of the same client and starts at base. It ignores the
	// attempt number. Known quirk: once 3·prev exceeds cap, every sample above
	// cap is clamped to exactly cap, so a large share of the later waits pile
	// up at cap instead of being spread below it.
	Decorrelated Strategy = "decorrelated"
)

// Strategies lists every strategy in a stable order (the order of the
// AWS comparison), for menus, sweeps and tests.
func Strategies() []Strategy {
	return []Strategy{None, Exponential, FullJitter, EqualJitter, Decorrelated}
}

// Valid reports whether s is one of the known strategies.
func (s Strategy) Valid() bool {
	switch s {
	case None, Exponential, FullJitter, EqualJitter, Decorrelated:
		return true
	}
	return false
}

// ParseStrategy turns a user-supplied name (form field, query parameter, CLI
// flag) into a Strategy. Case and surrounding spaces are ignored so "Full"
// works; anything else is a *ParamError on field "strategy" that lists the
// accepted names, so the caller can show it as is.
func ParseStrategy(s string) (Strategy, error) {
	st := Strategy(strings.ToLower(strings.TrimSpace(s)))
	if !st.Valid() {
		return "", &ParamError{Field: "strategy", Msg: fmt.Sprintf("unknown backoff strategy %q (want one of %s)", s, strategyNames())}
	}
	return st, nil
}

func strategyNames() string {
	var b strings.Builder
	for i, s := range Strategies() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(s))
	}
	return b.String()
}

// ParamError says which input field of a simulation or policy is wrong and
// why. Field uses the snake_case names of the JSON/form parameters so a web
// handler can attach the message to the right input (and map it to a 400).
type ParamError struct {
	Field string
	Msg   string
}

// Error formats the error as "field: message".
func (e *ParamError) Error() string { return e.Field + ": " + e.Msg }

// Policy limits that keep every computation cheap and free of overflow even
// when the numbers come straight from a web form.
const (
	// MaxPolicyRetries bounds Policy.MaxRetries. Thirty doublings already
	// take any sane base past any sane cap.
	MaxPolicyRetries = 30
	// MaxPolicyCap bounds Policy.Cap: a single wait longer than the 24 hours
	// a server typically remembers an idempotency key makes no sense.
	MaxPolicyCap = 24 * time.Hour
)

// Policy is a retry policy: how many retries, and how long to wait before
// each of them.
type Policy struct {
	// Base is the first ceiling (retry 1, n = 0).
	Base time.Duration `json:"base_ns"`
	// Cap is the largest ceiling and the largest wait.
	Cap time.Duration `json:"cap_ns"`
	// MaxRetries is the number of retries after the first attempt, so a
	// request is sent at most MaxRetries+1 times.
	MaxRetries int `json:"max_retries"`
	// Strategy picks the wait below (or at) each ceiling.
	Strategy Strategy `json:"strategy"`
}

// DefaultPolicy is the article's policy (base 0.5 s, cap 8 s, 5 retries,
// full jitter), used by the retrying client and the schedule page.
func DefaultPolicy() Policy {
	return Policy{Base: 500 * time.Millisecond, Cap: 8 * time.Second, MaxRetries: 5, Strategy: FullJitter}
}

// Validate checks the policy and returns a *ParamError naming the first bad
// field (base, cap, max_retries, strategy), or nil.
func (p Policy) Validate() error {
	switch {
	case p.Base <= 0:
		return &ParamError{Field: "base", Msg: "must be greater than zero"}
	case p.Cap < p.Base:
		return &ParamError{Field: "cap", Msg: fmt.Sprintf("must be at least the base (%v)", p.Base)}
	case p.Cap > MaxPolicyCap:
		return &ParamError{Field: "cap", Msg: fmt.Sprintf("must be at most %v", MaxPolicyCap)}
	case p.MaxRetries < 0:
		return &ParamError{Field: "max_retries", Msg: "must not be negative"}
	case p.MaxRetries > MaxPolicyRetries:
		return &ParamError{Field: "max_retries", Msg: fmt.Sprintf("must be at most %d", MaxPolicyRetries)}
	case !p.Strategy.Valid():
		return &ParamError{Field: "strategy", Msg: fmt.Sprintf("unknown backoff strategy %q (want one of %s)", p.Strategy, strategyNames())}
	}
	return nil
}

// Ceiling is min(cap, base·2^n), the upper end of the wait for exponent n.
// It doubles step by step and stops at the cap, so a huge n cannot overflow.
// A negative n is treated as 0.
func (p Policy) Ceiling(n int) time.Duration {
	c := min(p.Base, p.Cap)
	if c <= 0 { // invalid policy; avoid a long loop that can never reach the cap
		return max(c, 0)
	}
	for i := 0; i < n; i++ {
		if c > p.Cap/2 {
			return p.Cap
		}
		c *= 2
	}
	return c
}

// Wait samples one wait for exponent n. prev is the previous wait of the
// same client and matters only to Decorrelated (pass 0 or Base for the first
// retry; anything below Base counts as Base). rnd supplies the randomness so
// simulations are reproducible; nil uses the goroutine-safe global source.
// Every jittered range includes both ends.
func (p Policy) Wait(n int, prev time.Duration, rnd *rand.Rand) time.Duration {
	switch p.Strategy {
	case Exponential:
		return p.Ceiling(n)
	case FullJitter:
		return uniform(rnd, 0, p.Ceiling(n))
	case EqualJitter:
		c := p.Ceiling(n)
		half := c / 2
		return half + uniform(rnd, 0, c-half)
	case Decorrelated:
		prev = max(prev, p.Base)
		hi := time.Duration(math.MaxInt64)
		if prev <= hi/3 {
			hi = prev * 3
		}
		return min(p.Cap, uniform(rnd, p.Base, hi))
	default: // None, and anything unknown: never wait
		return 0
	}
}

// uniform returns a duration in [lo, hi], both ends included.
func uniform(rnd *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	span := int64(hi - lo)
	if span == math.MaxInt64 { // cannot add 1; losing one nanosecond is harmless
		span--
	}
	if rnd == nil {
		return lo + time.Duration(rand.Int64N(span+1))
	}
	return lo + time.Duration(rnd.Int64N(span+1))
}

// ScheduleRow describes the wait before one retry.
type ScheduleRow struct {
	// Retry counts retries from 1 (the first request is not a retry).
	Retry int `json:"retry"`
	// N is the exponent used for this retry: retry k uses n = k-1, so the
	// first wait is bounded by base itself. This is the article's table.
	N int `json:"n"`
	// Ceiling is min(cap, base·2^n). For Decorrelated it is shown for
	// comparison only; that strategy does not use it.
	Ceiling time.Duration `json:"ceiling_ns"`
	// Min, Max and Mean describe the distribution of the wait.
	Min  time.Duration `json:"min_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
	// MeanEstimated is true when Mean is a deterministic Monte Carlo
	// estimate rather than an exact value (Decorrelated once the cap can bind).
	MeanEstimated bool `json:"mean_estimated"`
	// HitsCap is true when the ceiling (or, for Decorrelated, Max) is the cap.
	HitsCap bool `json:"hits_cap"`
}

// Schedule is the worked example for a policy: one row per retry and the
// totals, all excluding the time the requests themselves take.
type Schedule struct {
	Policy Policy        `json:"policy"`
	Rows   []ScheduleRow `json:"rows"`
	// MinTotal, WorstTotal and MeanTotal sum Min, Max and Mean over the rows.
	MinTotal   time.Duration `json:"min_total_ns"`
	WorstTotal time.Duration `json:"worst_total_ns"`
	MeanTotal  time.Duration `json:"mean_total_ns"`
}

// decorrelatedSamples is the number of simulated clients behind the
// Decorrelated mean estimate. With a fixed seed the estimate is the same on
// every call; its relative error is well under 1%.
const (
	decorrelatedSamples = 20000
	decorrelatedSeed    = 1
)

// Schedule validates the policy and computes its worked example. For the
// default policy it reproduces the article's table: ceilings 0.5, 1, 2, 4,
// 8 s, means 0.25, 0.5, 1, 2, 4 s, worst total 15.5 s, mean total 7.75 s.
//
// For Decorrelated, Min is base and Max is min(cap, base·3^retry), the true
// bounds. Its Mean is exact while base·3^retry stays within the cap (then
// no sample is clamped and m_k = (base + 3·m_{k-1})/2 with m_0 = base); after that the clamp makes the mean
// depend on the whole distribution, so it is estimated by simulating a fixed
// number of clients with a fixed seed, and MeanEstimated is set.
func (p Policy) Schedule() (Schedule, error) {
	if err := p.Validate(); err != nil {
		return Schedule{}, err
	}
	s := Schedule{Policy: p, Rows: make([]ScheduleRow, 0, p.MaxRetries)}
	var est []float64
	if p.Strategy == Decorrelated {
		est = decorrelatedMeans(p)
	}
	exactMean := float64(p.Base) // m_0: the "previous wait" before retry 1
	decMax := p.Base
	for k := 1; k <= p.MaxRetries; k++ {
		n := k - 1
		c := p.Ceiling(n)
		r := ScheduleRow{Retry: k, N: n, Ceiling: c, HitsCap: c == p.Cap}
		switch p.Strategy {
		case None:
			// all zero: retry at once
		case Exponential:
			r.Min, r.Max, r.Mean = c, c, c
		case FullJitter:
			r.Min, r.Max, r.Mean = 0, c, c/2
		case EqualJitter:
			half := c / 2
			r.Min, r.Max = half, c
			r.Mean = half + (c-half)/2
		case Decorrelated:
			uncapped := decMax <= p.Cap/3
			if uncapped {
				decMax *= 3
			} else {
				decMax = p.Cap
			}
			r.Min, r.Max = p.Base, decMax
			r.HitsCap = decMax == p.Cap
			exactMean = (float64(p.Base) + 3*exactMean) / 2
			if uncapped {
				r.Mean = time.Duration(math.Round(exactMean))
			} else {
				r.Mean = time.Duration(math.Round(est[k-1]))
				r.MeanEstimated = true
			}
		}
		s.Rows = append(s.Rows, r)
		s.MinTotal += r.Min
		s.WorstTotal += r.Max
		s.MeanTotal += r.Mean
	}
	return s, nil
}

// decorrelatedMeans estimates the mean wait of each retry under Decorrelated
// by simulating decorrelatedSamples clients with a fixed seed.
func decorrelatedMeans(p Policy) []float64 {
	rnd := rand.New(rand.NewPCG(decorrelatedSeed, decorrelatedSeed))
	sums := make([]float64, p.MaxRetries)
	for i := 0; i < decorrelatedSamples; i++ {
		prev := p.Base
		for k := range sums {
			prev = p.Wait(0, prev, rnd)
			sums[k] += float64(prev)
		}
	}
	for k := range sums {
		sums[k] /= decorrelatedSamples
	}
	return sums
}
