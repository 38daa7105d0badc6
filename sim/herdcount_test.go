package sim

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"
)

// TestCountedHerdMatchesEvents runs the counted herd and the event model
// on the same configurations over many seeds and checks that the mean work
// (writes) and the mean completion time agree: the difference of the means
// must stay under 1.5% of the event model's mean plus three standard errors
// of that difference. Herds of 100 and 1,000 clients are compared for
// every strategy, 3,000 for None and Exponential (pooled while more than
// 1,000 are left) and 10,000 for the jittered ones (the event model takes
// seconds there; the others are compared at that size in the benchmark
// table of docs/benchmarks.md). The sizes over 1,000 are left out with
// -short and under the race detector, and 10,000 unless
// PAYTWICE_TEST_FULL=1.
func TestCountedHerdMatchesEvents(t *testing.T) {
	cases := []struct {
		clients int
		seeds   int
		strats  []Strategy
	}{
		{100, 60, Strategies()},
		{1000, 8, Strategies()},
		{3000, 3, []Strategy{None, Exponential}},
		{10_000, 2, []Strategy{FullJitter, EqualJitter, Decorrelated}},
	}
	for _, c := range cases {
		if c.clients > 3000 && !fullRun() || c.clients > 1000 && (testing.Short() || raceDetector) {
			// The event model takes seconds here, ten times as long
			// under the race detector; the sizes below still run. The
			// largest herds run with PAYTWICE_TEST_FULL=1 alone (and
			// no race detector): the quick run stops at 3,000.
			continue
		}
		for _, st := range c.strats {
			t.Run(fmt.Sprintf("%d clients %s", c.clients, st), func(t *testing.T) {
				t.Parallel() // a model of its own, on its own seeds
				var events herdSim
				var counted countedHerd
				var ew, ec, cw, cc stat
				for seed := range c.seeds {
					cfg, err := HerdConfig{Clients: c.clients, Strategy: st, Seed: uint64(1000 + seed)}.withDefaults()
					if err != nil {
						t.Fatal(err)
					}
					e := events.run(cfg)
					n := counted.run(cfg)
					if n.Truncated || n.Succeeded != c.clients || e.Truncated {
						t.Fatalf("seed %d: counted %+v, events %+v", seed, n, e)
					}
					ew.add(float64(e.Work))
					cw.add(float64(n.Work))
					ec.add(e.CompletionTime.Seconds())
					cc.add(n.CompletionTime.Seconds())
				}
				for _, m := range []struct {
					what            string
					events, counted stat
				}{{"work", ew, cw}, {"completion", ec, cc}} {
					diff := math.Abs(m.counted.mean() - m.events.mean())
					allowed := 0.015*m.events.mean() + 3*math.Sqrt(m.events.se2()+m.counted.se2())
					t.Logf("%s: events %.4g, counted %.4g (%.3f×), allowed difference %.3g", m.what,
						m.events.mean(), m.counted.mean(), m.counted.mean()/m.events.mean(), allowed)
					if diff > allowed {
						t.Errorf("%s: counted mean %.4g against the events' %.4g: differs by %.3g, more than %.3g",
							m.what, m.counted.mean(), m.events.mean(), diff, allowed)
					}
				}
			})
		}
	}
}

// fullRun reports whether the tests run in full (PAYTWICE_TEST_FULL=1).
func fullRun() bool { return os.Getenv("PAYTWICE_TEST_FULL") == "1" }

// stat accumulates a sample's mean and variance.
type stat struct{ n, sum, sq float64 }

func (s *stat) add(x float64) { s.n++; s.sum += x; s.sq += x * x }
func (s stat) mean() float64  { return s.sum / s.n }

// se2 is the squared standard error of the mean.
func (s stat) se2() float64 {
	if s.n < 2 {
		return 0
	}
	v := (s.sq - s.sum*s.sum/s.n) / (s.n - 1)
	return max(v, 0) / s.n
}

