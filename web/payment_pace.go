package web

import (
	"context"
	"time"

	"paytwice/pay"
)

// pace waits for a token of the address's and of each of callers', or
// says why the payment may not wait that long.
func (a *paymentAdmission) pace(ctx context.Context, ip string, callers ...string) *payRefusal {
	var wait time.Duration
	for i, caller := range callers {
		wc, ok := a.byCaller.reserve(ip+"\x00"+caller, a.wait)
		if !ok {
			a.unpaceCallers(ip, callers[:i]...)
			who := "your browser or token"
			if caller == newCallers {
				who = "the browsers and tokens new to your address (" + ip + "), counted together as one,"
			}
			return a.tooFast(ip, who, a.byCaller.rate, wc)
		}
		wait = max(wait, wc)
	}
	wa, ok := a.byAddress.reserve(ip, a.wait)
	if !ok {
		a.unpaceCallers(ip, callers...)
		return a.tooFast(ip, "your address ("+ip+")", a.byAddress.rate, wa)
	}
	wait = max(wait, wa)
	if wait == 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		a.unpace(ip, callers...)
		return &payRefusal{err: pay.Errorf(pay.EBUSY, "The payment's request ended while it waited for its turn: it was not taken in, and nothing was charged.")}
	}
}

// unpace gives back the tokens pace took for a payment not taken in.
func (a *paymentAdmission) unpace(ip string, callers ...string) {
	a.unpaceCallers(ip, callers...)
	a.byAddress.giveBack(ip)
}

func (a *paymentAdmission) unpaceCallers(ip string, callers ...string) {
	for _, caller := range callers {
		a.byCaller.giveBack(ip + "\x00" + caller)
	}
}

// tooFast refuses a payment whose token would come too late.
func (a *paymentAdmission) tooFast(ip, who string, r Rate, wait time.Duration) *payRefusal {
	retry := wait - a.wait
	secs := waitSeconds(retry)
	return &payRefusal{retry: retry, err: pay.Errorf(pay.EBUSY,
		"This payment was not taken in: %s started more payments than its share (%d at once, then one every %v; -limits payments and caller-payments). Nothing was charged and its key was not used: send it again with the same key in %d %s. Everyone else's payments are answered as usual.",
		who, r.Burst, r.Every, secs, plural(secs, "second", "seconds"))}
}
