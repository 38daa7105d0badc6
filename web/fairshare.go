package web

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
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
	StreamsPerAddress:     200,
	StreamsPerSession:     12,
	StreamOpens:           Rate{Burst: 600, Every: 50 * time.Millisecond},
	Requests:              Rate{Burst: 1200, Every: 10 * time.Millisecond},
	Deliveries:            Rate{Burst: 600, Every: 20 * time.Millisecond},
	Simulations:           Rate{Burst: 120, Every: 500 * time.Millisecond},
	Checks:                Rate{Burst: 60, Every: time.Second},
	WorkshopRuns:          Rate{Burst: 6, Every: 20 * time.Second},
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
	IdleAfter:             10 * time.Minute,
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
	{name: "streams-per-address", what: "live views one address may hold", count: func(l *Limits) *int { return &l.StreamsPerAddress }},
	{name: "streams-per-session", what: "live views one browser session may hold", count: func(l *Limits) *int { return &l.StreamsPerSession }},
	{name: "stream-opens", what: "live views one address may open (burst/one back every)", rate: func(l *Limits) *Rate { return &l.StreamOpens }},
	{name: "requests", what: "requests other than payments per address", rate: func(l *Limits) *Rate { return &l.Requests }},
	{name: "deliveries", what: "delivery reports per address", rate: func(l *Limits) *Rate { return &l.Deliveries }},
	{name: "simulations", what: "backoff and herd runs per address", rate: func(l *Limits) *Rate { return &l.Simulations }},
	{name: "simulation-work", what: "milliseconds of one core all the students' herd sweeps and backoff schedules may use (burst/one more back every)", rate: func(l *Limits) *Rate { return &l.SimulationWork }},
	{name: "address-simulation-work", what: "milliseconds of one core one address's sweeps may use (burst/one more back every)", rate: func(l *Limits) *Rate { return &l.AddressSimulationWork }},
	{name: "checks", what: "forwards to a student's server and checker runs per address", rate: func(l *Limits) *Rate { return &l.Checks }},
	{name: "workshop-runs", what: "workshop checker runs one address may ask for", rate: func(l *Limits) *Rate { return &l.WorkshopRuns }},
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
	{name: "idle-after", what: "how long an idle address is remembered", dur: func(l *Limits) *time.Duration { return &l.IdleAfter }},
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

// bucketTable is a token bucket per key (a client address), in memory.
// It is bounded: an entry whose bucket is full again is forgotten at the
// next sweep, one idle for Limits.IdleAfter is forgotten whatever it
// holds, and when the table is full a new key takes the place of the key
// idle longest. A new address is never refused because others filled the
// table.
type bucketTable struct {
	now   func() time.Time
	rate  Rate
	max   int
	idle  time.Duration
	mu    sync.Mutex
	items map[string]*tokenBucket
	swept time.Time
}

type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
	used   time.Time // when the key last asked
}

func newBucketTable(now func() time.Time, rate Rate, max int, idle time.Duration) *bucketTable {
	return &bucketTable{now: now, rate: rate, max: max, idle: idle, items: map[string]*tokenBucket{}}
}

// take uses one token of key's when it has one and returns 0; otherwise
// it returns how long until it has one, and uses nothing.
func (t *bucketTable) take(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketLocked(key, now)
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(t.rate.Every))
	}
	b.tokens--
	return 0
}

// bucketLocked is key's bucket brought up to now, made when it is new.
func (t *bucketTable) bucketLocked(key string, now time.Time) *tokenBucket {
	if now.Sub(t.swept) > t.idle/4 {
		t.sweepLocked(now)
	}
	b, ok := t.items[key]
	if !ok {
		if len(t.items) >= t.max {
			t.evictLocked()
		}
		b = &tokenBucket{tokens: float64(t.rate.Burst), at: now}
		t.items[key] = b
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(t.rate.Burst), b.tokens+float64(d)/float64(t.rate.Every))
		b.at = now
	}
	b.used = now
	return b
}

// reserve takes one of key's tokens, now or when it comes back: it
// returns how long the caller must wait for it. A wait longer than most
// takes nothing and says how long it would have been, ok false.
func (t *bucketTable) reserve(key string, most time.Duration) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketLocked(key, t.now())
	b.tokens--
	if b.tokens >= 0 {
		return 0, true
	}
	wait = time.Duration(-b.tokens * float64(t.rate.Every))
	if wait > most {
		b.tokens++
		return wait, false
	}
	return wait, true
}

// due is how long until key has a token's worth again (0 when it has):
// a bucket that counts work done rather than requests may go below zero,
// and nothing starts until it has paid that back.
func (t *bucketTable) due(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketLocked(key, t.now())
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(t.rate.Every))
}

