package proxy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault is what the proxy does to an action's request instead of
// forwarding it plainly.
type Fault string

// The faults, after the article's three ways a request fails and the
// answers a careful client must read.
const (
	// None forwards the request and its answer untouched.
	None Fault = "none"
	// Refuse closes the connection before forwarding: the request never
	// reaches the API (the connection never happens).
	Refuse Fault = "refuse"
	// Reset resets the connection (TCP RST) before forwarding.
	Reset Fault = "reset"
	// Halfway forwards the request, then answers 500 in the API's error
	// shape instead of the API's answer: the work may have happened.
	Halfway Fault = "halfway"
	// Lost forwards the request, lets the API answer, and closes the
	// connection without a byte of that answer: the dangerous case.
	Lost Fault = "lost"
	// Slow holds the request for SlowDelay before forwarding it.
	Slow Fault = "slow"
	// Conflict, TooMany and Unavailable answer 409, 429 and 503 with
	// Retry-After without forwarding.
	Conflict    Fault = "409"
	TooMany     Fault = "429"
	Unavailable Fault = "503"
	// Outage answers 503 without Retry-After to the first
	// OutageAttempts attempts of the action, then forwards: a run of
	// failures long enough that a client's waits can be seen to grow,
	// and a client that keeps trying within its budget gets through.
	Outage Fault = "outage"
	// Down answers 503 without Retry-After to every attempt of the
	// action: a client must give up within its budget.
	Down Fault = "down"
	// BadRequest and Unprocessable answer 400 and 422 to every attempt
	// of the action: no retry can fix them.
	BadRequest    Fault = "400"
	Unprocessable Fault = "422"
)

// SlowDelay is how long a Slow fault holds a request.
const SlowDelay = 300 * time.Millisecond

// OutageAttempts is how many attempts in a row an Outage fails: the
// client's waits before its first, second and third retry (and fourth)
// all follow a failure its own backoff must pace.
const OutageAttempts = 4

// RetryAfterSeconds is the Retry-After of the 409, 429 and 503 faults.
const RetryAfterSeconds = 1

// Faults lists every fault but None, in the order the usage shows them.
var Faults = []Fault{Refuse, Reset, Halfway, Lost, Slow, Conflict, TooMany, Unavailable, Outage, Down, BadRequest, Unprocessable}

// faultInfo says what a fault is for the page, the usage and the report.
var faultInfo = map[Fault]string{
	None:          "forwarded untouched",
	Refuse:        "connection closed before forwarding (never reached the API)",
	Reset:         "connection reset before forwarding (never reached the API)",
	Halfway:       "forwarded, then answered 500: the API may have done the work",
	Lost:          "forwarded, the API answered, the answer was dropped with the connection",
	Slow:          "held 300 ms, then forwarded",
	Conflict:      "answered 409 with Retry-After: 1, not forwarded",
	TooMany:       "answered 429 with Retry-After: 1, not forwarded",
	Unavailable:   "answered 503 with Retry-After: 1, not forwarded",
	Outage:        "answered 503 without Retry-After to the first 4 attempts, then forwarded",
	Down:          "answered 503 without Retry-After to every attempt",
	BadRequest:    "answered 400 to every attempt: no retry can fix it",
	Unprocessable: "answered 422 to every attempt: no retry can fix it",
}

// Describe says in a few words what the fault does.
func (f Fault) Describe() string { return faultInfo[f] }

// meets reports whether the fault meets the action's attempt with this
// number (from 1): most meet the first only, Outage the first
// OutageAttempts, and Down, BadRequest and Unprocessable every one.
func (f Fault) meets(attempt int) bool {
	switch f {
	case Down, BadRequest, Unprocessable:
		return true
	case Outage:
		return attempt <= OutageAttempts
	}
	return attempt == 1
}

// DefaultSchedule exercises every rule at least once in 20 actions. It
// gives the jitter rule seven waits before a first retry even from a
// client that retries no broken connection (two 500s, two downs, three
// outages), and, from a client that makes four retries or more, at least
// ten waits before its third retry or later (the downs and the outages),
// so that the growth of its waits is seen. The broken connections (two
// refused, two reset, two lost) give six more first waits from a client
// that retries them.
var DefaultSchedule = []Fault{
	None, Refuse, Halfway, Lost, Conflict, Down, Slow, Unprocessable, Outage, Reset,
	TooMany, Halfway, BadRequest, Lost, Outage, Unavailable, Down, Refuse, Outage, Reset,
}

// ParseFaults reads the -faults list: fault names separated by commas,
// applied to a client's actions in turn and then again from the start.
// "default" is DefaultSchedule.
func ParseFaults(s string) ([]Fault, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "default" {
		return DefaultSchedule, nil
	}
	var out []Fault
	for part := range strings.SplitSeq(s, ",") {
		f := Fault(strings.ToLower(strings.TrimSpace(part)))
		if _, ok := faultInfo[f]; !ok {
			return nil, fmt.Errorf("unknown fault %q: use none or %s, separated by commas", part, faultNames())
		}
		out = append(out, f)
	}
	return out, nil
}

func faultNames() string {
	names := make([]string, len(Faults))
	for i, f := range Faults {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// plan chooses each new action's fault: the schedule in turn, or, with a
// random probability, a fault drawn from the schedule (seeded, so that
// -seed repeats a run whose actions arrive in the same order).
type plan struct {
	schedule []Fault
	random   float64
	rnd      *rand.Rand
}

func newPlan(schedule []Fault, random float64, seed uint64) *plan {
	if len(schedule) == 0 {
		schedule = DefaultSchedule
	}
	return &plan{schedule: schedule, random: random, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// fault is the fault of a client's n-th action (from 0).
func (p *plan) fault(n int) Fault {
	if p.random > 0 {
		if p.rnd.Float64() >= p.random {
			return None
		}
		var faulty []Fault
		for _, f := range p.schedule {
			if f != None {
				faulty = append(faulty, f)
			}
		}
		if len(faulty) == 0 {
			return None
		}
		return faulty[p.rnd.IntN(len(faulty))]
	}
	return p.schedule[n%len(p.schedule)]
}
