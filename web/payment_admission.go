package web

import (
	"context"
	"slices"
	"sync"
	"time"

	"paytwice/pay"
)

// paymentAdmission shares the server's work on payments fairly among the
// class, so that one student's flood of payments cannot slow everyone
// else's. The protocol is never changed by it: a payment either runs as
// it always does, or waits its turn before anything is read or claimed,
// or, after waiting too long, is refused with 429 having charged nothing
// and left its key unclaimed, so that a retry with the same key runs
// afresh.
//
// A payment is "at work" from its admission until its answer, except
// while it waits on something that costs the server nothing: the delay
// fault, the gateway's latency switch, step mode's holds. Then it gives
// its turn back, and takes it again without waiting when it goes on (so
// that no payment can be stuck behind the ones waiting on it). At most
// PaymentsPerAddress of one address's payments are at work at once, and
// PaymentsAtWork of all the students'; the others wait, each address in
// its turn and, within an address, each caller (a browser session or a
// bearer token) in its turn, so a whole class behind one NAT shares its
// address's turns among its students, and one of them cannot take them
// all. The presenter, and the lab's own checker, never wait.
//
// Without a presenter token there is no class to protect (whoever uses
// the server may flip every switch), and payments are never held back:
// the load tests and benchmarks measure the protocol itself.
type paymentAdmission struct {
	// byAddress and byCaller pace the payments started: one beyond its
	// address's or its caller's rate waits for its token.
	byAddress, byCaller        *bucketTable
	perAddress, atWork, queued int
	wait                       time.Duration
	// callers are the callers let in before; the others of an address
	// are paced and take turns together, as one caller (caller_book.go).
	// nil counts every caller on its own.
	callers *callerBook
	off     bool

	mu      sync.Mutex
	working int
	// addrs holds the addresses with payments at work or waiting, and no
	// other: the table is bounded by the payments themselves.
	addrs map[string]*payAddress
	// turns are the addresses with payments waiting, in the order they
	// are served; next is the one served next.
	turns []string
	next  int
}

// payAddress is one address's payments.
type payAddress struct {
	working, waiting int
	// callers are the callers of the address with payments waiting, in
	// the order they are served, and each one's waiting payments.
	callers []string
	queues  map[string][]*payWaiter
	next    int
}

type payWaiter struct {
	ready chan struct{}
	in    bool // admitted: ready is closed
}

func newPaymentAdmission(l Limits, now func() time.Time, on bool) *paymentAdmission {
	return &paymentAdmission{byAddress: newBucketTable(now, l.Payments, l.Addresses, l.IdleAfter),
		byCaller: newBucketTable(now, l.CallerPayments, l.Addresses, l.IdleAfter), perAddress: l.PaymentsPerAddress, atWork: l.PaymentsAtWork, queued: l.PaymentsQueued,
		wait: l.PaymentWait, off: !on, addrs: map[string]*payAddress{}}
}

// payRefusal is a payment turned away before it started.
type payRefusal struct {
	err   error
	retry time.Duration
}

