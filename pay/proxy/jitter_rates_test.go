package proxy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The rates docs/proxy.md gives for rule 7 on real clocks: many clients
// of each kind, each paying the default schedule once with its waits
// lengthened by timing noise, graded by judgeJitter. Seeded, so the
// rates are the same on every run:
//
//	go test -run TestJitterRuleRates -v ./pay/proxy/
func TestJitterRuleRates(t *testing.T) {
	const runs = 10000
	type kind struct {
		name       string
		wait       func(rnd *rand.Rand, n int) float64 // ms
		retries    int
		broken     func(rate float64) bool // the rate of runs judged broken that fails this test
		connection bool                    // retries broken connections too
	}
	full := func(base, cap float64) func(*rand.Rand, int) float64 {
		return func(rnd *rand.Rand, n int) float64 {
			return rnd.Float64() * math.Min(cap, base*math.Pow(2, float64(n)))
		}
	}
	fixedCeiling := func(c float64) func(*rand.Rand, int) float64 {
		return func(rnd *rand.Rand, _ int) float64 { return rnd.Float64() * c }
	}
	passes := func(max float64) func(float64) bool { return func(r float64) bool { return r > max } }
	fails := func(min float64) func(float64) bool { return func(r float64) bool { return r < min } }
	kinds := []kind{
		{"full jitter, base 50 ms, cap 400 ms, 5 retries", full(50, 400), 5, passes(0.005), false},
		{"the same, retrying broken connections", full(50, 400), 5, passes(0.005), true},
		{"full jitter, base 500 ms, cap 8 s, 5 retries", full(500, 8000), 5, passes(0.001), false},
		{"full jitter, base 20 ms, cap 2 s, 5 retries", full(20, 2000), 5, passes(0.05), false},
		{"full jitter, base 50 ms, cap 400 ms, 4 retries", full(50, 400), 4, passes(0.01), false},
		{"full jitter, base 100 ms, cap 200 ms, 5 retries", full(100, 200), 5, passes(0.15), false},
		{"a fixed ceiling of 200 ms, 5 retries", fixedCeiling(200), 5, fails(0.9), false},
		{"a fixed ceiling of 50 ms, 5 retries", fixedCeiling(50), 5, fails(0.85), false},
		{"a fixed ceiling of 20 ms, 5 retries", fixedCeiling(20), 5, fails(0.8), false},
	}
	for _, k := range kinds {
		rnd := rand.New(rand.NewPCG(7, 7))
		broken := 0
		for range runs {
			c := syntheticClient(rnd, k.wait, k.retries, k.connection)
			if _, vs, _, _, _ := c.judgeJitter(); len(vs) > 0 {
				broken++
			}
		}
		rate := float64(broken) / runs
		t.Logf("%-50s judged broken in %6.3f %% of %d runs", k.name, 100*rate, runs)
		if k.broken(rate) {
			t.Errorf("%s: broken in %.3f %% of runs", k.name, 100*rate)
		}
	}
}

// syntheticClient is the record of a client that paid each action of the
// default schedule once, retrying what a careful client retries (broken
// connections only if connection), each wait drawn by wait and lengthened
// by noise: a few milliseconds always, and with a chance of 5 % a stall of
// up to 150 ms. (The waits after a Retry-After, which rule 7 does not
// read, are left as drawn.)
func syntheticClient(rnd *rand.Rand, wait func(*rand.Rand, int) float64, retries int, connection bool) *client {
	c := &client{}
	for i, f := range DefaultSchedule {
		a := &Action{ID: i + 1, Fault: f}
		for n := 0; ; n++ {
			at := Attempt{Number: n + 1, Done: true, Status: 201}
			if f.meets(n + 1) {
				at.Fault = f
				switch f {
				case Refuse, Reset, Lost:
					at.Status = 0
				case Halfway:
					at.Status = 500
				case Down, Outage:
					at.Status = 503
				case Conflict, TooMany, Unavailable:
					at.Status, at.RetryAfter = map[Fault]int{Conflict: 409, TooMany: 429, Unavailable: 503}[f], RetryAfterSeconds
				case BadRequest:
					at.Status = 400
				case Unprocessable:
					at.Status = 422
				}
			}
			if n > 0 {
				at.WaitMS = wait(rnd, n-1) + math.Abs(rnd.NormFloat64())*3
				if rnd.Float64() < 0.05 {
					at.WaitMS += rnd.Float64() * 150
				}
			}
			a.Attempts = append(a.Attempts, at)
			retry := at.Status == 0 && connection || at.Status != 0 && retryableStatus(at.Status)
			if !retry || n == retries {
				break
			}
		}
		c.actions = append(c.actions, a)
	}
	return c
}
