package web

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"paytwice/pay/addrlimit"
)

// A classroom is an untrusted network: every phone and laptop on it can
// send what it likes, as often as it likes. Limits are the room's fair
// shares, all in one place: how many live views one address may hold,
// how often it may open them, how often it may ask for anything that is
// not a payment, and how much of the timeline it may fill. The defaults
// are set so that a class of sixty doing what the chapters say never
// meets them, even from one address (a school's NAT); one address that
// loops still cannot take the room from the others, nor the presenter's
// board from the presenter. Payments are never rate-limited (the protocol
// under load is what the class is there to see) but take turns at the
// server's work (payment_admission.go), so that one address's flood
// cannot slow everyone else's.
type Limits struct {
	// MaxStreams caps the open live event streams (GET /events) of the
	// whole server.
	MaxStreams int
	// PresenterStreams of them are kept for the presenter (recognised by
	// the token or its cookie): students are turned away at MaxStreams -
	// PresenterStreams, the presenter only at MaxStreams.
	PresenterStreams int
	// StreamsPerAddress is how many streams one client address may hold
	// at once: a whole class behind one NAT, a phone and a tab or two
	// each.
	StreamsPerAddress int
	// StreamsPerSession is how many one browser session may hold (its
	// tabs).
	StreamsPerSession int
	// StreamOpens is how often one address may open a stream: enough for
	// every page of a class to reconnect at once, several times over.
	StreamOpens Rate
	// Requests is how often one address may ask for anything that is not
	// a payment, a live stream or a static file.
	Requests Rate
	// Deliveries is how often one address may report on its answers
	// (POST /api/delivery).
	Deliveries Rate
	// Simulations is how often one address may run the backoff schedule
	// or the thundering herd (pages and JSON).
	Simulations Rate
	// SimulationWork is how much of the server's processor all the
	// students' simulation sweeps may use together, and
	// AddressSimulationWork one address's: a token is a millisecond of one
	// core, so 4000/4ms is 4 s of work at once, then a quarter of a core.
	// A sweep is counted for the time it took; the presenter's are not
	// counted (student_work.go).
	SimulationWork, AddressSimulationWork Rate
	// Checks is how often one address may forward a request to a
	// student's own server (/byo) or run the checker.
	Checks Rate
	// WorkshopRuns is how often one address may ask the workshop to run
	// the checker against a student's endpoint (web/workshop).
	WorkshopRuns Rate
	// WorkshopGateway is how often one student's workshop gateway (by its
	// secret) may be called, by their endpoint and anyone else who knows
	// the secret: a checker run sends a few hundred at most, in bursts of
	// a storm, so a run never meets it; a loop charging as fast as it can
	// is refused 429 before it reaches the books.
	WorkshopGateway Rate
	// PaymentsPerAddress is how many of one address's payments the server
	// works on at once, and PaymentsAtWork how many of all the students';
	// the others wait their turn, the addresses and, within one, the
	// callers taking turns. A payment waiting on the delay fault, the
	// gateway's latency or step mode gives its turn back meanwhile. The
	// presenter's payments never wait. Only with a presenter token.
	PaymentsPerAddress, PaymentsAtWork int
	// PaymentsQueued is how many of one address's payments may wait at
	// once, and PaymentWait how long each may wait; past either it is
	// answered 429, nothing charged, its key left unused.
	PaymentsQueued int
	PaymentWait    time.Duration
	// Payments is how often one address may start a payment, and
	// CallerPayments one caller (a browser session or a bearer token):
	// a payment beyond it waits for its token, up to PaymentWait. Sixty
	// students behind one address, double-clicking, bursting ten at once
	// and retrying six times, stay within both; a loop paying as fast as
	// it can is slowed to them. Only with a presenter token.
	Payments, CallerPayments Rate
	// CallerShare is the part, in percent, of its address's rates that
	// one caller (a browser session or a bearer token) may use of what is
	// not a payment: behind one shared address, no student uses up the
	// others' share.
	CallerShare int
	// Callers is how many callers (browser sessions and bearer tokens)
	// the server remembers as let in before: those it does not know yet
	// are counted together, per address, as one more caller
	// (caller_book.go), so that a student who makes a new token for every
	// request is one caller, not thousands.
	Callers int
	// TimelinePerSource is how many of the timeline's events one source
	// (a client address) may hold, apart for its payments and for the
	// rest (deliveries, look-ups); the room's own events have a share of
	// their own. TimelineTotal bounds them all.
	TimelinePerSource, TimelineTotal int
	// Addresses is how many addresses each per-address table holds; when
	// it is full, the address idle longest is forgotten to make room.
	Addresses int
	// IdleAfter is how long an address's entry outlives its last use.
	IdleAfter time.Duration
	// ConnectionsPerAddress is how many connections one address may hold
	// open (a browser opens up to six to a server; sixty students' laptops
	// and phones behind one address stay well within it), and
	// InFlightPerAddress how many of its requests, live views aside, may
	// be in flight at once; past either, the next is refused at once
	// (address_bounds.go). PresenterReserve is how many more the presenter
	// may have of each: requests that carry the presenter's token, and
	// connections past the address's share whose first request is the
	// presenter's (requests with the presenter's cookie are never
	// counted).
	ConnectionsPerAddress, InFlightPerAddress, PresenterReserve int
}