// admit waits for ip's caller's turn and returns it; or it says why the
// payment is turned away. exempt payments take a turn of nobody's.
func (a *paymentAdmission) admit(ctx context.Context, ip, caller string, exempt bool) (slot *paySlot, no *payRefusal) {
	if a.off || exempt {
		return nil, nil
	}
	key := ip + "\x00" + caller
	paced := []string{caller}
	if a.callers != nil && !a.callers.known(key) {
		// A caller's first payment: paced by itself and with every other
		// new caller of its address, as one, and queued as that one. One
		// that minted a token per payment takes one caller's share and
		// turns, not the class's.
		caller = newCallers
		paced = append(paced, newCallers)
	}
	if no := a.pace(ctx, ip, paced...); no != nil {
		return nil, no
	}
	if a.callers != nil {
		defer func() {
			if slot != nil {
				a.callers.letIn(key)
			}
		}()
	}
	a.mu.Lock()
	ad := a.addrs[ip]
	if ad == nil {
		ad = &payAddress{queues: map[string][]*payWaiter{}}
		a.addrs[ip] = ad
	}
	if ad.waiting == 0 && ad.working < a.perAddress && a.working < a.atWork {
		ad.working++
		a.working++
		a.mu.Unlock()
		return &paySlot{a: a, ip: ip}, nil
	}
	if waiting := ad.waiting; waiting >= a.queued {
		a.forgetLocked(ip, ad)
		a.mu.Unlock()
		a.unpace(ip, paced...)
		return nil, &payRefusal{retry: time.Second, err: pay.Errorf(pay.EBUSY,
			"Your address (%s) already has %d payments waiting for their turn (-limits payments-queued), all sent faster than the server does them: this one was not taken in. Nothing was charged and its key was not used: send it again with the same key in a second. Everyone else's payments are answered as usual.",
			ip, waiting)}
	}
	w := &payWaiter{ready: make(chan struct{})}
	if len(ad.queues[caller]) == 0 {
		ad.callers = append(ad.callers, caller)
	}
	ad.queues[caller] = append(ad.queues[caller], w)
	if ad.waiting == 0 {
		a.turns = append(a.turns, ip)
	}
	ad.waiting++
	a.mu.Unlock()

	timer := time.NewTimer(a.wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return &paySlot{a: a, ip: ip}, nil
	case <-ctx.Done():
	case <-timer.C:
	}
	// A payment not taken in started nothing: the rate's tokens go back,
	// or its retries would use up its caller's share.
	defer a.unpace(ip, paced...)
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.in {
		// Let in as the wait ended: the turn is passed on.
		ad.working--
		a.working--
		a.serveLocked()
		a.forgetLocked(ip, ad)
	} else {
		a.dropLocked(ip, ad, caller, w)
	}
	if ctx.Err() != nil {
		return nil, &payRefusal{err: pay.Errorf(pay.EBUSY, "The payment's request ended while it waited for its turn: it was not taken in, and nothing was charged.")}
	}
	secs := waitSeconds(a.wait)
	return nil, &payRefusal{retry: time.Second, err: pay.Errorf(pay.EBUSY,
		"Your address (%s) has more payments at once than its share of the server's work (%d at work, -limits payments-per-address), and this one waited %d %s for its turn (-limits payment-wait): it was not taken in. Nothing was charged and its key was not used: send it again with the same key. Everyone else's payments are answered as usual.",
		ip, a.perAddress, secs, plural(secs, "second", "seconds"))}
}

// dropLocked takes a waiter that gave up out of its queue.
func (a *paymentAdmission) dropLocked(ip string, ad *payAddress, caller string, w *payWaiter) {
	q := ad.queues[caller]
	i := slices.Index(q, w)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	ad.waiting--
	if len(q) > 0 {
		ad.queues[caller] = q
	} else {
		delete(ad.queues, caller)
		if j := slices.Index(ad.callers, caller); j >= 0 {
			ad.callers = slices.Delete(ad.callers, j, j+1)
			if ad.next > j {
				ad.next--
			}
		}
	}
	if ad.waiting == 0 {
		a.leaveTurnsLocked(ip)
	}
	a.forgetLocked(ip, ad)
}

// leaveTurnsLocked takes ip out of the turns, keeping the next one next.
func (a *paymentAdmission) leaveTurnsLocked(ip string) {
	if j := slices.Index(a.turns, ip); j >= 0 {
		a.turns = slices.Delete(a.turns, j, j+1)
		if a.next > j {
			a.next--
		}
	}
}

// forgetLocked forgets an address with nothing at work or waiting.
func (a *paymentAdmission) forgetLocked(ip string, ad *payAddress) {
	if ad.working == 0 && ad.waiting == 0 {
		delete(a.addrs, ip)
	}
}

// serveLocked lets waiting payments in while there is work to spare:
// the addresses in turn, each address's callers in turn. Each pass looks
// at every address at most once before giving up, so it ends.
func (a *paymentAdmission) serveLocked() {
	for a.working < a.atWork && len(a.turns) > 0 {
		served := false
		for range len(a.turns) {
			if a.next >= len(a.turns) {
				a.next = 0
			}
			ip := a.turns[a.next]
			ad := a.addrs[ip]
			if ad.working >= a.perAddress {
				a.next++
				continue
			}
			if ad.next >= len(ad.callers) {
				ad.next = 0
			}
			caller := ad.callers[ad.next]
			q := ad.queues[caller]
			w := q[0]
			if len(q) > 1 {
				ad.queues[caller] = q[1:]
				ad.next++
			} else {
				delete(ad.queues, caller)
				ad.callers = slices.Delete(ad.callers, ad.next, ad.next+1)
			}
			ad.waiting--
			ad.working++
			a.working++
			w.in = true
			close(w.ready)
			if ad.waiting == 0 {
				a.turns = slices.Delete(a.turns, a.next, a.next+1)
			} else {
				a.next++
			}
			served = true
			break
		}
		if !served {
			return
		}
	}
}

// counts are the students' payments at work and waiting, and the
// addresses the table holds.
func (a *paymentAdmission) counts() (working, waiting, addresses int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ad := range a.addrs {
		waiting += ad.waiting
	}
	return a.working, waiting, len(a.addrs)
}
