package sim

import "sync/atomic"

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

// FaultPlan holds the current Faults. Requests read it once, atomically,
// so a switch flipped mid-request never half-applies.
type FaultPlan struct{ v atomic.Pointer[Faults] }

// NewFaultPlan returns a plan with every switch off.
func NewFaultPlan() *FaultPlan {
	p := &FaultPlan{}
	p.v.Store(&Faults{})
	return p
}

// Load returns the current switches.
func (p *FaultPlan) Load() Faults { return *p.v.Load() }

// Store replaces the switches.
func (p *FaultPlan) Store(f Faults) { p.v.Store(&f) }
