package sim

import (
	"math/rand/v2"
	"sync"

	"paytwice/pay"
)

// FaultPlan is the random mode's sequence. The switches themselves are
// the room's (web/room): a request reads them once, with the number of
// writes that set them, and draws from them here (Draw), so a switch
// flipped mid-request never half-applies.
type FaultPlan struct {
	mu     sync.Mutex // guards the rest
	seeded bool
	gen    uint64 // the write of the switches the sequence started at
	rng    *rand.Rand
}

// NewFaultPlan returns a plan that has drawn nothing yet.
func NewFaultPlan() *FaultPlan { return &FaultPlan{} }

// randomStream is the second PCG word; any constant works, it only has
// to be the same every time.
const randomStream = 0x9e3779b97f4a7c15

// Draw returns the faults one request runs with: the switches f, with
// each switch that is on kept only if its draw falls under the
// probability when random mode is enabled. gen counts the writes of the
// switches: a write newer than the sequence's restarts it from the seed,
// even one that sets the same seed again. A request calls it once and
// uses the result throughout.
func (p *FaultPlan) Draw(f pay.Faults, gen uint64) (pay.ServerFaults, pay.GatewayFaults) {
	if !f.Random.Enabled {
		return f.Server, f.Gateway
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seeded || gen > p.gen {
		p.seeded, p.gen = true, gen
		p.rng = rand.New(rand.NewPCG(uint64(f.Random.Seed), randomStream))
	}
	all := pay.Faults{Server: f.Server, Gateway: f.Gateway}
	fires := func() bool { return p.rng.Float64() < f.Random.Probability }
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
