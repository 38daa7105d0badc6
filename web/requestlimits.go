package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

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
	// presenterLink, when set, says whether r is the presenter's link
	// (GET /board?token=) from an address with tries left.
	presenterLink func(*http.Request) bool
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

// callerPast says that a caller used up its share of what.
func (sh *requestShare) callerPast(what string) string {
	return fmt.Sprintf("Your browser session or token has sent more %s than its share behind its address (%d at once, then one every %v; -limits caller-share)", what, sh.caller.rate.Burst, sh.caller.rate.Every)
}

// newcomersPast says that the callers new to ip used up their share of
// what together.
func (sh *requestShare) newcomersPast(ip, what string) string {
	return fmt.Sprintf("The browser sessions and tokens new to your address (%s) have sent more %s together than one caller's share (%d at once, then one every %v; -limits caller-share); a session or token is counted on its own once it has been let in", ip, what, sh.newcomers.rate.Burst, sh.newcomers.rate.Every)
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
		// is the students'. Nor is the presenter's link while its address
		// has tries left: its handler counts a wrong token.
		if l.priority(r) || (l.presenterLink != nil && l.presenterLink(r)) {
			return next(c)
		}
		ip := l.clientIP(r)
		caller := callerOf(r)
		key := ip + "\x00" + caller
		switch {
		case caller == "":
		case l.callers.known(key):
			if wait := share.caller.take(key); wait > 0 {
				return refuseRequest(c, wait, share.callerPast(what))
			}
		default:
			// A caller's first request: counted with every other new
			// caller of its address, as one caller, and by itself.
			if wait := share.newcomers.take(ip); wait > 0 {
				return refuseRequest(c, wait, share.newcomersPast(ip, what))
			}
			if wait := share.caller.take(key); wait > 0 {
				return refuseRequest(c, wait, share.callerPast(what))
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

// refuseEarly answers 429 to a request whose address, or whose caller,
// has used up its share of what the request asks for, before it is routed, logged or
// given a context: a student who ignores 429s and loops then costs the
// server a look-up in a table per request, and the cores stay with the
// payments. It only reads the buckets; the middleware still counts every
// request that gets past (by caller, then address).
//
// The presenter's cookie (a MAC, checked in constant time) goes the whole
// way. A token in the header does only while its address has tries left
// by this server's count of wrong tokens: it is then looked at, and a
// wrong one counted, where the presenter is recognised, so no more pass
// this way than the limit on wrong tokens lets through. Once the address
// is out of tries a header is nothing: the request is counted like any,
// and its token is not looked at, so the refusal says nothing of it.
func (a *admission) refuseEarly(next http.Handler) http.Handler {
	l := a.limits
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		share, what := l.bucketFor(r)
		if share == nil || (a.locked && a.presenter.mayBePresenter(r)) {
			next.ServeHTTP(w, r)
			return
		}
		ip := l.clientIP(r)
		wait := share.address.due(ip)
		if wait <= 0 {
			// The address has some share left; its caller (a browser
			// session or a token) may not: behind a class's shared address
			// one student's loop is refused here too, by its own share,
			// or, while it is new, by its address's new callers' share.
			if caller := callerOf(r); caller != "" {
				key := ip + "\x00" + caller
				if l.callers.known(key) {
					if wait = share.caller.due(key); wait > 0 {
						a.refuse(w, r, wait, share.callerPast(what))
						return
					}
				} else if wait = share.newcomers.due(ip); wait > 0 {
					a.refuse(w, r, wait, share.newcomersPast(ip, what))
					return
				}
			}
			next.ServeHTTP(w, r)
			return
		}
		a.refuse(w, r, wait, fmt.Sprintf("Your address (%s) has sent more %s than its share (%d at once, then one every %v)",
			ip, what, share.address.rate.Burst, share.address.rate.Every))
	})
}

// refuseBeforeRouting answers 429 with Retry-After and why, as the
// middleware would (problem+json, or a page to a browser), for a request
// that is refused before it is routed.
func (s *Server) refuseBeforeRouting(w http.ResponseWriter, r *http.Request, wait time.Duration, why string) {
	c := s.echo.AcquireContext()
	defer s.echo.ReleaseContext(c)
	c.Reset(r, w)
	h := w.Header()
	h["Content-Security-Policy"], h["X-Content-Type-Options"], h["Referrer-Policy"] = cspValue, nosniffValue, referrerValue
	s.handleError(refuseRequest(c, wait, why), c)
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
func (a *admission) clientTables() map[string]interface {
	forgetIdle()
	size() int
} {
	t := map[string]interface {
		forgetIdle()
		size() int
	}{
		"stream opens": a.streams.opens, "payments per address": a.payments.byAddress, "payments per caller": a.payments.byCaller,
		"simulation work per address": a.work.byAddress, "simulation work": a.work.all, "callers": a.limits.callers,
	}
	for name, share := range map[string]*requestShare{"requests": &a.limits.requests, "deliveries": &a.limits.deliveries,
		"simulations": &a.limits.simulations, "checks": &a.limits.checks} {
		t[name+" per address"], t[name+" per caller"], t[name+" of new callers"] = share.address, share.caller, share.newcomers
	}
	return t
}

// forgetIdleClients forgets, in every table of the fair shares, the
// addresses and callers idle for Limits.IdleAfter (and the buckets full
// again): a table shrinks back when a class has gone quiet, not only at
// its next use. RunJobs calls it periodically.
func (a *admission) forgetIdleClients() {
	for _, t := range a.clientTables() {
		t.forgetIdle()
	}
}
