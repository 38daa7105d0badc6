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
	"paytwice/store"
	"paytwice/web/live"
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

// holdDelay applies the delay fault: the work waits, so that a second
// click arrives while the first is still running.
func (p *payment) holdDelay(ctx context.Context) error {
	d := p.faults.DelayMS
	if d <= 0 {
		return nil
	}
	p.publishFault(live.Delayed, 0, "holding the request for "+(time.Duration(d)*time.Millisecond).String())
	return p.s.sleep(ctx, time.Duration(d)*time.Millisecond)
}

// answerCharged sends the 201 for a charge, or loses it under the
// response-lost fault.
func (p *payment) answerCharged(ch pay.Charge) error {
	if p.faults.ResponseLost {
		p.publishFault(live.ResponseLost, http.StatusCreated, "the work committed, but the connection closed before the response")
		return dropConnection(p.c)
	}
	return p.c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, ch.ResponseBody())
}

// payNoKey is mistake 1, no idempotency key: the header is not even
// read, nothing is looked up or claimed, and every request that arrives
// is charged. Its charge is filed under a key of the request's own
// ("lab no-key rq_…"), so the UNIQUE constraint on charges, which only
// ever sees distinct keys, cannot catch the duplicate either.
func (s *Server) payNoKey(c echo.Context) error {
	r := c.Request()
	p := s.newPayment(c)
	var err error
	p.req, err = readPaymentBody(r)
	p.key = store.LabKeyPrefix + "no-key " + p.id
	p.publish(live.Received, 0, r.Method+" "+r.URL.Path+" (lab: no key)")
	if err != nil {
		return p.refuse(err)
	}
	p.faults, p.gw = s.faults.Draw(s.gateway.Switches())
	if p.faults.ConnectionNeverHappens {
		p.publishFault(live.Dropped, 0, "the connection was dropped before the server did anything")
		return dropConnection(c)
	}
	p.note(0, "lab, no key: the Idempotency-Key header is ignored; nothing is looked up or claimed, so this request runs whatever ran before it")

	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.GatewayTimeout)
	defer cancel()
	if err := p.holdDelay(ctx); err != nil {
		return p.fail(err)
	}
	p.publish(live.GatewayCall, 0, "charging the gateway with a reference of this request's own")
	g, err := s.gateway.ChargeWith(ctx, p.gw, gatewayKey(p.scope, p.key), p.req.OrderID, p.req.AmountSatang)
	if err != nil {
		p.publish(live.GatewayReply, problemFor(pay.ErrorCode(err)).Status, pay.ErrorMessage(err))
		return writeProblem(c, err)
	}
	p.publish(live.GatewayReply, http.StatusOK, "charged "+g.ID)
	ch := pay.Charge{ID: pay.NewID("ch_"), Scope: p.scope, Key: p.key, OrderID: p.req.OrderID,
		AmountSatang: p.req.AmountSatang, GatewayRef: g.ID, CreatedAt: s.clock.Now()}
	if err := s.db.LabRecordCharge(ctx, ch); err != nil {
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
func (s *Server) payCheckFirst(c echo.Context, constrained bool) error {
	r := c.Request()
	mode := "check first, then insert; no constraints"
	if constrained {
		mode = "check first, then insert; constraints back"
	}
	p := s.newPayment(c)
	if ok, err := p.parse(" (lab: " + mode + ")"); !ok {
		return err
	}
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.GatewayTimeout)
	defer cancel()

	// 1. The check: a plain read.
	var held pay.KeyRow
	var found bool
	if constrained {
		k, err := s.db.GetKey(ctx, p.scope, p.key)
		switch {
		case err == nil:
			held, found = k, true
		case pay.ErrorCode(err) != pay.ENOTFOUND:
			return p.fail(err)
		}
	} else {
		loose, ok, err := s.db.LabLooseFindKey(ctx, p.scope, p.key)
		if err != nil {
			return p.fail(err)
		}
		held, found = pay.KeyRow{Fingerprint: loose.Fingerprint, Status: loose.Status, ResponseStatus: loose.ResponseStatus, ResponseBody: loose.ResponseBody}, ok
	}
	if found {
		p.note(0, "SELECT found the key: answering from its row")
		return p.answer(p.protocol().AnswerHeld(held))
	}
	gap := s.lab.Settings().Server.CheckGapMS
	p.note(0, fmt.Sprintf("SELECT … WHERE key = ?: no row, so this request goes ahead (and inserts %d ms later)", gap))

	// 2. The gap between the check and the insert.
	if gap > 0 {
		if err := s.sleep(ctx, time.Duration(gap)*time.Millisecond); err != nil {
			return p.fail(err)
		}
	}

	// 3. The insert, as a write of its own.
	claim := pay.ClaimRequest{Scope: p.scope, Key: p.key, Method: r.Method, Path: paymentsPath, Fingerprint: p.fp,
		OrderID: p.req.OrderID, AmountSatang: p.req.AmountSatang}
	if constrained {
		token, err := s.db.LabInsertKeyUnguarded(ctx, claim)
		s.idleSweeps.claimed() // a started key the sweeper must look for
		if errors.Is(err, store.ErrConstraint) {
			s.lab.constraintRefusals.Add(1)
			detail := strings.TrimPrefix(err.Error(), store.ErrConstraint.Error()+": ")
			p.note(http.StatusInternalServerError, "INSERT refused by the table's primary key ("+detail+"): the check had said the key was free; the constraint stopped a second charge")
			return writeProblem(c, pay.Errorf(pay.EINTERNAL,
				"The database refused to insert the key %q a second time (%s). This server checked for the key first and found nothing, but another request inserted it in between: the constraint, not the check, stopped a second charge. Retry with the same key to get the first request's answer.", truncate(p.key, 64), detail))
		}
		if err != nil {
			return p.fail(err)
		}
		p.publish(live.Claimed, 0, "key row inserted as started, after a SELECT")
		return p.answer(s.protocol.Execute(ctx, p.protocol(), token))
	}

	rowID, rows, err := s.db.LabLooseInsertKey(ctx, claim, p.id)
	if err != nil {
		return p.fail(err)
	}
	p.note(0, fmt.Sprintf("INSERT key into the unguarded table: nothing refuses it; this key now has %d %s", rows, plural(rows, "row", "rows")))
	if err := p.holdDelay(ctx); err != nil {
		return p.fail(err)
	}
	// This code trusts its check, so it gives the gateway a reference of
	// its own request, not the client's key: nothing downstream dedupes.
	ref := store.LabKeyPrefix + "check-first " + p.id
	p.publish(live.GatewayCall, 0, "charging the gateway with a reference of this request's own")
	g, err := s.gateway.ChargeWith(ctx, p.gw, gatewayKey(p.scope, ref), p.req.OrderID, p.req.AmountSatang)
	if err != nil {
		status, body := problemBody(r, err)
		p.publish(live.GatewayReply, status, pay.ErrorMessage(err))
		if _, serr := s.db.LabLooseComplete(ctx, rowID, status, body, nil, p.id); serr != nil {
			return p.fail(serr)
		}
		return c.Blob(status, "application/problem+json", body)
	}
	p.publish(live.GatewayReply, http.StatusOK, "charged "+g.ID)
	ch := pay.Charge{ID: pay.NewID("ch_"), Scope: p.scope, Key: p.key, OrderID: p.req.OrderID,
		AmountSatang: p.req.AmountSatang, GatewayRef: g.ID, CreatedAt: s.clock.Now()}
	n, err := s.db.LabLooseComplete(ctx, rowID, http.StatusCreated, ch.ResponseBody(), &ch, p.id)
	if err != nil {
		return p.fail(err)
	}
	p.publishEvent(live.Event{Kind: live.Charged, Charge: ch.ID, Message: fmt.Sprintf("charge %s recorded in the unguarded table: charge number %d for this key", ch.ID, n)})
	p.note(http.StatusCreated, "key row marked done; 201 sent")
	return p.answerCharged(ch)
}

// payKeyTableOnly is the protocol for mistake 7, pruning keys sooner than
// clients retry. It is the real protocol in every step (claim, replay,
// faults, the sweeper), but the key table is its only memory: the charge
// is recorded and the gateway called under a reference of the request's
// own, as many applications do, so no second guard stands behind the key
// table. While the key is kept, a retry replays; once the lab's prune has
// removed it, the same key is a new payment.
func (s *Server) payKeyTableOnly(c echo.Context) error {
	p := s.newPayment(c)
	p.chargeKey = store.LabKeyPrefix + "key-table-only " + p.id
	if ok, err := p.parse(" (lab: key table only)"); !ok {
		return err
	}
	return p.answer(s.protocol.Pay(c.Request().Context(), p.protocol()))
}
