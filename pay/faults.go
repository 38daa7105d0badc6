package pay

import "time"

// Faults are every fault switch a room has, in the one shape the room
// keeps, the API speaks (the body of /api/faults), the pages show and the
// simulated world applies: the server's own faults, the gateway's, and the
// random mode that thins them.
//
// To add an on/off switch: a field here, its row in FaultSwitches (which
// the pages, the timeline's words and random mode read), and what it does
// where it acts (the protocol in service.go, or the gateway in sim).
type Faults struct {
	Server  ServerFaults  `json:"server"`
	Gateway GatewayFaults `json:"gateway"`
	Random  RandomFaults  `json:"random"`
}

// ServerFaults are the failures the server injects into a payment.
type ServerFaults struct {
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

// Delay is how long a request holds its key started before the work.
func (f ServerFaults) Delay() time.Duration { return time.Duration(f.DelayMS) * time.Millisecond }

// GatewayFaults are the fake provider's own failure modes.
type GatewayFaults struct {
	LatencyMS int  `json:"latency_ms"` // how long every charge takes
	Decline   bool `json:"decline"`    // refuse the card: a definite "no", saved and replayed as 402
	Error     bool `json:"error"`      // answer with a failure before charging: saved and replayed as 502
	Timeout   bool `json:"timeout"`    // charge, then never answer: the caller cannot know what happened
}

// RandomFaults makes the switches that are on fire only some of the time:
// each one, independently, on each request, with the given probability.
// The draws come from a generator seeded with Seed, so the same seed and
// the same order of requests give the same faults, and a class can replay
// a run.
type RandomFaults struct {
	Enabled     bool    `json:"enabled"`
	Seed        int64   `json:"seed"`
	Probability float64 `json:"probability"`
}

// Bounds on the numeric switches.
const (
	MaxDelayMS   = 10_000
	MaxLatencyMS = 10_000
)

// Validate checks the numeric switches, naming the first field that is
// out of range.
func (f Faults) Validate() error {
	switch {
	case f.Server.DelayMS < 0 || f.Server.DelayMS > MaxDelayMS:
		return Errorf(EINVALID, "server.delay_ms must be between 0 and %d milliseconds, not %d.", MaxDelayMS, f.Server.DelayMS)
	case f.Gateway.LatencyMS < 0 || f.Gateway.LatencyMS > MaxLatencyMS:
		return Errorf(EINVALID, "gateway.latency_ms must be between 0 and %d milliseconds, not %d.", MaxLatencyMS, f.Gateway.LatencyMS)
	case !(f.Random.Probability >= 0 && f.Random.Probability <= 1): // also refuses NaN
		return Errorf(EINVALID, "random.probability must be between 0 and 1, not %g.", f.Random.Probability)
	}
	return nil
}

// FaultSwitch is one on/off switch of Faults, as the pages show it, the
// timeline names it and random mode draws for it.
type FaultSwitch struct {
	// Field is its name in the API: "server.fail_halfway".
	Field string
	// ID is its checkbox's id on the pages.
	ID string
	// Label is its name on the switch, Short its name among the switches
	// that are on, Help what it does.
	Label, Short, Help string
	// Gateway says it is one of the gateway's switches, shown after the
	// gateway's latency.
	Gateway bool
	// On points at the switch in f.
	On func(f *Faults) *bool
}

// FaultSwitches are the on/off switches, in the order the pages show them;
// random mode draws one value for the delay, one for each server switch in
// this order, one for the gateway's latency, then one for each gateway
// switch.
var FaultSwitches = []FaultSwitch{
	{Field: "server.connection_never_happens", ID: "f-never", Label: "Connection never happens", Short: "connection never happens",
		Help: "The request is dropped before the server does anything: the browser sees a network error, and a retry is safe.",
		On:   func(f *Faults) *bool { return &f.Server.ConnectionNeverHappens }},
	{Field: "server.fail_halfway", ID: "f-halfway", Label: "Fails halfway", Short: "fails halfway",
		Help: "The transaction that records the charge rolls back after the gateway was paid: the key stays started until the sweeper asks the gateway.",
		On:   func(f *Faults) *bool { return &f.Server.FailHalfway }},
	{Field: "server.server_error", ID: "f-500", Label: "Server error (500)", Short: "server error",
		Help: "The server fails after the work started. The 500 is saved on the key, so a retry gets the same 500.",
		On:   func(f *Faults) *bool { return &f.Server.ServerError }},
	{Field: "server.response_lost", ID: "f-lost", Label: "Response lost", Short: "response lost",
		Help: "The charge commits, then the connection closes with no answer. The browser cannot tell this from a dropped connection; only the key makes the retry safe.",
		On:   func(f *Faults) *bool { return &f.Server.ResponseLost }},
	{Field: "server.crash_midway", ID: "f-crash", Label: "Crash midway", Short: "crash midway",
		Help: "The server stops right after calling the gateway: the key stays started and retries get 409 until the sweeper closes it.",
		On:   func(f *Faults) *bool { return &f.Server.CrashMidway }},
	{Field: "gateway.decline", ID: "f-decline", Label: "Gateway declines", Short: "gateway declines", Gateway: true,
		Help: "The card is refused: a definite answer, saved as 402 and replayed.",
		On:   func(f *Faults) *bool { return &f.Gateway.Decline }},
	{Field: "gateway.error", ID: "f-gwerror", Label: "Gateway error", Short: "gateway error", Gateway: true,
		Help: "The provider fails before charging: saved as 502 and replayed.",
		On:   func(f *Faults) *bool { return &f.Gateway.Error }},
	{Field: "gateway.timeout", ID: "f-timeout", Label: "Gateway times out", Short: "gateway times out", Gateway: true,
		Help: "The provider charges but never answers: the outcome is unknown, the key stays started for the sweeper.",
		On:   func(f *Faults) *bool { return &f.Gateway.Timeout }},
}

// IsOn reports whether switch s is on in f.
func (f Faults) IsOn(s FaultSwitch) bool { return *s.On(&f) }
