package proxy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// firstWaitsClient is the record of a client whose actions each failed
// once with a 503 (no Retry-After) and were retried after the given
// waits: every wait is one before a first retry.
func firstWaitsClient(waits []float64) *client {
	c := &client{}
	for i, w := range waits {
		c.actions = append(c.actions, &Action{ID: i + 1, Attempts: []Attempt{
			{Number: 1, Done: true, Status: 503},
			{Number: 2, Done: true, Status: 201, WaitMS: w},
		}})
	}
	return c
}

// herdReported says whether judgeJitter called the waits a herd.
func herdReported(t *testing.T, waits []float64) (bool, string) {
	t.Helper()
	_, vs, note, _, judged := firstWaitsClient(waits).judgeJitter()
	if judged != len(waits) {
		t.Fatalf("%d of %d waits judged (%s)", judged, len(waits), note)
	}
	for _, v := range vs {
		if strings.Contains(v.Detail, "no jitter") {
			return true, v.Detail
		}
	}
	return false, ""
}

// A wait is measured on real clocks, and a process scheduled late only
// ever lengthens it: a client without jitter whose one or two waits came
// late is still a herd, while jittered waits are not one however they
// fall.
func TestHerdDespiteLateWakeUps(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 38))
	for _, n := range []int{6, 7, 13} {
		for _, late := range [][]float64{{20}, {40}, {200}, {20, 200}, {90, 150}, {200, 200}} {
			t.Run(fmt.Sprintf("%d waits, late by %v ms", n, late), func(t *testing.T) {
				for _, fixed := range []float64{50, 300, 500} {
					waits := make([]float64, n)
					for i := range waits {
						// A few milliseconds of noise always, as on loopback.
						waits[i] = fixed + math.Abs(rnd.NormFloat64())*fixed/100
					}
					for i, d := range late {
						waits[rnd.IntN(n/len(late))+i*(n/len(late))] += d
					}
					if herd, _ := herdReported(t, waits); !herd {
						t.Errorf("waits of %v ms without jitter, %d late: %.1f, not judged a herd", fixed, len(late), waits)
					}
					// Late by more than a tenth, these waits are no herd by
					// the spread of all of them: the test needs them so.
					if lo, hi := minMax(waits); slices.Max(late) > 0.12*fixed && hi-lo <= herdSpread*hi {
						t.Fatalf("%.1f: all within %v of the longest", waits, herdSpread)
					}
				}
			})
		}
	}
	jitters := []struct {
		name string
		wait func(rnd *rand.Rand, ceiling float64) float64
	}{
		{"full jitter", func(rnd *rand.Rand, c float64) float64 { return rnd.Float64() * c }},
		{"equal jitter", func(rnd *rand.Rand, c float64) float64 { return c/2 + rnd.Float64()*c/2 }},
	}
	for _, j := range jitters {
		t.Run(j.name+" is not a herd", func(t *testing.T) {
			for seed := range uint64(200) {
				rnd := rand.New(rand.NewPCG(seed, 38))
				for _, ceiling := range []float64{50, 300, 8000} {
					waits := make([]float64, 13)
					for i := range waits {
						waits[i] = j.wait(rnd, ceiling) + math.Abs(rnd.NormFloat64())*3
					}
					// Late wake-ups too, which lengthen some of them.
					waits[rnd.IntN(13)] += 20 + rnd.Float64()*180
					if herd, detail := herdReported(t, waits); herd {
						t.Fatalf("seed %d, ceiling %v ms: %s", seed, ceiling, detail)
					}
				}
			}
		})
	}
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}