func TestCountedHerd(t *testing.T) {
	for _, st := range Strategies() {
		t.Run(string(st)+" is deterministic for a seed and every client succeeds", func(t *testing.T) {
			cfg := HerdConfig{Clients: 3000, Strategy: st, Seed: 7}
			a, err := RunHerd(cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := RunHerd(cfg)
			if a != b {
				t.Errorf("%+v != %+v", a, b)
			}
			if a.Succeeded != 3000 || a.Truncated || a.Work < 3000 || a.CompletionTime <= 0 {
				t.Errorf("run %+v", a)
			}
			cfg.Seed = 8
			if c, _ := RunHerd(cfg); c == a {
				t.Errorf("seed 8 gave the very same run as seed 7")
			}
		})
	}
	t.Run("a counted herd finishes with any base and cap it accepts", func(t *testing.T) {
		for _, st := range Strategies() {
			for _, bc := range [][2]time.Duration{{ms(5), ms(5)}, {time.Nanosecond, ms(50)}, {time.Second, MaxCountedHerdCap}} {
				r, err := RunHerd(HerdConfig{Clients: 1200, Strategy: st, Base: bc[0], Cap: bc[1], Seed: 1})
				if err != nil || r.Succeeded != 1200 || r.Truncated || r.Work < 1200 {
					t.Errorf("%s, base %v, cap %v: %+v, %v", st, bc[0], bc[1], r, err)
				}
			}
		}
	})
	t.Run("a herd above the event model's size is counted", func(t *testing.T) {
		var s herdRunner
		cfg, _ := HerdConfig{Clients: MaxEventHerdClients + 1, Strategy: FullJitter, Seed: 3}.withDefaults()
		var c countedHerd
		if got, want := s.run(cfg), c.run(cfg); got != want {
			t.Errorf("RunHerd gave %+v, the counted herd %+v", got, want)
		}
	})
	t.Run("a counted herd refuses a cap its calendar cannot span", func(t *testing.T) {
		_, err := RunHerd(HerdConfig{Clients: MaxEventHerdClients + 1, Strategy: FullJitter, Cap: 2 * MaxCountedHerdCap})
		if pe, ok := err.(*ParamError); !ok || pe.Field != "cap" {
			t.Errorf("got %v", err)
		}
		if _, err := RunHerd(HerdConfig{Clients: MaxEventHerdClients, Strategy: FullJitter, Cap: 2 * MaxCountedHerdCap}); err != nil {
			t.Errorf("the event model takes any cap: %v", err)
		}
	})
}

func TestBinomial(t *testing.T) {
	// Mean and variance of many draws, for the inversion and the normal
	// branches and the mirrored p > 0.5.
	var c countedHerd
	c.init(HerdConfig{Clients: 1, Strategy: None, Base: HerdBase, Cap: HerdCap, Seed: 1})
	for _, tt := range []struct {
		n int
		p float64
	}{{10, 0.3}, {1000, 0.01}, {1000, 0.3}, {50, 0.9}, {100000, 0.5}} {
		var s stat
		const draws = 20000
		for range draws {
			x := binomial(c.rnd, tt.n, tt.p)
			if x < 0 || x > tt.n {
				t.Fatalf("Binomial(%d, %v) drew %d", tt.n, tt.p, x)
			}
			s.add(float64(x))
		}
		mean, v := float64(tt.n)*tt.p, float64(tt.n)*tt.p*(1-tt.p)
		if d := math.Abs(s.mean() - mean); d > 5*math.Sqrt(v/draws) {
			t.Errorf("Binomial(%d, %v): mean %.3f, want %.3f", tt.n, tt.p, s.mean(), mean)
		}
		if got := s.se2() * draws; math.Abs(got-v) > 0.1*v {
			t.Errorf("Binomial(%d, %v): variance %.3f, want %.3f", tt.n, tt.p, got, v)
		}
	}
}
