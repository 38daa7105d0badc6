package sim

import (
	"errors"
	"testing"
)

func TestSpreadOfAThousandClients(t *testing.T) {
	full := DefaultPolicy()
	noJitter := full
	noJitter.Strategy = Exponential

	t.Run("full jitter spreads the first round to 2 requests per millisecond", func(t *testing.T) {
		r, err := Spread(full, 1000, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.FirstRoundPerMs != 2 {
			t.Errorf("FirstRoundPerMs = %v, want 2", r.FirstRoundPerMs)
		}
		if r.FirstRoundFrom != 0 || r.FirstRoundWindow != sec(0.5) {
			t.Errorf("first round [%v, +%v], want [0, +500ms]", r.FirstRoundFrom, r.FirstRoundWindow)
		}
	})
	t.Run("without jitter all 1000 clients retry in the same millisecond", func(t *testing.T) {
		r, err := Spread(noJitter, 1000, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.FirstRoundPerMs != 1000 || r.PeakCount != 1000 || r.PeakMs != 500 || r.FirstRoundPeakCount != 1000 {
			t.Errorf("per ms %v, peak %d at %d ms, first-round peak %d; want 1000 at 500 ms",
				r.FirstRoundPerMs, r.PeakCount, r.PeakMs, r.FirstRoundPeakCount)
		}
	})
	t.Run("with full jitter no millisecond of the first round comes near the spike", func(t *testing.T) {
		for seed := range uint64(20) {
			r, _ := Spread(full, 1000, seed)
			if r.FirstRoundPeakCount > 15 || r.PeakCount > 15 {
				t.Errorf("seed %d: first-round peak %d, overall peak %d", seed, r.FirstRoundPeakCount, r.PeakCount)
			}
		}
	})
	t.Run("the same seed gives the same spread", func(t *testing.T) {
		a, _ := Spread(full, 500, 42)
		b, _ := Spread(full, 500, 42)
		if a.PeakMs != b.PeakMs || a.PeakCount != b.PeakCount || a.LastMs != b.LastMs || len(a.Bins) != len(b.Bins) {
			t.Fatal("results differ")
		}
		for i := range a.Bins {
			if a.Bins[i] != b.Bins[i] {
				t.Fatalf("bin %d differs", i)
			}
		}
	})
}

func TestSpreadHistograms(t *testing.T) {
	for _, st := range Strategies() {
		t.Run(string(st)+" histograms count every retry in at most 200 bins", func(t *testing.T) {
			p := DefaultPolicy()
			p.Strategy = st
			r, err := Spread(p, 1000, 7)
			if err != nil {
				t.Fatal(err)
			}
			for name, bins := range map[string][]SpreadBin{"all rounds": r.Bins, "first round": r.FirstRoundBins} {
				if len(bins) == 0 || len(bins) > MaxSpreadBins {
					t.Fatalf("%s: %d bins", name, len(bins))
				}
				total := 0
				for i, b := range bins {
					total += b.Count
					if i > 0 && b.StartMs != bins[i-1].StartMs+bins[i-1].WidthMs {
						t.Errorf("%s: bin %d does not follow bin %d", name, i, i-1)
					}
				}
				want := r.Requests
				if name == "first round" {
					want = r.Clients
				}
				if total != want {
					t.Errorf("%s: bins hold %d retries, want %d", name, total, want)
				}
			}
			lastBin := r.Bins[len(r.Bins)-1]
			if r.Bins[0].StartMs != 0 || lastBin.StartMs+lastBin.WidthMs <= r.LastMs {
				t.Errorf("bins do not cover [0, %d]", r.LastMs)
			}
		})
	}
	t.Run("a policy with no retries has nothing to chart", func(t *testing.T) {
		p := DefaultPolicy()
		p.MaxRetries = 0
		r, err := Spread(p, 10, 1)
		if err != nil || r.Requests != 0 || len(r.Bins) != 0 {
			t.Errorf("got %+v, %v", r, err)
		}
	})
}

func TestSpreadValidation(t *testing.T) {
	tests := []struct {
		name    string
		policy  Policy
		clients int
		field   string
	}{
		{"zero clients are rejected", DefaultPolicy(), 0, "clients"},
		{"more than the bound of clients are rejected", DefaultPolicy(), MaxSpreadClients + 1, "clients"},
		{"a bad policy is rejected", Policy{Cap: 1, Strategy: FullJitter}, 10, "base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Spread(tt.policy, tt.clients, 1)
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Field != tt.field {
				t.Errorf("got %v, want ParamError on %q", err, tt.field)
			}
		})
	}
}
