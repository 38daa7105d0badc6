package sim

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"paytwice/pay"
)

// FaultPlan holds the server's fault switches and the random mode. Requests read
// it once (Draw), so a switch flipped mid-request never half-applies.
type FaultPlan struct {
	v atomic.Pointer[pay.ServerFaults]

	randomOn atomic.Bool // random.Enabled, read without the lock on every request
	mu       sync.Mutex  // guards random and rng
	random   pay.RandomFaults
	rng      *rand.Rand
}

// NewFaultPlan returns a plan with every switch off and random mode off.
func NewFaultPlan() *FaultPlan {
	p := &FaultPlan{}
	p.v.Store(&pay.ServerFaults{})
	p.SetRandom(pay.RandomFaults{})
	return p
}

// Load returns the current switches.
func (p *FaultPlan) Load() pay.ServerFaults { return *p.v.Load() }

// Store replaces the switches.
func (p *FaultPlan) Store(f pay.ServerFaults) { p.v.Store(&f) }

// randomStream is the second PCG word; any constant works, it only has
// to be the same every time.
const randomStream = 0x9e3779b97f4a7c15

// Random returns the random-mode settings.
func (p *FaultPlan) Random() pay.RandomFaults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.random
}

// SetRandom replaces the random-mode settings and restarts the sequence
// of draws from the seed.
func (p *FaultPlan) SetRandom(r pay.RandomFaults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.random = r
	p.rng = rand.New(rand.NewPCG(uint64(r.Seed), randomStream))
	p.randomOn.Store(r.Enabled)
}

// Draw returns the faults one request runs with: the plan's switches and
// the gateway switches gw, with each switch that is on kept only if its
// draw falls under the probability when random mode is enabled. A request
// calls it once and uses the result throughout.
func (p *FaultPlan) Draw(gw pay.GatewayFaults) (pay.ServerFaults, pay.GatewayFaults) {
	f := p.Load()
	if !p.randomOn.Load() {
		return f, gw
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.random.Enabled {
		return f, gw
	}
	all := pay.Faults{Server: f, Gateway: gw}
	fires := func() bool { return p.rng.Float64() < p.random.Probability }
	// One draw per switch, whether it is on or not, so that what the n-th
	// request gets depends on the seed alone: the delay, the server's
	// switches, the gateway's latency, the gateway's switches.
	for _, gateway := range []bool{false, true} {
		if fire := fires(); !fire && gateway {
			all.Gateway.LatencyMS = 0
		} else if !fire {
			all.Server.DelayMS = 0
		}
		for _, s := range pay.FaultSwitches {
			if s.Gateway == gateway {
				on := s.On(&all)
				*on = fires() && *on
			}
		}
	}
	return all.Server, all.Gateway
}
