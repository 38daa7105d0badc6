package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// The lab's mistaken handlers for POST /v1/payments. Each is what a naive
// application would really run, against the real database and the real
// gateway; handleCreatePayment (payments.go) hands a request to one of
// them while its mode is on. They answer in the endpoint's usual shapes (201 with the
// charge, problem+json errors), so a client cannot tell: which is the
// point. The correct handler is handleCreatePayment (payments.go).

// note puts one of the lab's own explanations on the request's row.
func (p *payment) note(status int, msg string) {
	p.publishEvent(live.Event{Kind: labKind, Status: status, Message: msg})
}

// workBase is what the lab's work on p runs under: the server's work,
// which outlives the request, marked to write first when the request is
// (the presenter's and the lab checker's, takeTurn), as pay.Service
// marks the protocol's. Without the mark the presenter's writes in the
// lab's modes queued behind a class's.
func (p *payment) workBase() context.Context {
	return pay.KeepWriteFirst(p.c.Request().Context(), p.h.work.ctx)
}

// holdDelay applies the delay fault: the work waits, so that a second
// click arrives while the first is still running.
func (p *payment) holdDelay(ctx context.Context) error {
	d := p.faults.DelayMS
	if d <= 0 {
		return nil
	}
	p.publishFault(live.Delayed, 0, "holding the request for "+(time.Duration(d)*time.Millisecond).String())
	return p.h.sleep(ctx, time.Duration(d)*time.Millisecond)
}

// answerCharged sends the 201 for a charge, or loses it under the
// response-lost fault.
func (p *payment) answerCharged(ch pay.Charge) error {
	if p.faults.ResponseLost {
		p.publishFault(live.ResponseLost, http.StatusCreated, "the work committed, but the connection closed before the response")
		return dropConnection(p.c)
	}
	if p.intent != nil {
		return p.intent.writeCharge(p.c, ch.ResponseBody(), false)
	}
	return p.c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, ch.ResponseBody())
}

// payNoKey is mistake 1, no idempotency key: the header is not even
// read, nothing is looked up or claimed, and every request that arrives
// is charged. Its charge is filed under a key of the request's own
// ("lab no-key rq_…"), so the UNIQUE constraint on charges, which only
// ever sees distinct keys, cannot catch the duplicate either.
func (h *paymentHandlers) payNoKey(p *payment) error {
	c := p.c
	r := c.Request()
	var err error
	p.req, err = p.readBody(r)
	p.key = pay.LabKeyPrefix + "no-key " + p.id
	p.publish(live.Received, 0, r.Method+" "+r.URL.Path+" (lab: no key)")
	if err != nil {
		return p.refuse(err)
	}
	p.faults, p.gw = h.switches.draw()
	if p.faults.ConnectionNeverHappens {
		p.publishFault(live.Dropped, 0, "the connection was dropped before the server did anything")
		return dropConnection(c)
	}
	if p.intent != nil {
		p.gw.Decline = p.intent.decline
		if p.intent.createsOnly() {
			return p.createUnconfirmed() // under the request's own key: every create is a new intent
		}
	}
	p.note(0, "lab, no key: the Idempotency-Key header is ignored; nothing is looked up or claimed, so this request runs whatever ran before it")

	ctx, cancel := context.WithTimeout(p.workBase(), h.times.work)
	defer cancel()
	if err := p.holdDelay(ctx); err != nil {
		return p.fail(err)
	}
	p.publish(live.GatewayCall, 0, "charging the gateway with a reference of this request's own")
	if p.step.Stopped() { // the server stopped while step mode held it: nobody let it charge
		return writeProblem(c, p.stoppedBeforeGateway(stoppedNoKey))
	}
	g, err := h.books.gateway.ChargeWith(ctx, p.gw, gatewayKey(p.scope, p.key), p.req.OrderID, p.req.AmountSatang)
	if err != nil {
		p.publish(live.GatewayReply, problemFor(pay.ErrorCode(err)).Status, pay.ErrorMessage(err))
		return writeProblem(c, err)
	}
	p.publish(live.GatewayReply, http.StatusOK, "charged "+g.ID)
	ch := pay.Charge{ID: pay.NewID("ch_"), Scope: p.scope, Key: p.key, OrderID: p.req.OrderID,
		AmountSatang: p.req.AmountSatang, GatewayRef: g.ID, CreatedAt: h.books.now()}
	if err := h.books.labRecordCharge(ctx, ch); err != nil {
		return p.fail(err)
	}
	p.publishEvent(live.Event{Kind: live.Charged, Charge: ch.ID, Message: "charge " + ch.ID + " recorded under " + p.key})
	p.note(http.StatusCreated, "201 sent; no key row was written, so the next request for this order is charged again")
	return p.answerCharged(ch)
}

