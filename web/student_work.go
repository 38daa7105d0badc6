package web

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// studentWork keeps the students' long work off the cores the payments
// need. Counting requests is not enough: one run of the thundering herd
// costs as much CPU as hundreds of payments, so a few students looping on
// it, each within its address's count of simulation runs, kept a core
// busy the whole lesson and the presenter's payments waited for it. So
// the time their sweeps take is counted too, in milliseconds of one core:
// all the students' sweeps together may use SimulationWork, one address's
// AddressSimulationWork; a sweep asked for past either is answered 429
// until the time has come back. And while one of the presenter's payments
// is at work, students' sweeps step aside between trials: the presenter is
// never behind students for a core. The presenter's own sweeps are never
// counted and never step aside.
type studentWork struct {
	all, byAddress *bucketTable // keyed "" and by address: milliseconds of one core
	presenter      presenterAtWork
}

func newStudentWork(l Limits, now func() time.Time) *studentWork {
	return &studentWork{all: newBucketTable(now, l.SimulationWork, 1, l.IdleAfter),
		byAddress: newBucketTable(now, l.AddressSimulationWork, l.Addresses, l.IdleAfter)}
}

// admit says whether ip's students may start a sweep now: their address
// and the class have time left. Otherwise it is a 429 and how long until
// the time comes back.
func (w *studentWork) admit(ip string) (time.Duration, error) {
	if wait := w.all.due(""); wait > 0 {
		secs := waitSeconds(wait)
		return wait, pay.Errorf(pay.EBUSY, "The class's simulations have used the part of the server's processor kept for them (%s, -limits simulation-work); the payments get the rest. The next run is answered in %d %s; identical runs are answered from a cache.",
			workRate(w.all.rate), secs, plural(secs, "second", "seconds"))
	}
	if wait := w.byAddress.due(ip); wait > 0 {
		secs := waitSeconds(wait)
		return wait, pay.Errorf(pay.EBUSY, "Your address (%s) has used its part of the server's processor for simulations (%s, -limits address-simulation-work). The next run is answered in %d %s; identical runs are answered from a cache.",
			ip, workRate(w.byAddress.rate), secs, plural(secs, "second", "seconds"))
	}
	return 0, nil
}

// spent counts d of one core's time against ip's students and the class.
func (w *studentWork) spent(ip string, d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	w.all.charge("", ms)
	w.byAddress.charge(ip, ms)
}

// workRate says a budget of milliseconds in words: "2.5s at once, then
// 25% of one core".
func workRate(r Rate) string {
	return fmt.Sprintf("%v at once, then %d%% of one core", time.Duration(r.Burst)*time.Millisecond, int(100*time.Millisecond/r.Every))
}

// presenterAtWork counts the presenter's payments at work, so that the
// students' sweeps can wait for none to be.
type presenterAtWork struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed once n is back to 0; nil while n is 0
}

// enter counts one of the presenter's payments until the returned
// function is called.
func (p *presenterAtWork) enter() func() {
	p.mu.Lock()
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.n--; p.n == 0 {
				close(p.idle)
				p.idle = nil
			}
		})
	}
}

// wait returns once none of the presenter's payments is at work, or ctx
// has ended, and says how long it waited.
func (p *presenterAtWork) wait(ctx context.Context) time.Duration {
	return p.waitAtMost(ctx, -1)
}

// waitAtMost is wait for at most d (d < 0: no bound).
func (p *presenterAtWork) waitAtMost(ctx context.Context, d time.Duration) time.Duration {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	if idle == nil || d == 0 {
		return 0
	}
	var bound <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		bound = t.C
	}
	start := time.Now()
	select {
	case <-idle:
	case <-ctx.Done():
	case <-bound:
	}
	return time.Since(start)
}

// How long students' live views and requests wait at most for the
// presenter's payments at work: a payment is at work for milliseconds (it
// gives its turn back while it waits on anything else), so this bound is
// only met if one is stuck, and then the students go on.
const (
	studentStreamWait  = 250 * time.Millisecond
	studentRequestWait = 100 * time.Millisecond
)

// countWork counts a student's backoff schedule like a sweep: it starts
// within the time kept for simulations, once none of the presenter's
// payments is at work, and the time it takes is counted. (A herd sweep is
// counted by runHerd, which also steps aside between its trials.)
func (h simHandlers) countWork(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if h.work == nil || h.priority(r) {
			return next(c)
		}
		ip := h.clientIP(r)
		if wait, err := h.work.admit(ip); err != nil {
			c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(wait)))
			return err
		}
		h.work.presenter.wait(r.Context())
		start := time.Now()
		defer func() { h.work.spent(ip, time.Since(start)) }()
		return next(c)
	}
}
