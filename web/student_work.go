package web

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
//
// The time is counted once a run is over, so the budgets alone would let
// every run asked for at the same moment start: an address's whole burst
// of simulation runs at once, all past its part. So an address has one
// run at work at a time; another asked for meanwhile waits a moment for
// it, then is answered 429 like a run past the budget, and the time is always counted before the
// address's next run is let in.
type studentWork struct {
	all, byAddress *bucketTable // keyed "" and by address: milliseconds of one core
	presenter      presenterAtWork

	mu     sync.Mutex
	atWork map[string]chan struct{} // by address with a run at work: closed when it ends
	// pauses counts the times students' sweeps stepped aside on their
	// own schedule (sweepYield), while othersInFlight says requests other
	// than the sweep's own are in flight (nil: always).
	pauses         atomic.Int64
	othersInFlight func() bool
}

func newStudentWork(l Limits, now func() time.Time) *studentWork {
	return &studentWork{all: newBucketTable(now, l.SimulationWork, 1, l.IdleAfter),
		byAddress: newBucketTable(now, l.AddressSimulationWork, l.Addresses, l.IdleAfter),
		atWork:    make(map[string]chan struct{})}
}

// A run asked for while its address has one at work waits up to
// atWorkWait for it to end (a page asking for its next run as soon as the
// last one is answered gets it), then is turned away and told to ask
// again in atWorkRetry: runs a student may start take a fraction of a
// second to a few.
const (
	atWorkWait  = 250 * time.Millisecond
	atWorkRetry = time.Second
)

// admit says whether ip's students may start a sweep now: their address
// and the class have time left, and their address has no other run at
// work. Then the run is at work until leave is called, once its time has
// been counted with spent. Otherwise it is a 429 and how long to wait.
func (w *studentWork) admit(ctx context.Context, ip string) (leave func(), wait time.Duration, err error) {
	if wait, err := w.dueFor(ip); err != nil {
		return nil, wait, err
	}
	bound := time.NewTimer(atWorkWait)
	defer bound.Stop()
	for {
		w.mu.Lock()
		done, busy := w.atWork[ip]
		if !busy {
			done = make(chan struct{})
			w.atWork[ip] = done
			w.mu.Unlock()
			break
		}
		w.mu.Unlock()
		select {
		case <-done: // its run is over: try again
			continue
		case <-ctx.Done():
		case <-bound.C:
		}
		return nil, atWorkRetry, pay.Errorf(pay.EBUSY, "Your address (%s) already has a simulation running; each address runs one at a time, so that runs asked for together cannot all start past its part of the server's processor. Ask again in %d %s; identical runs are answered from a cache.",
			ip, waitSeconds(atWorkRetry), plural(waitSeconds(atWorkRetry), "second", "seconds"))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			close(w.atWork[ip])
			delete(w.atWork, ip)
		})
	}, 0, nil
}

// dueFor says how long until the class and ip have time for a run again,
// with the refusal to send meanwhile.
func (w *studentWork) dueFor(ip string) (time.Duration, error) {
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

// A student's sweep also steps aside on a schedule of its own: once it has
// worked sweepSlice since it last did, it sleeps for sweepPause before its
// next trial. Go's scheduler lets a goroutine that never blocks keep the
// processor for up to 10 ms, and looks at the network about as seldom
// while one does, so on a server with one core every step of a payment
// (its request read, each write committed, its answer sent) could wait
// that long behind a sweep: a payment has several, and under a class
// looping on the herd its median latency was several times the quiet
// one's. Sleeping, the sweep leaves the processor to what is runnable and
// lets the scheduler read the network first. But the scheduler reads the
// network only once nothing is runnable (or every 10 ms): under a
// mischievous class there is always a student's request or live view to
// run, and a pause of 50 µs ended before the processor ran dry, so a
// payment's request that had arrived still waited for the 10 ms look
// (an execution trace of the noisy rounds of
// BenchmarkPresenterPaysDuringMischief: the presenter's request waited
// 18 ms on average from its arrival to its first run, behind the sweep).
// A pause as long as the slice lets the rest run out and the network be
// read: while others are in flight a student's sweep gets at most half
// the processor. Alone on the server it never pauses.
const (
	sweepSlice = time.Millisecond
	sweepPause = time.Millisecond
)

// sweepYield is what a student's sweep does between its trials: wait for
// the presenter's payments at work, and step aside once it has worked
// sweepSlice while other requests are in flight (alone on the server, the
// sweep goes on at full speed: a pause would cost it a millisecond for
// nothing). It says how long it waited, which is not counted as the
// sweep's work. The sweep's workers share it.
func (w *studentWork) sweepYield() func(context.Context) time.Duration {
	var mu sync.Mutex
	last := time.Now()
	return func(ctx context.Context) time.Duration {
		waited := w.presenter.wait(ctx)
		mu.Lock()
		due := waited == 0 && time.Since(last) >= sweepSlice && (w.othersInFlight == nil || w.othersInFlight())
		mu.Unlock()
		if due {
			start := time.Now()
			t := time.NewTimer(sweepPause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			waited += time.Since(start)
			w.pauses.Add(1)
		}
		if waited > 0 {
			mu.Lock()
			last = time.Now()
			mu.Unlock()
		}
		return waited
	}
}

// How long students' live views and requests wait at most for the
// presenter's payments at work: a payment is at work for milliseconds (it
// gives its turn back while it waits on anything else), so this bound is
// only met if one is stuck, and then the students go on.
const (
	studentStreamWait = 250 * time.Millisecond
	// studentStreamGap is the least time between two writes of a
	// student's live view (board.Config.WriteGap). It is the fan-out's
	// interval with 200 pages open (web/board/wake.go; 130 ms with more),
	// not more, so the fan writer keeps it with its wakes: a phone in a
	// lecture hall is to see a payment within 150 ms at p99
	// (docs/benchmarks.md), and a longer gap (250 ms was tried) gave the
	// presenter's payments under a mischievous class no gain that could
	// be measured.
	studentStreamGap   = 100 * time.Millisecond
	studentRequestWait = 100 * time.Millisecond
)

// countWork counts a student's backoff schedule like a sweep: it starts
// within the time kept for simulations, alone at work for its address,
// in its turn among the students' schedules on the server (one works at a
// time, simRuns), once none of the presenter's payments is at work, and
// the time it takes is counted. (A herd sweep is counted by runHerd, which
// also steps aside between its trials.) The presenter's schedules wait for
// nobody.
func (h simHandlers) countWork(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if h.priority(r) {
			return next(c)
		}
		if h.work != nil {
			ip := h.clientIP(r)
			leave, wait, err := h.work.admit(r.Context(), ip)
			if err != nil {
				c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(wait)))
				return err
			}
			defer leave() // after the time is counted
		}
		leaveTurn, err := h.runs.backoff.enter(r.Context(), false)
		if err != nil {
			c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(backoffRetryAfter)))
			return err
		}
		defer leaveTurn()
		if h.work == nil {
			return next(c)
		}
		ip := h.clientIP(r)
		h.work.presenter.wait(r.Context())
		start := time.Now()
		defer func() { h.work.spent(ip, time.Since(start)) }()
		return next(c)
	}
}