// Rate is a token bucket: Burst requests at once, then one every Every.
type Rate struct {
	Burst int
	Every time.Duration
}

func (r Rate) String() string { return strconv.Itoa(r.Burst) + "/" + r.Every.String() }

// DefaultLimits are the limits unless configured otherwise.
var DefaultLimits = Limits{
	MaxStreams:            DefaultMaxStreams,
	PresenterStreams:      20,
	StreamsPerAddress:     addrlimit.DefaultStreams,
	StreamsPerSession:     12,
	StreamOpens:           Rate{Burst: 600, Every: 50 * time.Millisecond},
	Requests:              Rate{Burst: 1200, Every: 10 * time.Millisecond},
	Deliveries:            Rate{Burst: 600, Every: 20 * time.Millisecond},
	Simulations:           Rate{Burst: 120, Every: 500 * time.Millisecond},
	Checks:                Rate{Burst: 60, Every: time.Second},
	WorkshopRuns:          Rate{Burst: 6, Every: 20 * time.Second},
	WorkshopGateway:       Rate{Burst: 600, Every: 20 * time.Millisecond},
	SimulationWork:        Rate{Burst: 4000, Every: 4 * time.Millisecond},
	AddressSimulationWork: Rate{Burst: 2000, Every: 5 * time.Millisecond},
	PaymentsPerAddress:    4,
	PaymentsAtWork:        16,
	PaymentsQueued:        1024,
	PaymentWait:           10 * time.Second,
	Payments:              Rate{Burst: 600, Every: 20 * time.Millisecond},
	CallerPayments:        Rate{Burst: 120, Every: 100 * time.Millisecond},
	CallerShare:           50,
	Callers:               16384,
	TimelinePerSource:     4096,
	TimelineTotal:         32768,
	Addresses:             4096,
	IdleAfter:             addrlimit.DefaultIdleAfter,
	ConnectionsPerAddress: addrlimit.DefaultConnections,
	InFlightPerAddress:    addrlimit.DefaultInFlight,
	PresenterReserve:      addrlimit.DefaultReserve,
}

