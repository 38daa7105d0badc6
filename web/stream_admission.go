package web

import (
	"net/http"
	"sync"
	"time"

	"paytwice/pay/addrlimit"
)

// streamAdmission decides who may open a live event stream, so that no
// address and no browser session takes more than its share of the
// server's streams, and the presenter always finds a slot: students are
// counted against MaxStreams - PresenterStreams, the presenter (by token
// or cookie) against MaxStreams and nothing else. Counts live only while
// streams are open, so the tables are bounded by the streams themselves;
// how often an address opens them has a token bucket of its own.
type streamAdmission struct {
	limits Limits
	opens  *bucketTable
	mu     sync.Mutex
	// held counts the open streams of the students (not the presenter's),
	// per address and per session.
	held      int
	byAddress map[string]int
	bySession map[string]int
	// peak is the most entries the two maps have held together since
	// they were made (shrunk, tokenbucket.go).
	peak int
}

func newStreamAdmission(l Limits, now func() time.Time) *streamAdmission {
	return &streamAdmission{limits: l, opens: newBucketTable(now, l.StreamOpens, l.Addresses, l.IdleAfter),
		byAddress: map[string]int{}, bySession: map[string]int{}}
}

// streamRefusal says why a stream was turned away, in a sentence for the
// viewer, and after how long to try again.
type streamRefusal struct {
	why  string
	wait time.Duration
	// full says the server as a whole is full (503) rather than this
	// address or session (429).
	full bool
}

// admit counts a new stream of ip's (session "" when it has none) and
// returns the function that uncounts it, or says why it may not open.
// The presenter's streams are not counted here: the board caps them at
// MaxStreams.
func (a *streamAdmission) admit(ip, session string, presenter bool) (func(), *streamRefusal) {
	if presenter {
		return func() {}, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.limits
	switch {
	case a.held >= l.MaxStreams-l.PresenterStreams:
		return nil, &streamRefusal{full: true, wait: addrlimit.StreamRetryAfter * time.Second,
			why: "This server already has every live view it keeps for the class open (-limits streams, less presenter-streams). The page works without its live panels; it reconnects by itself."}
	case a.byAddress[ip] >= l.StreamsPerAddress:
		return nil, &streamRefusal{wait: addrlimit.StreamRetryAfter * time.Second,
			why: "Your address already holds its share of the live views (-limits streams-per-address). Close a tab; the page works without its live panels and reconnects by itself."}
	case session != "" && a.bySession[session] >= l.StreamsPerSession:
		return nil, &streamRefusal{wait: addrlimit.StreamRetryAfter * time.Second,
			why: "This browser already has its share of live views open (-limits streams-per-session). Close a tab; the page works without its live panels and reconnects by itself."}
	}
	if wait := a.opens.take(ip); wait > 0 {
		return nil, &streamRefusal{wait: wait,
			why: "Your address has opened the live view more often than pages reconnect (-limits stream-opens). The page works without its live panels; it reconnects by itself."}
	}
	a.held++
	a.byAddress[ip]++
	if session != "" {
		a.bySession[session]++
	}
	a.peak = max(a.peak, len(a.byAddress)+len(a.bySession))
	var once sync.Once
	return func() { once.Do(func() { a.leave(ip, session) }) }, nil
}

func (a *streamAdmission) leave(ip, session string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held--
	if a.byAddress[ip]--; a.byAddress[ip] <= 0 {
		delete(a.byAddress, ip)
	}
	if session != "" {
		if a.bySession[session]--; a.bySession[session] <= 0 {
			delete(a.bySession, session)
		}
	}
	if a.held == 0 && a.peak >= 64 {
		// Every student's stream is closed: let the room the maps grew
		// to go (a Go map keeps it after its keys are deleted).
		a.byAddress, a.bySession, a.peak = map[string]int{}, map[string]int{}, 0
	}
}

// sessionOf is r's browser session, "" when it has none.
func sessionOf(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !validSessionID(c.Value) {
		return ""
	}
	return c.Value
}

// hasPriority says whether r comes from the presenter, who is never
// behind students in any queue or table. Without a presenter token every
// caller may flip the switches, so nobody has priority: everybody gets
// the same shares.
func (a *admission) hasPriority(r *http.Request) bool {
	return a.locked && a.presenter.isPresenter(r)
}