// payCheckFirst is mistake 3, check first, then insert. It looks the key
// up with a SELECT on the read pool, outside any write transaction, as an
// application would; waits check_gap_ms (a slow app server, a pause, a
// network hop to the database: all the same here); then INSERTs the key in
// a separate write. Requests that arrive together all see no row.
//
// Without constraints (lab_loose_keys, lab_loose_charges: no primary key,
// no UNIQUE), every one of them inserts its row and charges. With the
// constraints back (the real idempotency_keys table), the same code loses
// the same race, but the primary key refuses the losers' INSERT: they get
// an error, and only the winner goes on to the real protocol's work.
func (h *paymentHandlers) payCheckFirst(p *payment, constrained bool) error {
	c := p.c
	mode := "check first, then insert; no constraints"
	if constrained {
		mode = "check first, then insert; constraints back"
	}
	if ok, err := p.parse(" (lab: " + mode + ")"); !ok {
		return err
	}
	if !constrained {
		// The look-up and the pause run to their end whatever the client
		// does, bounded by the pause and the gateway time-out.
		gap := time.Duration(h.switches.lab.Settings().Server.CheckGapMS) * time.Millisecond
		return p.checkThenInsertLoose(p.workBase(), gap+h.times.work, p.key, "check-first ")
	}
	checkCtx, cancelCheck := context.WithTimeout(p.workBase(), h.times.work)
	defer cancelCheck()

	// 1. The check: a plain read.
	held, err := h.books.store.GetKey(checkCtx, p.scope, p.key)
	switch {
	case err == nil:
		return p.answerFound(held)
	case pay.ErrorCode(err) != pay.ENOTFOUND:
		return p.fail(err)
	}
	p.lookedUp()
	// The rest has its own time, counted once step mode let it go on.
	ctx, cancel := context.WithTimeout(p.workBase(), h.times.work)
	defer cancel()
	// 2. The gap between the check and the insert.
	if err := p.checkGap(ctx); err != nil {
		return p.fail(err)
	}
	// 3. The insert, as a write of its own.
	token, err := h.books.store.LabInsertKeyUnguarded(ctx, p.claim(p.key))
	h.books.sweeps.claimed() // a started key the sweeper must look for
	if errors.Is(err, pay.ErrConstraint) {
		h.switches.lab.counts.constraintRefusals.Add(1)
		detail := strings.TrimPrefix(err.Error(), pay.ErrConstraint.Error()+": ")
		p.note(http.StatusInternalServerError, "INSERT refused by the table's primary key ("+detail+"): the check had said the key was free; the constraint stopped a second charge")
		return writeProblem(c, pay.Errorf(pay.EINTERNAL,
			"The database refused to insert the key %q a second time (%s). This server checked for the key first and found nothing, but another request inserted it in between: the constraint, not the check, stopped a second charge. Retry with the same key to get the first request's answer.", pay.Truncate(p.key, 64), detail))
	}
	if err != nil {
		return p.fail(err)
	}
	p.publish(live.Claimed, 0, "key row inserted as started, after a SELECT")
	return p.answer(h.books.protocol.Execute(ctx, p.protocol(), token))
}

