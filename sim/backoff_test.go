package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

func ms(f float64) time.Duration  { return time.Duration(f * float64(time.Millisecond)) }
func sec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func TestScheduleReproducesTheWorkedExample(t *testing.T) {
	s, err := DefaultPolicy().Schedule()
	if err != nil {
		t.Fatal(err)
	}
	want := []ScheduleRow{
		{Retry: 1, N: 0, Ceiling: sec(0.5), Min: 0, Max: sec(0.5), Mean: sec(0.25)},
		{Retry: 2, N: 1, Ceiling: sec(1), Min: 0, Max: sec(1), Mean: sec(0.5)},
		{Retry: 3, N: 2, Ceiling: sec(2), Min: 0, Max: sec(2), Mean: sec(1)},
		{Retry: 4, N: 3, Ceiling: sec(4), Min: 0, Max: sec(4), Mean: sec(2)},
		{Retry: 5, N: 4, Ceiling: sec(8), Min: 0, Max: sec(8), Mean: sec(4), HitsCap: true},
	}
	if len(s.Rows) != len(want) {
		t.Fatalf("got %d rows, want %d", len(s.Rows), len(want))
	}
	for i, w := range want {
		t.Run("row for retry "+strconv.Itoa(w.Retry)+" matches the article", func(t *testing.T) {
			if s.Rows[i] != w {
				t.Errorf("got %+v, want %+v", s.Rows[i], w)
			}
		})
	}
	t.Run("worst-case total is 15.5 seconds", func(t *testing.T) {
		if s.WorstTotal != sec(15.5) {
			t.Errorf("got %v", s.WorstTotal)
		}
	})
	t.Run("mean total is half of that, 7.75 seconds", func(t *testing.T) {
		if s.MeanTotal != sec(7.75) {
			t.Errorf("got %v", s.MeanTotal)
		}
	})
	t.Run("best case waits nothing at all", func(t *testing.T) {
		if s.MinTotal != 0 {
			t.Errorf("got %v", s.MinTotal)
		}
	})
}

func TestScheduleOfOtherStrategies(t *testing.T) {
	base := DefaultPolicy()
	with := func(s Strategy) Policy { p := base; p.Strategy = s; return p }
	tests := []struct {
		name          string
		policy        Policy
		retry         int // 1-based row to check
		min, max, avg time.Duration
		estimated     bool
	}{
		{"no backoff never waits", with(None), 3, 0, 0, 0, false},
		{"exponential without jitter always waits the ceiling", with(Exponential), 3, sec(2), sec(2), sec(2), false},
		{"equal jitter waits between half the ceiling and the ceiling", with(EqualJitter), 3, sec(1), sec(2), sec(1.5), false},
		{"decorrelated starts between base and three times base", with(Decorrelated), 1, sec(0.5), sec(1.5), sec(1), false},
		{"decorrelated second retry is exact while the cap cannot bind", with(Decorrelated), 2, sec(0.5), sec(4.5), sec(1.75), false},
		{"decorrelated third retry is capped and its mean estimated", with(Decorrelated), 3, sec(0.5), sec(8), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.policy.Schedule()
			if err != nil {
				t.Fatal(err)
			}
			r := s.Rows[tt.retry-1]
			if r.Min != tt.min || r.Max != tt.max {
				t.Errorf("range [%v, %v], want [%v, %v]", r.Min, r.Max, tt.min, tt.max)
			}
			if r.MeanEstimated != tt.estimated {
				t.Errorf("MeanEstimated = %v", r.MeanEstimated)
			}
			if !tt.estimated && r.Mean != tt.avg {
				t.Errorf("mean %v, want %v", r.Mean, tt.avg)
			}
			if r.Mean < r.Min || r.Mean > r.Max {
				t.Errorf("mean %v outside [%v, %v]", r.Mean, r.Min, r.Max)
			}
		})
	}
	t.Run("decorrelated schedule is the same on every call", func(t *testing.T) {
		a, _ := with(Decorrelated).Schedule()
		b, _ := with(Decorrelated).Schedule()
		if a.MeanTotal != b.MeanTotal {
			t.Errorf("%v != %v", a.MeanTotal, b.MeanTotal)
		}
	})
	t.Run("decorrelated estimated mean agrees with a fresh simulation", func(t *testing.T) {
		p := with(Decorrelated)
		s, _ := p.Schedule()
		rnd := rand.New(rand.NewPCG(99, 99))
		const clients = 20000
		sum := make([]float64, p.MaxRetries)
		for range clients {
			prev := p.Base
			for k := range sum {
				prev = p.Wait(0, prev, rnd)
				sum[k] += float64(prev)
			}
		}
		for k, r := range s.Rows {
			got := sum[k] / clients
			if math.Abs(got-float64(r.Mean)) > 0.02*float64(r.Mean) {
				t.Errorf("retry %d: schedule mean %v, simulation %v", r.Retry, r.Mean, time.Duration(got))
			}
		}
	})
}

