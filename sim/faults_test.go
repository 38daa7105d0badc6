package sim

import (
	"paytwice/pay"
	"reflect"
	"testing"
)

func TestFaultPlanDraw(t *testing.T) {
	all := pay.ServerFaults{DelayMS: 500, ConnectionNeverHappens: true, FailHalfway: true, ServerError: true, ResponseLost: true, CrashMidway: true}
	allGW := pay.GatewayFaults{LatencyMS: 300, Decline: true, Error: true, Timeout: true}

	draws := func(p *FaultPlan, n int) [][2]any {
		var out [][2]any
		for range n {
			f, g := p.Draw(allGW)
			out = append(out, [2]any{f, g})
		}
		return out
	}

	t.Run("with random mode off, a request gets every switch as set", func(t *testing.T) {
		p := NewFaultPlan()
		p.Store(all)
		f, g := p.Draw(allGW)
		if f != all || g != allGW {
			t.Fatalf("got %+v %+v", f, g)
		}
	})
	t.Run("the same seed gives the same sequence, and setting it again restarts it", func(t *testing.T) {
		a, b := NewFaultPlan(), NewFaultPlan()
		for _, p := range []*FaultPlan{a, b} {
			p.Store(all)
			p.SetRandom(pay.RandomFaults{Enabled: true, Seed: 42, Probability: 0.5})
		}
		first := draws(a, 50)
		if !reflect.DeepEqual(first, draws(b, 50)) {
			t.Fatal("two plans with one seed disagree")
		}
		a.SetRandom(pay.RandomFaults{Enabled: true, Seed: 42, Probability: 0.5})
		if !reflect.DeepEqual(first, draws(a, 50)) {
			t.Fatal("setting the seed again did not restart the sequence")
		}
		a.SetRandom(pay.RandomFaults{Enabled: true, Seed: 43, Probability: 0.5})
		if reflect.DeepEqual(first, draws(a, 50)) {
			t.Fatal("another seed gave the same 50 draws")
		}
	})
	t.Run("which switches are on does not shift the sequence", func(t *testing.T) {
		a, b := NewFaultPlan(), NewFaultPlan()
		a.Store(all)
		b.Store(pay.ServerFaults{ServerError: true})
		a.SetRandom(pay.RandomFaults{Enabled: true, Seed: 7, Probability: 0.5})
		b.SetRandom(pay.RandomFaults{Enabled: true, Seed: 7, Probability: 0.5})
		for i := range 50 {
			fa, _ := a.Draw(allGW)
			fb, _ := b.Draw(pay.GatewayFaults{})
			if fa.ServerError != fb.ServerError {
				t.Fatalf("draw %d: server_error %v with every switch on, %v alone", i, fa.ServerError, fb.ServerError)
			}
		}
	})
	t.Run("a switch that is off never fires, and each on switch fires about as often as asked", func(t *testing.T) {
		p := NewFaultPlan()
		p.Store(pay.ServerFaults{ServerError: true})
		p.SetRandom(pay.RandomFaults{Enabled: true, Seed: 1, Probability: 0.3})
		fired := 0
		const n = 2000
		for range n {
			f, g := p.Draw(pay.GatewayFaults{})
			if f.FailHalfway || f.CrashMidway || g.Decline || f.DelayMS != 0 {
				t.Fatalf("an off switch fired: %+v %+v", f, g)
			}
			if f.ServerError {
				fired++
			}
		}
		if fired < n*25/100 || fired > n*35/100 {
			t.Fatalf("fired %d of %d at probability 0.3", fired, n)
		}
	})
}
