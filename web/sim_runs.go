package web

import (
	"context"
	"sync/atomic"
	"time"

	"paytwice/pay"
)

// simRuns are one server's simulations at work: the herd's sweeps with
// their cache of results, and the backoff schedules. Each kind runs one at
// a time on the server (a sweepQueue), since each is work for the
// processor that the payments need too. They are the server's own: two
// servers in one process (a test's, or a class's cluster) do not wait for
// each other's runs.
type simRuns struct {
	herd    *herdRunner
	backoff *sweepQueue
}

func newSimRuns() *simRuns {
	return &simRuns{herd: newHerdRunner(16), backoff: newBackoffQueue()}
}

// sweepQueue lets one run of a simulation work at a time, the presenter's
// before any student's (priorityGate). At most queue students' runs wait
// for their turn, each for wait at most (0: for as long as its request
// lasts); a run beyond the queue is refused at once with full, one whose
// wait is over with late. The presenter's runs never count in the queue.
type sweepQueue struct {
	gate    priorityGate
	waiting atomic.Int32 // students' runs at work or waiting for their turn
	queue   int32
	// wait is a time.Duration, settable while the server runs (tests
	// lengthen it, so that a wait they look at cannot end first).
	wait atomic.Int64
	full error
	late error
}

// enter waits for the run's turn; leave gives it to the next run.
func (q *sweepQueue) enter(ctx context.Context, presenter bool) (leave func(), err error) {
	if presenter {
		if err := q.gate.acquire(ctx, true); err != nil {
			return nil, err
		}
		return q.gate.release, nil
	}
	if q.waiting.Add(1) > 1+q.queue {
		q.waiting.Add(-1)
		return nil, q.full
	}
	turn := ctx
	if wait := time.Duration(q.wait.Load()); wait > 0 {
		var cancel context.CancelFunc
		turn, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	if err := q.gate.acquire(turn, false); err != nil {
		q.waiting.Add(-1)
		if ctx.Err() == nil && q.late != nil { // the wait's bound ended it, not the request
			return nil, q.late
		}
		return nil, err
	}
	return func() {
		q.gate.release()
		q.waiting.Add(-1)
	}, nil
}

// A student's backoff schedule takes milliseconds of one core (a few
// tens for the largest crowd), so a class typing into the form at once
// waits its turn briefly: backoffQueue may wait, each backoffWait at
// most, and a refused one is asked to come back in backoffRetryAfter.
const (
	backoffQueue      = 16
	backoffWait       = 2 * time.Second
	backoffRetryAfter = time.Second
)

func newBackoffQueue() *sweepQueue {
	q := &sweepQueue{queue: backoffQueue,
		full: pay.Errorf(pay.EBUSY, "The server is already working out a backoff schedule with %d more waiting; it works out one at a time, so that the class's payments keep a core. Try again in %d second.",
			backoffQueue, waitSeconds(backoffRetryAfter)),
		late: pay.Errorf(pay.EBUSY, "The server was busy with other backoff schedules for %v; it works out one at a time, so that the class's payments keep a core. Try again in %d second.",
			backoffWait, waitSeconds(backoffRetryAfter))}
	q.wait.Store(int64(backoffWait))
	return q
}