// checkThenInsertLoose is check-then-insert on the tables with no
// constraints, the part the lock in memory shares: look tableKey up in
// lab_loose_keys and answer from its row if there is one; else pause
// check_gap_ms, INSERT a row (nothing refuses it), charge and mark the row
// done. The look-up and the pause run under checkCtx, the rest under
// the gateway time-out, counted from the insert: the pause is the lab's
// own and takes nothing from the work's time (a pause as long as the
// time-out once left no time for the insert). The look-up, and the pause,
// each run under parent for checkFor at most (0: no bound of their own),
// so that time step mode held the request between the two is not taken
// from the pause. refKind names the mode in the gateway reference.
func (p *payment) checkThenInsertLoose(parent context.Context, checkFor time.Duration, tableKey, refKind string) error {
	r := p.c.Request()
	bounded := func() (context.Context, context.CancelFunc) {
		if checkFor <= 0 {
			return context.WithCancel(parent)
		}
		return context.WithTimeout(parent, checkFor)
	}
	// 1. The check: a plain read.
	lookCtx, cancelLook := bounded()
	defer cancelLook()
	loose, found, err := p.h.books.store.LabLooseFindKey(lookCtx, p.scope, tableKey)
	if err != nil {
		return p.checkFailed(lookCtx, err)
	}
	if found {
		return p.answerFound(pay.KeyRow{Fingerprint: loose.Fingerprint, Status: loose.Status, ResponseStatus: loose.ResponseStatus, ResponseBody: loose.ResponseBody})
	}
	p.lookedUp()
	checkCtx, cancelCheck := bounded()
	defer cancelCheck()
	// 2. The gap between the check and the insert.
	if err := p.checkGap(checkCtx); err != nil {
		return p.checkFailed(checkCtx, err)
	}
	// 3. The insert, as a write of its own.
	workCtx, cancel := context.WithTimeout(p.workBase(), p.h.times.work)
	defer cancel()
	rowID, rows, err := p.h.books.labLooseInsertKey(workCtx, p.claim(tableKey), p.id)
	if err != nil {
		return p.fail(err)
	}
	p.note(0, fmt.Sprintf("INSERT key into the unguarded table: nothing refuses it; this key now has %d %s", rows, plural(rows, "row", "rows")))
	if err := p.holdDelay(workCtx); err != nil {
		return p.fail(err)
	}
	// This code trusts its check, so it gives the gateway a reference of
	// its own request, not the client's key: nothing downstream dedupes.
	ref := pay.LabKeyPrefix + refKind + p.id
	p.publish(live.GatewayCall, 0, "charging the gateway with a reference of this request's own")
	if p.step.Stopped() { // the server stopped while step mode held it: nobody let it charge
		// Its row would otherwise stay started for good, and the retry the
		// answer invites would find it (409) rather than run afresh.
		// Its own context may have ended with the server's work: the
		// delete runs without it, but bounded, so that a busy writer
		// cannot hold the answer past the shutdown's grace.
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(workCtx), stoppedWriteTimeout)
		defer cancel()
		if err := p.h.books.store.LabLooseRelease(releaseCtx, rowID); err != nil {
			p.h.logf("payment %s: deleting the started row of a stopped request: %v", p.id, err)
			return writeProblem(p.c, pay.Errorf(pay.EUNAVAILABLE, "The server stopped while step mode held this payment, before it called the gateway: nothing was charged, but its key's started row could not be deleted (%v), so a retry with the same key may be refused until the room is reset.", err))
		}
		p.h.books.tally.invalidate()
		return writeProblem(p.c, p.stoppedBeforeGateway(stoppedLooseRow))
	}
	g, err := p.h.books.gateway.ChargeWith(workCtx, p.gw, gatewayKey(p.scope, ref), p.req.OrderID, p.req.AmountSatang)
	if err != nil {
		status, body := problemBody(r, err)
		p.publish(live.GatewayReply, status, pay.ErrorMessage(err))
		if workCtx.Err() != nil && p.h.work.abandoned() {
			return p.looseAbandoned(workCtx, rowID)
		}
		if _, serr := p.h.books.store.LabLooseComplete(workCtx, rowID, status, body, nil, p.id); serr != nil {
			return p.fail(serr)
		}
		return sendProblem(p.c, status, body)
	}
	p.publish(live.GatewayReply, http.StatusOK, "charged "+g.ID)
	ch := pay.Charge{ID: pay.NewID("ch_"), Scope: p.scope, Key: tableKey, OrderID: p.req.OrderID,
		AmountSatang: p.req.AmountSatang, GatewayRef: g.ID, CreatedAt: p.h.books.now()}
	n, err := p.h.books.labLooseComplete(workCtx, rowID, ch, p.id)
	if err != nil && p.h.work.abandoned() {
		return p.looseAbandoned(workCtx, rowID)
	}
	if err != nil {
		return p.fail(err)
	}
	p.publishEvent(live.Event{Kind: live.Charged, Charge: ch.ID, Message: fmt.Sprintf("charge %s recorded in the unguarded table: charge number %d for this key", ch.ID, n)})
	p.note(http.StatusCreated, "key row marked done; 201 sent")
	return p.answerCharged(ch)
}