// charge takes n tokens of key's, after the work they count was done:
// the bucket may go below zero, down to one burst.
func (t *bucketTable) charge(key string, n float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketLocked(key, t.now())
	b.tokens = max(b.tokens-n, -float64(t.rate.Burst))
}

// giveBack returns a token reserve took and did not use.
func (t *bucketTable) giveBack(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.items[key]; ok {
		b.tokens = min(float64(t.rate.Burst), b.tokens+1)
	}
}

// sweepLocked forgets the keys idle too long and those whose bucket has
// filled up again: a new bucket would be the same.
func (t *bucketTable) sweepLocked(now time.Time) {
	t.swept = now
	for k, b := range t.items {
		refilled := b.tokens+float64(now.Sub(b.at))/float64(t.rate.Every) >= float64(t.rate.Burst)
		if idle := now.Sub(b.used); idle > t.idle || refilled {
			delete(t.items, k)
		}
	}
}

// evictLocked makes room for one key: the one that asked longest ago
// goes.
func (t *bucketTable) evictLocked() {
	var oldest string
	var at time.Time
	first := true
	for k, b := range t.items {
		if first || b.used.Before(at) {
			oldest, at, first = k, b.used, false
		}
	}
	delete(t.items, oldest)
}

// forgetIdle forgets the keys idle too long, and those whose bucket is
// full again, now rather than at the next use.
func (t *bucketTable) forgetIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(t.now())
}

// size is how many keys the table holds.
func (t *bucketTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.items)
}

// requestLimits are the per-address buckets of everything that is not a
// payment, and how a request is matched to its bucket. A request that
// carries a caller's credential (a browser session or a bearer token) is
// counted by its caller too, at CallerShare of its address's rate: behind
// one shared address no caller can use up the share of the others.
type requestLimits struct {
	requests, deliveries, simulations, checks requestShare
	// callers are the callers let in before: the others share one
	// caller's bucket per address (caller_book.go).
	callers *callerBook
	// presenter, when set, counts the presenter's payments at work, which
	// a student's request lets go first.
	presenter *presenterAtWork
	// clientIP names the address a request is counted by; priority says
	// whether it comes from the presenter (never counted).
	clientIP func(*http.Request) string
	priority func(*http.Request) bool
	// knownGateway says whether a secret is a student's workshop gateway:
	// only those are left to the servers under test charging through
	// them; a guessed one is counted like any request.
	knownGateway func(secret string) bool
}

// requestShare is one kind of request's buckets: per address, per
// caller within an address, and the one of the callers an address has
// not let in before (keyed by the address).
type requestShare struct {
	address, caller, newcomers *bucketTable
}

// callerRate is CallerShare percent of r: a smaller burst, and a longer
// wait for each token that comes back.
func callerRate(r Rate, percent int) Rate {
	return Rate{Burst: max(1, r.Burst*percent/100), Every: r.Every * 100 / time.Duration(percent)}
}

func newRequestLimits(l Limits, now func() time.Time, clientIP func(*http.Request) string, priority func(*http.Request) bool) *requestLimits {
	share := func(r Rate) requestShare {
		return requestShare{address: newBucketTable(now, r, l.Addresses, l.IdleAfter),
			caller:    newBucketTable(now, callerRate(r, l.CallerShare), l.Addresses, l.IdleAfter),
			newcomers: newBucketTable(now, callerRate(r, l.CallerShare), l.Addresses, l.IdleAfter)}
	}
	return &requestLimits{requests: share(l.Requests), deliveries: share(l.Deliveries),
		simulations: share(l.Simulations), checks: share(l.Checks), clientIP: clientIP, priority: priority,
		callers: newCallerBook(now, l.Callers, l.IdleAfter)}
}

// bucketFor is the share r is counted in, and what it asks for in the
// words of a refusal; nil for what is never counted here: payments (they
// take turns, payment_admission.go), the live stream (streamAdmission),
// static files (a page's own parts, cached) and the simulated gateway,
// whose callers are the servers under test charging through it.
func (l *requestLimits) bucketFor(r *http.Request) (*requestShare, string) {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && (p == paymentsPath || strings.HasPrefix(p, intentsPath)):
		return nil, ""
	case p == "/events" || strings.HasPrefix(p, "/static/") || strings.HasPrefix(p, simGatewayPrefix+"/") || p == "/favicon.ico":
		return nil, ""
	case strings.HasPrefix(p, workshopGateways):
		secret, _, _ := strings.Cut(p[len(workshopGateways):], "/")
		if l.knownGateway != nil && l.knownGateway(secret) {
			return nil, ""
		}
	case p == "/api/delivery":
		return &l.deliveries, "delivery reports"
	case strings.HasPrefix(p, "/backoff") || strings.HasPrefix(p, "/herd") || p == "/api/backoff" || p == "/api/herd":
		return &l.simulations, "simulation runs"
	case strings.HasPrefix(p, "/byo/") || p == "/lab/check":
		return &l.checks, "checks"
	}
	return &l.requests, "requests"
}

