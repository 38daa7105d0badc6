package web

import (
	"context"
	"strconv"

	"paytwice/pay"
)

// This file answers a payment whose own request could not learn its
// outcome: the gateway never answered (504), or the transaction that
// recorded the gateway's charge rolled back (the "fails halfway" 500).
// Such an answer says how the client finds out, and it reflects the key
// as it is when the answer is sent, not as it was when the work ended: a
// request held up long enough (a paused server, step mode) may find that
// a sweeper has closed its key meanwhile.

// answerUnknown sends the answer of an Unknown or RolledBack outcome. If
// the key was closed meanwhile, its saved answer is sent, as a replay; if
// it was released (the sweeper found no charge), a 503 says that a retry
// with the same key runs afresh. Otherwise the outcome is still unknown,
// and the answer says when it will be known and how to find out.
func (p *payment) answerUnknown(o pay.Outcome) error {
	c := p.c
	k, err := p.h.books.store.GetKey(context.WithoutCancel(c.Request().Context()), p.scope, p.key)
	switch {
	case err == nil && k.Status == pay.StatusDone && k.Fingerprint == p.fp:
		return p.writeSaved(k.ResponseStatus, k.ResponseBody, true)
	case pay.ErrorCode(err) == pay.ENOTFOUND:
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The key %q was released while this request waited to answer: the gateway had not charged it, and nothing was charged. Retry with the same key: it runs afresh.", pay.Truncate(p.key, 64)))
	}
	secs := p.h.times.settleSeconds()
	c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	if p.h.work.abandoned() {
		// The server is stopping and ended the work on its way: the
		// gateway may have charged, and nothing about it is saved.
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is stopping and stopped waiting for this payment's work after it called the gateway: whether the gateway charged is unknown, and the key %q stays started. To find out, look the order up (GET /v1/payments?order_id=%s says pending until the gateway has been asked), or retry with the same key once the server is back: on starting it asks the gateway about every key left started, and the retry then gets the outcome. Never pay this order with a new key meanwhile.", pay.Truncate(p.key, 64), p.req.OrderID))
	}
	if o.Kind == pay.Unknown {
		return writeProblem(c, o.Err)
	}
	// The 500 of a rolled-back save is not saved: the key is still
	// started, so a retry with it is safe and, once the sweeper has asked
	// the gateway, answers the outcome. Stripe's SDKs retry it on this
	// header.
	c.Response().Header().Set("Stripe-Should-Retry", "true")
	return writeProblem(c, pay.Errorf(pay.EINTERNAL, "The transaction that records the charge failed halfway and rolled back after the gateway was called: the charge may have happened, and this server does not know yet. Retry with the same key after %d s, when the sweeper will have asked the gateway, or look the order up (GET /v1/payments?order_id=%s says pending until then). Never pay this order with a new key meanwhile.", secs, p.req.OrderID))
}