// withDefaults fills the limits left at zero.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fillRate := func(r *Rate, def Rate) {
		if r.Burst <= 0 {
			r.Burst = def.Burst
		}
		if r.Every <= 0 {
			r.Every = def.Every
		}
	}
	fill(&l.MaxStreams, d.MaxStreams)
	fill(&l.PresenterStreams, d.PresenterStreams)
	fill(&l.StreamsPerAddress, d.StreamsPerAddress)
	fill(&l.StreamsPerSession, d.StreamsPerSession)
	fillRate(&l.StreamOpens, d.StreamOpens)
	fillRate(&l.Requests, d.Requests)
	fillRate(&l.Deliveries, d.Deliveries)
	fillRate(&l.Simulations, d.Simulations)
	fillRate(&l.Checks, d.Checks)
	fillRate(&l.SimulationWork, d.SimulationWork)
	fillRate(&l.AddressSimulationWork, d.AddressSimulationWork)
	fillRate(&l.WorkshopRuns, d.WorkshopRuns)
	fillRate(&l.WorkshopGateway, d.WorkshopGateway)
	fill(&l.PaymentsPerAddress, d.PaymentsPerAddress)
	fill(&l.PaymentsAtWork, d.PaymentsAtWork)
	fill(&l.PaymentsQueued, d.PaymentsQueued)
	if l.PaymentWait <= 0 {
		l.PaymentWait = d.PaymentWait
	}
	fillRate(&l.Payments, d.Payments)
	fillRate(&l.CallerPayments, d.CallerPayments)
	fill(&l.CallerShare, d.CallerShare)
	l.CallerShare = min(l.CallerShare, 100)
	fill(&l.Callers, d.Callers)
	fill(&l.TimelinePerSource, d.TimelinePerSource)
	fill(&l.TimelineTotal, d.TimelineTotal)
	fill(&l.Addresses, d.Addresses)
	if l.IdleAfter <= 0 {
		l.IdleAfter = d.IdleAfter
	}
	fill(&l.ConnectionsPerAddress, d.ConnectionsPerAddress)
	fill(&l.InFlightPerAddress, d.InFlightPerAddress)
	fill(&l.PresenterReserve, d.PresenterReserve)
	// One address's turns are a part of the students', never more.
	l.PaymentsAtWork = max(l.PaymentsAtWork, l.PaymentsPerAddress)
	// The presenter's slots are a part of the whole, never all of it.
	l.PresenterStreams = max(1, min(l.PresenterStreams, l.MaxStreams/2))
	if l.MaxStreams == 1 {
		l.PresenterStreams = 0
	}
	return l
}

// limitSetting is one limit as -limits names it.
type limitSetting struct {
	name, what string
	count      func(*Limits) *int
	rate       func(*Limits) *Rate
	dur        func(*Limits) *time.Duration
}

var limitSettings = []limitSetting{
	{name: "streams", what: "live views open on this server", count: func(l *Limits) *int { return &l.MaxStreams }},
	{name: "presenter-streams", what: "of them kept for the presenter", count: func(l *Limits) *int { return &l.PresenterStreams }},
	{name: addrlimit.StreamsName, what: "live views one address may hold", count: func(l *Limits) *int { return &l.StreamsPerAddress }},
	{name: "streams-per-session", what: "live views one browser session may hold", count: func(l *Limits) *int { return &l.StreamsPerSession }},
	{name: "stream-opens", what: "live views one address may open (burst/one back every)", rate: func(l *Limits) *Rate { return &l.StreamOpens }},
	{name: "requests", what: "requests other than payments per address", rate: func(l *Limits) *Rate { return &l.Requests }},
	{name: "deliveries", what: "delivery reports per address", rate: func(l *Limits) *Rate { return &l.Deliveries }},
	{name: "simulations", what: "backoff and herd runs per address", rate: func(l *Limits) *Rate { return &l.Simulations }},
	{name: "simulation-work", what: "milliseconds of one core all the students' herd sweeps and backoff schedules may use (burst/one more back every)", rate: func(l *Limits) *Rate { return &l.SimulationWork }},
	{name: "address-simulation-work", what: "milliseconds of one core one address's sweeps may use (burst/one more back every)", rate: func(l *Limits) *Rate { return &l.AddressSimulationWork }},
	{name: "checks", what: "forwards to a student's server and checker runs per address", rate: func(l *Limits) *Rate { return &l.Checks }},
	{name: "workshop-runs", what: "workshop checker runs one address may ask for", rate: func(l *Limits) *Rate { return &l.WorkshopRuns }},
	{name: "workshop-gateway", what: "requests one student's workshop gateway answers (burst/one back every)", rate: func(l *Limits) *Rate { return &l.WorkshopGateway }},
	{name: "caller-share", what: "percent of an address's rates one browser session or bearer token may use (requests, deliveries, simulations, checks)", count: func(l *Limits) *int { return &l.CallerShare }},
	{name: "callers", what: "browser sessions and tokens remembered as let in before", count: func(l *Limits) *int { return &l.Callers }},
	{name: "payments-per-address", what: "payments of one address the server works on at once (with a presenter token)", count: func(l *Limits) *int { return &l.PaymentsPerAddress }},
	{name: "payments-at-work", what: "payments of all the students the server works on at once", count: func(l *Limits) *int { return &l.PaymentsAtWork }},
	{name: "payments-queued", what: "payments of one address that may wait for their turn", count: func(l *Limits) *int { return &l.PaymentsQueued }},
	{name: "payments", what: "payments one address may start (with a presenter token)", rate: func(l *Limits) *Rate { return &l.Payments }},
	{name: "caller-payments", what: "payments one browser session or bearer token may start", rate: func(l *Limits) *Rate { return &l.CallerPayments }},
	{name: "payment-wait", what: "how long a payment may wait for its turn", dur: func(l *Limits) *time.Duration { return &l.PaymentWait }},
	{name: "timeline-per-source", what: "timeline events one address may hold", count: func(l *Limits) *int { return &l.TimelinePerSource }},
	{name: "timeline-total", what: "timeline events kept in all", count: func(l *Limits) *int { return &l.TimelineTotal }},
	{name: "addresses", what: "addresses each per-address table holds", count: func(l *Limits) *int { return &l.Addresses }},
	{name: addrlimit.ConnectionsName, what: "connections one address may hold open", count: func(l *Limits) *int { return &l.ConnectionsPerAddress }},
	{name: addrlimit.InFlightName, what: "requests of one address in flight at once, live views aside", count: func(l *Limits) *int { return &l.InFlightPerAddress }},
	{name: addrlimit.ReserveName, what: "connections and requests in flight the presenter may have beyond an address's", count: func(l *Limits) *int { return &l.PresenterReserve }},
	{name: addrlimit.IdleAfterName, what: "how long an idle address is remembered", dur: func(l *Limits) *time.Duration { return &l.IdleAfter }},
}