// callerOf names r's caller by its credential, "" when it has none (an
// anonymous caller is its address).
func callerOf(r *http.Request) string {
	if tok, _, ok := bearerToken(r.Header.Get("Authorization")); ok {
		return "token:" + scopeID(tok)
	}
	if hasSession(r) {
		return "session:" + scopeID(sessionOf(r))
	}
	return ""
}

// middleware answers 429, with Retry-After and a sentence, to a caller or
// an address that has used up its share of what r asks for. The presenter
// is never counted.
func (l *requestLimits) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		share, what := l.bucketFor(r)
		if share == nil {
			return next(c)
		}
		// The presenter is never held back, and takes nothing from its
		// address's share: behind a classroom's shared address that share
		// is the students'.
		if l.priority(r) {
			return next(c)
		}
		ip := l.clientIP(r)
		caller := callerOf(r)
		key := ip + "\x00" + caller
		switch {
		case caller == "":
		case l.callers.known(key):
			if wait := share.caller.take(key); wait > 0 {
				return refuseRequest(c, wait, fmt.Sprintf("Your browser session or token has sent more %s than its share behind its address (%d at once, then one every %v; -limits caller-share)", what, share.caller.rate.Burst, share.caller.rate.Every))
			}
		default:
			// A caller's first request: counted with every other new
			// caller of its address, as one caller, and by itself.
			if wait := share.newcomers.take(ip); wait > 0 {
				return refuseRequest(c, wait, fmt.Sprintf("The browser sessions and tokens new to your address (%s) have sent more %s together than one caller's share (%d at once, then one every %v; -limits caller-share); a session or token is counted on its own once it has been let in", ip, what, share.newcomers.rate.Burst, share.newcomers.rate.Every))
			}
			if wait := share.caller.take(key); wait > 0 {
				return refuseRequest(c, wait, fmt.Sprintf("Your browser session or token has sent more %s than its share behind its address (%d at once, then one every %v; -limits caller-share)", what, share.caller.rate.Burst, share.caller.rate.Every))
			}
		}
		if wait := share.address.take(ip); wait > 0 {
			return refuseRequest(c, wait, fmt.Sprintf("Your address (%s) has sent more %s than its share (%d at once, then one every %v)", ip, what, share.address.rate.Burst, share.address.rate.Every))
		}
		if caller != "" {
			l.callers.letIn(key)
		}
		if l.presenter != nil {
			// The presenter's payments at work go first (student_work.go).
			l.presenter.waitAtMost(r.Context(), studentRequestWait)
		}
		return next(c)
	}
}

// refuseRequest is the 429 of a request past its share: why, then when
// the next is answered.
func refuseRequest(c echo.Context, wait time.Duration, why string) error {
	secs := waitSeconds(wait)
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return pay.Errorf(pay.EBUSY, "%s: the next is answered in %d %s. Everyone else's are answered as usual.", why, secs, plural(secs, "second", "seconds"))
}

// waitSeconds is a wait in whole seconds, rounded up, at least 1.
func waitSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// clientTables are the per-address and per-caller tables of the fair
// shares, each bounded by itself; tables lists them for forgetIdle and
// for a count of what they hold.
func (s *Server) clientTables() map[string]interface {
	forgetIdle()
	size() int
} {
	t := map[string]interface {
		forgetIdle()
		size() int
	}{
		"stream opens": s.streams.opens, "payments per address": s.payments.byAddress, "payments per caller": s.payments.byCaller,
		"simulation work per address": s.work.byAddress, "simulation work": s.work.all, "callers": s.limits.callers,
	}
	for name, share := range map[string]*requestShare{"requests": &s.limits.requests, "deliveries": &s.limits.deliveries,
		"simulations": &s.limits.simulations, "checks": &s.limits.checks} {
		t[name+" per address"], t[name+" per caller"], t[name+" of new callers"] = share.address, share.caller, share.newcomers
	}
	return t
}

// forgetIdleClients forgets, in every table of the fair shares, the
// addresses and callers idle for Limits.IdleAfter (and the buckets full
// again): a table shrinks back when a class has gone quiet, not only at
// its next use. RunJobs calls it periodically.
func (s *Server) forgetIdleClients() {
	for _, t := range s.clientTables() {
		t.forgetIdle()
	}
}
