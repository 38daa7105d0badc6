package sim

import (
	"paytwice/pay"
	"reflect"
	"testing"
)

func TestFaultPlanDraw(t *testing.T) {
	all := pay.ServerFaults{DelayMS: 500, ConnectionNeverHappens: true, FailHalfway: true, ServerError: true, ResponseLost: true, CrashMidway: true}
	allGW := pay.GatewayFaults{LatencyMS: 300, Decline: true, Error: true, Timeout: true}
	random := func(seed int64, p float64) pay.RandomFaults {
		return pay.RandomFaults{Enabled: true, Seed: seed, Probability: p}
	}

	draws := func(p *FaultPlan, f pay.Faults, gen uint64, n int) [][2]any {
		var out [][2]any
		for range n {
			s, g := p.Draw(f, gen)
			out = append(out, [2]any{s, g})
		}
		return out
	}

	t.Run("with random mode off, a request gets every switch as set", func(t *testing.T) {
		f, g := NewFaultPlan().Draw(pay.Faults{Server: all, Gateway: allGW}, 1)
		if f != all || g != allGW {
			t.Fatalf("got %+v %+v", f, g)
		}
	})
	t.Run("the same seed gives the same sequence, and writing it again restarts it", func(t *testing.T) {
		a, b := NewFaultPlan(), NewFaultPlan()
		f := pay.Faults{Server: all, Gateway: allGW, Random: random(42, 0.5)}
		first := draws(a, f, 1, 50)
		if !reflect.DeepEqual(first, draws(b, f, 1, 50)) {
			t.Fatal("two plans with one seed disagree")
		}
		if reflect.DeepEqual(first, draws(a, f, 1, 50)) {
			t.Fatal("the sequence restarted without a write")
		}
		if !reflect.DeepEqual(first, draws(a, f, 2, 50)) {
			t.Fatal("writing the seed again did not restart the sequence")
		}
		f.Random.Seed = 43
		if reflect.DeepEqual(first, draws(a, f, 3, 50)) {
			t.Fatal("another seed gave the same 50 draws")
		}
	})
	t.Run("a request that read an older write draws on from the current sequence", func(t *testing.T) {
		a, b := NewFaultPlan(), NewFaultPlan()
		f := pay.Faults{Server: all, Gateway: allGW, Random: random(42, 0.5)}
		a.Draw(f, 5)
		a.Draw(f, 4)
		b.Draw(f, 5)
		b.Draw(f, 5)
		if !reflect.DeepEqual(draws(a, f, 5, 20), draws(b, f, 5, 20)) {
			t.Fatal("an older write restarted the sequence")
		}
	})
	t.Run("which switches are on does not shift the sequence", func(t *testing.T) {
		a, b := NewFaultPlan(), NewFaultPlan()
		fa := pay.Faults{Server: all, Gateway: allGW, Random: random(7, 0.5)}
		fb := pay.Faults{Server: pay.ServerFaults{ServerError: true}, Random: random(7, 0.5)}
		for i := range 50 {
			sa, _ := a.Draw(fa, 1)
			sb, _ := b.Draw(fb, 1)
			if sa.ServerError != sb.ServerError {
				t.Fatalf("draw %d: server_error %v with every switch on, %v alone", i, sa.ServerError, sb.ServerError)
			}
		}
	})
	t.Run("a switch that is off never fires, and each on switch fires about as often as asked", func(t *testing.T) {
		p := NewFaultPlan()
		f := pay.Faults{Server: pay.ServerFaults{ServerError: true}, Random: random(1, 0.3)}
		fired := 0
		const n = 2000
		for range n {
			s, g := p.Draw(f, 1)
			if s.FailHalfway || s.CrashMidway || g.Decline || s.DelayMS != 0 {
				t.Fatalf("an off switch fired: %+v %+v", s, g)
			}
			if s.ServerError {
				fired++
			}
		}
		if fired < n*25/100 || fired > n*35/100 {
			t.Fatalf("fired %d of %d at probability 0.3", fired, n)
		}
	})
}