// ParseLimits reads -limits: comma-separated name=value pairs over the
// defaults, such as "streams-per-address=300,simulations=60/1s". A count
// is a whole number, a rate a burst and a period ("600/50ms"), a duration
// Go's ("10m").
func ParseLimits(s string) (Limits, error) {
	l := DefaultLimits
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return l, fmt.Errorf("limit %q: write name=value (names: %s)", part, limitNames())
		}
		i := slices.IndexFunc(limitSettings, func(ls limitSetting) bool { return ls.name == strings.TrimSpace(name) })
		if i < 0 {
			return l, fmt.Errorf("no limit is named %q (names: %s)", name, limitNames())
		}
		if err := limitSettings[i].set(&l, strings.TrimSpace(value)); err != nil {
			return l, err
		}
	}
	return l, nil
}

func (ls limitSetting) set(l *Limits, v string) error {
	switch {
	case ls.count != nil:
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("limit %s must be a positive whole number, not %q", ls.name, v)
		}
		*ls.count(l) = n
	case ls.rate != nil:
		b, e, ok := strings.Cut(v, "/")
		n, err1 := strconv.Atoi(b)
		d, err2 := time.ParseDuration(e)
		if !ok || err1 != nil || err2 != nil || n <= 0 || d <= 0 {
			return fmt.Errorf("limit %s must be a burst and a period, such as 600/50ms, not %q", ls.name, v)
		}
		*ls.rate(l) = Rate{Burst: n, Every: d}
	default:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("limit %s must be a duration such as 10m, not %q", ls.name, v)
		}
		*ls.dur(l) = d
	}
	return nil
}

func limitNames() string {
	names := make([]string, len(limitSettings))
	for i, ls := range limitSettings {
		names[i] = ls.name
	}
	return strings.Join(names, ", ")
}

// LimitsUsage lists every limit, its default and what it bounds, for -h.
func LimitsUsage() string {
	var b strings.Builder
	l := DefaultLimits
	for _, ls := range limitSettings {
		var v string
		switch {
		case ls.count != nil:
			v = strconv.Itoa(*ls.count(&l))
		case ls.rate != nil:
			v = ls.rate(&l).String()
		default:
			v = ls.dur(&l).String()
		}
		fmt.Fprintf(&b, "\n      %s=%s: %s", ls.name, v, ls.what)
	}
	return b.String()
}
