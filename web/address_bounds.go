package web

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"paytwice/pay/addrlimit"
	"paytwice/pay/peers"
)

// A token bucket bounds how often an address asks, not how much it holds
// at once: each address also has a bound on the connections it holds open
// (at accept, before net/http spends anything on them) and on its requests
// in flight (before routing), in pay/addrlimit. Both go back down as
// connections close and requests end.

// Listener bounds ln's connections per client address
// (Limits.ConnectionsPerAddress). With a presenter token, a connection
// past its address's share is taken on trial rather than refused: kept,
// in Limits.PresenterReserve places more, when its first request is the
// presenter's, and refused and closed otherwise (trialBound). So the
// presenter gets in from an address whose students hold all of its
// share (the whole class behind one NAT), and those students never hold
// the presenter's places. Behind paytwice cluster's front door the door's
// own connections (loopback) are not counted: the door bounds the
// students' connections where it sees their addresses, and this server
// bounds their requests in flight by the address the door forwards
// (inFlightBound).
func (s *Server) Listener(ln net.Listener) *addrlimit.Listener {
	l := s.cfg.Limits
	var exempt func(string) bool
	if s.cfg.BehindFrontDoor {
		exempt = isLoopbackHost
	}
	bounded := addrlimit.Bound(ln, addrlimit.New(l.ConnectionsPerAddress, l.PresenterReserve), exempt)
	if s.admission.trials != nil {
		bounded.WithTrials(s.admission.trials)
	}
	return bounded
}

// trialBound decides, by its first request, a connection Listener took on
// trial (past its address's share of connections): the presenter's cookie
// or right token keeps it, anything else is answered 503, as a refusal
// at accept is, and the connection closes. The token is compared as
// inFlightBound compares it, and a wrong one counted on this server: the
// answer tells a right token from a wrong one.
func (a *admission) trialBound(next http.Handler) http.Handler {
	trials := a.trials
	if trials == nil {
		return next
	}
	bound := a.connectionsBound
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presenter := func() bool {
			if c, err := r.Cookie(PresenterCookie); err == nil && a.presenter.cookieOK(c.Value) {
				return true
			}
			right, looked := a.presenter.headerTokenRight(r)
			if looked && !right {
				a.presenter.headerTokenWrong(r)
			}
			return right
		}
		if !trials.Decide(r.RemoteAddr, presenter) {
			addrlimit.Refuse(w, bound)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// inFlightBound refuses a request, before it is routed, when its address
// has Limits.InFlightPerAddress requests in flight already: 429 with
// Retry-After and a sentence. Live views are not counted here (they have
// their own share, StreamsPerAddress). A request carrying the presenter's
// cookie is never counted; one carrying the presenter's right token in the
// header may use PresenterReserve places more, and a wrong one none. The
// token is compared in constant time, without the shared count of wrong
// tokens, and only while the address has tries left on this server; a
// wrong one refused where the right one would have had a place is counted
// on this server, so these comparisons too stop at the limit.
func (a *admission) inFlightBound(next http.Handler) http.Handler {
	counts := a.inFlight
	withToken := a.locked
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			next.ServeHTTP(w, r)
			return
		}
		if withToken {
			if c, err := r.Cookie(PresenterCookie); err == nil && a.presenter.cookieOK(c.Value) {
				a.tellFrontDoorPresenter(w, r)
				a.requests.Add(1)
				defer a.requests.Add(-1)
				next.ServeHTTP(w, r)
				return
			}
		}
		addr := a.presenter.clientIP(r)
		right, looked := false, false
		if withToken {
			right, looked = a.presenter.headerTokenRight(r)
		}
		if right {
			a.tellFrontDoorPresenter(w, r)
		}
		if !counts.Take(addr, right) {
			if looked && counts.Take(addr, true) {
				// A right token would have had a place: this refusal
				// answers the comparison, which is counted as a guess.
				counts.Release(addr)
				a.presenter.headerTokenWrong(r)
			}
			// The connection closes after the refusal: its body (which may
			// never come) is not waited for, and the address holds one
			// connection fewer.
			w.Header().Set("Connection", "close")
			a.refuse(w, r, time.Second, fmt.Sprintf(
				"Your address (%s) has %d requests in flight already, its share (-limits in-flight-per-address)", addr, counts.Bound()))
			return
		}
		defer counts.Release(addr)
		a.requests.Add(1)
		defer a.requests.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// tellFrontDoorPresenter says, on the answer to a request the front door
// forwarded (its mark on it), that the presenter sent it: the door then
// keeps the presenter's reserve of connections for the client's address
// and of requests in flight for the request's header token, which it
// cannot tell by itself (it compares none: only the servers do, under
// the limit on wrong ones). The door takes the header off before the
// answer leaves it.
func (a *admission) tellFrontDoorPresenter(w http.ResponseWriter, r *http.Request) {
	if g := a.presenter; g.behindFrontDoor && fromFrontDoor(r, g.frontDoorMark) {
		w.Header().Set(peers.PresenterSeenHeader, "1")
	}
}
