package web

import (
	"net/http"
	"sync/atomic"
	"time"

	"paytwice/pay/addrlimit"
)

// admission decides whether a request gets in, and how far: who the
// presenter is, each address's requests in flight, the live streams'
// shares, the request rates, the payments' turns at the server's work and
// the students' simulation work. Its middleware runs before routing
// (inFlightBound, refuseEarly) and inside echo (anonymousByAddress, the
// rates' middleware); the handler groups ask it for a request's address
// and priority.
type admission struct {
	// locked says a presenter token is set: without one every caller may
	// flip the switches, so nobody has priority and the presenter's
	// reserves are not kept.
	locked bool
	// presenter recognises the presenter and names a request's address
	// (presenter.go).
	presenter *presenterGate
	// streams shares the live event streams out among addresses and
	// sessions; limits the rest of what is not a payment (requestlimits.go).
	streams *streamAdmission
	limits  *requestLimits
	// inFlight counts each address's requests in flight, and trials
	// keeps the connections past an address's share whose first request
	// proves to be the presenter's, nil without a token
	// (address_bounds.go).
	inFlight *addrlimit.Counts
	trials   *addrlimit.Trials
	// connectionsBound is Limits.ConnectionsPerAddress, for a refusal of
	// a connection on trial.
	connectionsBound int
	// requests counts every request in flight, live views aside: the
	// students' sweeps step aside while there are others (student_work.go).
	requests atomic.Int64
	// payments shares the work on payments out among addresses and
	// callers (payment_admission.go).
	payments *paymentAdmission
	// work keeps the students' simulations to their part of the
	// processor (student_work.go).
	work *studentWork
	// refuse answers 429 for a request refused before it is routed, as
	// echo's error handler would (Server.refuseBeforeRouting).
	refuse func(w http.ResponseWriter, r *http.Request, wait time.Duration, why string)
}

// newAdmission builds the shares of cfg.Limits, counted by
// cfg.LimitsClock (the wall clock when nil); guesses are the wrong
// presenter tokens every server of the class counts.
func newAdmission(cfg Config, guesses guessBook, logf func(format string, args ...any),
	refuse func(w http.ResponseWriter, r *http.Request, wait time.Duration, why string)) *admission {
	now := cfg.LimitsClock
	if now == nil {
		now = time.Now
	}
	a := &admission{locked: cfg.PresenterToken != "", refuse: refuse}
	a.presenter = newPresenterGate(cfg, guesses, logf)
	a.inFlight = addrlimit.New(cfg.Limits.InFlightPerAddress, cfg.Limits.PresenterReserve)
	if a.locked {
		a.trials = addrlimit.NewTrials(addrlimit.TrialsAtOnce)
	}
	a.connectionsBound = cfg.Limits.ConnectionsPerAddress
	a.streams = newStreamAdmission(cfg.Limits, now)
	a.limits = newRequestLimits(cfg.Limits, now, a.presenter.clientIP, a.hasPriority)
	if a.locked {
		a.limits.presenterLink = a.presenter.mayBePresenterLink
	}
	a.payments = newPaymentAdmission(cfg.Limits, now, a.locked)
	a.payments.callers = a.limits.callers
	a.work = newStudentWork(cfg.Limits, now)
	a.limits.presenter = &a.work.presenter
	a.work.othersInFlight = func() bool { return a.requests.Load() > 1 }
	return a
}
