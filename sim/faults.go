package sim

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Faults are the presenter's switches for the server itself. Each one
// reproduces a way a payment request can fail; see the README for what
// the learner should see with each.
type Faults struct {
	// DelayMS holds every request this long while its key is started, so
	// that a second click or a retry arrives during the work.
	DelayMS int `json:"delay_ms"`
	// ConnectionNeverHappens drops the request before anything is claimed.
	ConnectionNeverHappens bool `json:"connection_never_happens"`
	// FailHalfway makes the transaction that records the charge roll back.
	FailHalfway bool `json:"fail_halfway"`
	// ServerError answers 500 after the work started; the 500 is saved and
	// replayed.
	ServerError bool `json:"server_error"`
	// ResponseLost commits the work, then closes the connection unanswered.
	ResponseLost bool `json:"response_lost"`
	// CrashMidway stops right after the gateway call, leaving the key
	// started for the sweeper.
	CrashMidway bool `json:"crash_midway"`
}

// FaultPlan holds the current Faults and the random mode. Requests read
// it once (Draw), so a switch flipped mid-request never half-applies.
type FaultPlan struct {
	v atomic.Pointer[Faults]

	randomOn atomic.Bool // random.Enabled, read without the lock on every request
	mu       sync.Mutex  // guards random and rng
	random   RandomMode
	rng      *rand.Rand
}

// NewFaultPlan returns a plan with every switch off and random mode off.
func NewFaultPlan() *FaultPlan {
	p := &FaultPlan{}
	p.v.Store(&Faults{})
	p.SetRandom(RandomMode{})
	return p
}

// Load returns the current switches.
func (p *FaultPlan) Load() Faults { return *p.v.Load() }

// Store replaces the switches.
func (p *FaultPlan) Store(f Faults) { p.v.Store(&f) }

// RandomMode makes the switches that are on fire only some of the time:
// each one, independently, on each request, with the given probability.
// The draws come from a generator seeded with Seed, so the same seed and
// the same order of requests give the same faults, and a class can replay
// a run.
type RandomMode struct {
	Enabled     bool    `json:"enabled"`
	Seed        int64   `json:"seed"`
	Probability float64 `json:"probability"`
}

// randomStream is the second PCG word; any constant works, it only has
// to be the same every time.
const randomStream = 0x9e3779b97f4a7c15

// switchCount is how many values one request draws: one per switch, in a
// fixed order, whether the switch is on or not, so that what the n-th
// request gets depends on the seed alone, not on which switches are on.
const switchCount = 10

// Random returns the random-mode settings.
func (p *FaultPlan) Random() RandomMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.random
}

// SetRandom replaces the random-mode settings and restarts the sequence
// of draws from the seed.
func (p *FaultPlan) SetRandom(r RandomMode) {
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
func (p *FaultPlan) Draw(gw GatewaySwitches) (Faults, GatewaySwitches) {
	f := p.Load()
	if !p.randomOn.Load() {
		return f, gw
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.random.Enabled {
		return f, gw
	}
	var fire [switchCount]bool
	for i := range fire {
		fire[i] = p.rng.Float64() < p.random.Probability
	}
	if !fire[0] {
		f.DelayMS = 0
	}
	f.ConnectionNeverHappens = f.ConnectionNeverHappens && fire[1]
	f.FailHalfway = f.FailHalfway && fire[2]
	f.ServerError = f.ServerError && fire[3]
	f.ResponseLost = f.ResponseLost && fire[4]
	f.CrashMidway = f.CrashMidway && fire[5]
	if !fire[6] {
		gw.LatencyMS = 0
	}
	gw.Decline = gw.Decline && fire[7]
	gw.Error = gw.Error && fire[8]
	gw.Timeout = gw.Timeout && fire[9]
	return f, gw
}