// looseAbandoned answers a payment of the unguarded tables whose work
// the server abandoned at shutdown after it called the gateway: whether
// the gateway charged is unknown, and these tables keep no started key a
// sweeper could settle. The row is saved with that answer, so that a
// retry with the key replays it rather than meeting a started row (409)
// until the room is reset.
func (p *payment) looseAbandoned(workCtx context.Context, rowID int64) error {
	err := pay.Errorf(pay.EUNAVAILABLE, "The server is stopping and stopped waiting for this payment's work after it called the gateway: whether the gateway charged is unknown. This mistaken handler keeps no started key for the server to settle when it is back: the key's row in the unguarded table holds this answer, and a retry with the same key replays it. To find out, count the order's charges on the lab's board once the server is back; never pay order %s with a new key meanwhile.", p.req.OrderID)
	status, body := problemBody(p.c.Request(), err)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(workCtx), stoppedWriteTimeout)
	defer cancel()
	if _, serr := p.h.books.store.LabLooseComplete(ctx, rowID, status, body, nil, p.id); serr != nil {
		p.h.logf("payment %s: saving the answer of an abandoned payment: %v", p.id, serr)
	} else {
		p.h.books.tally.invalidate()
	}
	p.note(status, "the server stopped waiting for the gateway: outcome unknown, answered so")
	return sendProblem(p.c, status, body)
}

// stoppedWriteTimeout bounds a write made for a payment the server has
// stopped, after its own context ended: a busy database may not hold its
// answer past the shutdown's grace.
const stoppedWriteTimeout = 2 * time.Second

// claim is the request's key row, filed under tableKey.
func (p *payment) claim(tableKey string) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: p.scope, Key: tableKey, Method: p.c.Request().Method, Path: p.path(), Fingerprint: p.fp,
		OrderID: p.req.OrderID, AmountSatang: p.req.AmountSatang}
}

// answerFound answers from the key row the check found.
func (p *payment) answerFound(held pay.KeyRow) error {
	p.note(0, "SELECT found the key: answering from its row")
	return p.answer(p.protocol().AnswerHeld(held))
}

// lookedUp says that the look-up found no row for the key, and is step
// mode's hold between the check and the insert ("key looked up"): there a
// class playing the scheduler lets a second request look before the
// first inserts. Nothing is written yet and no lock of the database is
// taken; the lock in memory's, on the server that runs it, stays held.
func (p *payment) lookedUp() {
	gap := p.h.switches.lab.Settings().Server.CheckGapMS
	p.note(0, fmt.Sprintf("SELECT … WHERE key = ?: no row, so this request goes ahead (and inserts %d ms later)", gap))
	if !p.h.switches.steps.On() {
		return
	}
	p.slot.pause()
	p.h.switches.steps.Hold(p, step.CheckLooked)
	p.slot.resume()
}

// checkGap is the pause between the check and the insert.
func (p *payment) checkGap(ctx context.Context) error {
	gap := p.h.switches.lab.Settings().Server.CheckGapMS
	if gap <= 0 {
		return nil
	}
	// The pause is the lab's own, not work: the turn goes back meanwhile,
	// so that a class behind one address is not held to its few turns.
	p.slot.pause()
	defer p.slot.resume()
	return p.h.sleep(ctx, time.Duration(gap)*time.Millisecond)
}

// checkFailed answers a check or a pause that failed: no failure of ours
// when it ran under the client's connection and the client left.
func (p *payment) checkFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil && p.c.Request().Context().Err() != nil {
		return p.hungUp("before the key was inserted")
	}
	return p.fail(err)
}

// hungUp ends a request whose client left before anything was written:
// there is nothing to undo and nobody to answer, but the timeline says so.
func (p *payment) hungUp(when string) error {
	p.note(0, "the client hung up "+when+": nothing was written, nothing is left behind")
	return writeProblem(p.c, pay.Errorf(pay.EUNAVAILABLE, "The client hung up %s; nothing was written.", when))
}

// payKeyTableOnly is the protocol for mistake 7, pruning keys sooner than
// clients retry. It is the real protocol in every step (claim, replay,
// faults, the sweeper), but the key table is its only memory: the charge
// is recorded and the gateway called under a reference of the request's
// own, as many applications do, so no second guard stands behind the key
// table. While the key is kept, a retry replays; once the lab's prune has
// removed it, the same key is a new payment.
func (h *paymentHandlers) payKeyTableOnly(p *payment) error {
	c := p.c
	p.chargeKey = pay.LabKeyPrefix + "key-table-only " + p.id
	if ok, err := p.parse(" (lab: key table only)"); !ok {
		return err
	}
	return p.answer(h.books.protocol.Pay(c.Request().Context(), p.protocol()))
}