func TestCeiling(t *testing.T) {
	p := Policy{Base: sec(0.5), Cap: sec(8), MaxRetries: 5, Strategy: FullJitter}
	tests := []struct {
		name string
		n    int
		want time.Duration
	}{
		{"exponent zero is the base", 0, sec(0.5)},
		{"each step doubles", 3, sec(4)},
		{"reaching the cap stays at the cap", 4, sec(8)},
		{"passing the cap is clamped", 5, sec(8)},
		{"a huge exponent does not overflow", 1 << 40, sec(8)},
		{"a negative exponent counts as zero", -3, sec(0.5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Ceiling(tt.n); got != tt.want {
				t.Errorf("Ceiling(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
	t.Run("a cap near the largest duration does not overflow", func(t *testing.T) {
		q := Policy{Base: time.Nanosecond, Cap: time.Duration(math.MaxInt64)}
		if got := q.Ceiling(100); got != q.Cap {
			t.Errorf("got %v", got)
		}
	})
}

func TestWaitStaysInsideEachStrategysRange(t *testing.T) {
	policies := []Policy{
		DefaultPolicy(),
		{Base: HerdBase, Cap: HerdCap, MaxRetries: 30},
		{Base: ms(1), Cap: ms(1)},
		{Base: ms(3), Cap: ms(7), MaxRetries: 30},
	}
	type check func(p Policy, n int, prev, w time.Duration) bool
	ranges := map[Strategy]check{
		None:        func(p Policy, n int, prev, w time.Duration) bool { return w == 0 },
		Exponential: func(p Policy, n int, prev, w time.Duration) bool { return w == p.Ceiling(n) },
		FullJitter:  func(p Policy, n int, prev, w time.Duration) bool { return w >= 0 && w <= p.Ceiling(n) },
		EqualJitter: func(p Policy, n int, prev, w time.Duration) bool {
			return w >= p.Ceiling(n)/2 && w <= p.Ceiling(n)
		},
		Decorrelated: func(p Policy, n int, prev, w time.Duration) bool {
			return w >= p.Base && w <= min(p.Cap, 3*max(prev, p.Base))
		},
	}
	for _, st := range Strategies() {
		t.Run(string(st)+" waits stay in range over many seeds", func(t *testing.T) {
			for _, p := range policies {
				p.Strategy = st
				for seed := range uint64(200) {
					rnd := rand.New(rand.NewPCG(seed, 7))
					prev := p.Base
					for n := range 32 {
						w := p.Wait(n, prev, rnd)
						if !ranges[st](p, n, prev, w) {
							t.Fatalf("policy %+v seed %d n %d prev %v: wait %v out of range", p, seed, n, prev, w)
						}
						prev = w
					}
				}
			}
		})
	}
	t.Run("full jitter reaches both ends of its range", func(t *testing.T) {
		p := Policy{Base: 2, Cap: 2, Strategy: FullJitter}
		seen := map[time.Duration]bool{}
		rnd := rand.New(rand.NewPCG(1, 1))
		for range 200 {
			seen[p.Wait(0, 0, rnd)] = true
		}
		if !seen[0] || !seen[1] || !seen[2] {
			t.Errorf("saw %v", seen)
		}
	})
	t.Run("decorrelated piles many later waits up exactly at the cap", func(t *testing.T) {
		p := DefaultPolicy()
		p.Strategy = Decorrelated
		rnd := rand.New(rand.NewPCG(3, 3))
		atCap, total := 0, 0
		for range 1000 {
			prev := p.Base
			for k := range 30 {
				prev = p.Wait(0, prev, rnd)
				if k >= 10 {
					total++
					if prev == p.Cap {
						atCap++
					}
				}
			}
		}
		// A continuous distribution would put no mass on a single point;
		// the clamp puts over a third of the later waits (about 43%) there.
		if atCap*3 < total {
			t.Errorf("only %d of %d waits at the cap", atCap, total)
		}
	})
}

func TestPolicyValidateNamesTheBadField(t *testing.T) {
	ok := DefaultPolicy()
	tests := []struct {
		name  string
		edit  func(*Policy)
		field string
	}{
		{"a zero base is rejected", func(p *Policy) { p.Base = 0 }, "base"},
		{"a negative base is rejected", func(p *Policy) { p.Base = -1 }, "base"},
		{"a cap below the base is rejected", func(p *Policy) { p.Cap = p.Base - 1 }, "cap"},
		{"a cap above a day is rejected", func(p *Policy) { p.Cap = 25 * time.Hour }, "cap"},
		{"negative retries are rejected", func(p *Policy) { p.MaxRetries = -1 }, "max_retries"},
		{"more than thirty retries are rejected", func(p *Policy) { p.MaxRetries = 31 }, "max_retries"},
		{"an unknown strategy is rejected", func(p *Policy) { p.Strategy = "wild" }, "strategy"},
		{"the default policy is fine", func(p *Policy) {}, ""},
		{"a cap equal to the base is fine", func(p *Policy) { p.Cap = p.Base }, ""},
		{"zero retries are fine", func(p *Policy) { p.MaxRetries = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.edit(&p)
			err := p.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Field != tt.field {
				t.Fatalf("got %v, want a ParamError on %q", err, tt.field)
			}
			if _, err := p.Schedule(); err == nil {
				t.Error("Schedule accepted an invalid policy")
			}
		})
	}
}

func TestParseStrategy(t *testing.T) {
	tests := []struct {
		in      string
		want    Strategy
		wantErr bool
	}{
		{"full", FullJitter, false},
		{" Equal ", EqualJitter, false},
		{"DECORRELATED", Decorrelated, false},
		{"none", None, false},
		{"exponential", Exponential, false},
		{"", "", true},
		{"jitter", "", true},
	}
	for _, tt := range tests {
		t.Run("parsing "+strconv.Quote(tt.in), func(t *testing.T) {
			got, err := ParseStrategy(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %q, %v", got, err)
			}
			var pe *ParamError
			if err != nil && (!errors.As(err, &pe) || pe.Field != "strategy") {
				t.Errorf("error %v is not a ParamError on strategy", err)
			}
		})
	}
}
