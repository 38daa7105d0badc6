package web

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
	"paytwice/web/live"
)

// paymentsPath is the one idempotent endpoint.
const paymentsPath = "/v1/payments"

// payment carries one request through the protocol.
type payment struct {
	s     *Server
	c     echo.Context
	id    string // request id, grouping its events on the timeline
	scope string
	key   string
	// chargeKey is what the charge is recorded under and the gateway is
	// called with; "" means the key. Only the lab's key-table-only mode
	// sets it.
	chargeKey string
	claim     string // the claim's fencing token, once claimed
	req       pay.PaymentRequest
	fp        string
	faults    sim.Faults          // drawn once per request (random mode may thin them)
	gw        sim.GatewaySwitches // the gateway switches this request charges with
}

// claimRequest is the claim this payment makes.
func (p *payment) claimRequest() store.ClaimRequest {
	return store.ClaimRequest{Scope: p.scope, Key: p.key, Method: http.MethodPost, Path: paymentsPath,
		Fingerprint: p.fp, OrderID: p.req.OrderID, AmountSatang: p.req.AmountSatang, ChargeKey: p.chargeKey}
}

// gatewayKey is the key this payment charges the gateway with.
func (p *payment) gatewayKey() string {
	if p.chargeKey != "" {
		return gatewayKey(p.scope, p.chargeKey)
	}
	return gatewayKey(p.scope, p.key)
}

// hold records the claim as running in this process, so that the
// sweeper leaves its key alone; finish forgets it when the request ends.
func (p *payment) hold(claim string) {
	p.claim = claim
	p.s.running.add(claim)
}

// finish runs before the request's last answer is written, not after: a
// client that has its answer (or its dropped connection) may ask for a
// sweep at once, and must find the key closable.
func (p *payment) finish() {
	if p.claim != "" {
		p.s.running.remove(p.claim)
		p.claim = ""
	}
}

// runningClaims are the claims whose request is still at work in this
// process. The sweeper never closes their keys, whatever a warped clock
// says: their request will save its own outcome. A claim leaves the set
// when its request ends, however it ends (answered, timed out, crashed
// midway), and then the sweeper may close it.
type runningClaims struct {
	mu     sync.Mutex
	claims map[string]struct{}
}

func (r *runningClaims) add(claim string) {
	r.mu.Lock()
	if r.claims == nil {
		r.claims = map[string]struct{}{}
	}
	r.claims[claim] = struct{}{}
	r.mu.Unlock()
}

func (r *runningClaims) remove(claim string) {
	r.mu.Lock()
	delete(r.claims, claim)
	r.mu.Unlock()
}

func (r *runningClaims) has(claim string) bool {
	r.mu.Lock()
	_, ok := r.claims[claim]
	r.mu.Unlock()
	return ok
}

func (p *payment) publish(kind live.Kind, status int, msg string) {
	p.s.hub.Publish(live.Event{Kind: kind, Request: p.id, Scope: p.scope, Key: p.key,
		OrderID: p.req.OrderID, Amount: p.req.AmountSatang, Status: status, Message: msg})
}

// newPayment starts carrying one request through the protocol.
func (s *Server) newPayment(c echo.Context) *payment {
	return &payment{s: s, c: c, id: pay.NewID("rq_")[:11], scope: callerScope(c.Request())}
}

// handleCreatePayment is POST /v1/payments. This is the one place that
// decides which handler runs: the real protocol (payCorrect), or the
// mistaken one the lab has switched on (lab_naive.go).
func (s *Server) handleCreatePayment(c echo.Context) error {
	// A reset waits until every payment in flight has finished, and holds
	// new ones back until it is done: no payment writes half before and
	// half after it (resetDemo).
	s.inflight.RLock()
	defer s.inflight.RUnlock()
	r := c.Request()
	key := s.lab.observePayment(r)
	var err error
	switch s.lab.Settings().Server.Mode {
	case LabNoKey:
		err = s.payNoKey(c)
	case LabCheckThenInsert:
		err = s.payCheckFirst(c, false)
	case LabCheckThenInsertConstrained:
		err = s.payCheckFirst(c, true)
	case LabKeyTableOnly:
		err = s.payKeyTableOnly(c)
	default:
		err = s.payCorrect(c)
	}
	if st := c.Response().Status; c.Response().Committed && (st == http.StatusBadRequest || st == http.StatusUnprocessableEntity) {
		s.lab.countRefusal(callerScope(r), key, st)
	}
	return err
}

// payCorrect is the real protocol. The steps follow the protocol table in
// the README: parse (nothing saved), claim, work outside any transaction,
// save the charge and the response together.
func (s *Server) payCorrect(c echo.Context) error {
	p := s.newPayment(c)
	defer p.finish()
	if claimed, err := p.admit(""); !claimed {
		return err
	}
	// From here on the work belongs to the server, not to the connection:
	// a client that hangs up must not leave it half done.
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.GatewayTimeout)
	defer cancel()
	return p.execute(ctx)
}

// admit runs the protocol's first steps: parse, then claim. It reports
// claimed=false when it has already answered the request (refused,
// dropped, replayed, 409 or 422); then its error is the answer's. note is
// added to the "received" event, so the lab can say which handler ran.
func (p *payment) admit(note string) (claimed bool, err error) {
	s, c, r := p.s, p.c, p.c.Request()

	// 1. Parse. A bad request is refused before anything is saved, so the
	// caller can correct it and retry with the same key.
	key, err := pay.ParseKey(r.Header.Values("Idempotency-Key"))
	if err == nil {
		p.key = key
		p.req, err = readPaymentBody(r)
	}
	p.publish(live.Received, 0, r.Method+" "+r.URL.Path+note)
	if err != nil {
		return false, p.refuse(err)
	}
	p.fp = pay.Fingerprint(r.Method, paymentsPath, p.req.Canonical())
	p.faults, p.gw = s.faults.Draw(s.gateway.Switches())

	if p.faults.ConnectionNeverHappens {
		p.publish(live.Dropped, 0, "fault: the connection was dropped before the server did anything")
		return false, dropConnection(c)
	}

	// 2. A done key's response never changes: answer replays from memory
	// without queueing behind the writer.
	if saved, ok := s.db.CachedResponse(p.scope, p.key); ok {
		return false, p.answerExisting(saved.Fingerprint, pay.StatusDone, saved.Status, saved.Body)
	}

	// 3. Claim. INSERT … ON CONFLICT DO NOTHING: the primary key decides
	// which of many concurrent requests owns the key. The winner's row
	// carries a fencing token of its own.
	claim, err := s.db.Claim(r.Context(), p.claimRequest())
	if err != nil {
		return false, p.fail(err)
	}
	if claim.Reused != nil {
		return false, p.refuseReused(claim.Reused.OrderID, claim.Reused.AmountSatang, claim.Reused.CreatedAt)
	}
	if !claim.Claimed {
		ex := claim.Existing
		return false, p.answerExisting(ex.Fingerprint, ex.Status, ex.ResponseStatus, ex.ResponseBody)
	}
	p.hold(claim.Claim)
	p.publish(live.Claimed, 0, "key row inserted as started")
	return true, nil
}

// keyUsedForAnotherOrder is the answer to a key whose charge, kept after
// its key row was pruned, is for another order: a key pays for one order
// only, and a request is never answered with another order's charge.
func keyUsedForAnotherOrder(key, order string, amount int64, at time.Time) error {
	return pay.Errorf(pay.EMISMATCH, "The key %q was already used for order %s (%d satang) on %s, and that charge is kept. It was not charged again, and this request was not run: use a new key for a new order.",
		truncate(key, 64), truncate(order, 64), amount, at.UTC().Format(time.DateOnly))
}

// refuseReused answers a key reused for another order after its key row
// was pruned. Nothing is saved: the key row is not written.
func (p *payment) refuseReused(order string, amount int64, at time.Time) error {
	p.publish(live.Mismatch, http.StatusUnprocessableEntity, "this key already paid for order "+order+": refused")
	return writeProblem(p.c, keyUsedForAnotherOrder(p.key, order, amount, at))
}

// refuse answers a request that failed parsing: nothing saved.
func (p *payment) refuse(err error) error {
	status, body := problemBody(p.c.Request(), err)
	p.publish(live.Rejected, status, pay.ErrorMessage(err))
	return p.c.Blob(status, "application/problem+json", body)
}

// answerExisting answers a request whose key is already held: 422 if the
// key belongs to another request (this wins over 409: the key is misused
// whatever the first request's state), 409 while the first is running,
// and the saved response once it is done.
func (p *payment) answerExisting(fp, status string, savedStatus int, savedBody []byte) error {
	switch {
	case fp != p.fp:
		err := pay.Errorf(pay.EMISMATCH, "The key %q was first used with a different request; it was not run again, and the original is untouched.", truncate(p.key, 64))
		p.publish(live.Mismatch, http.StatusUnprocessableEntity, "same key, different body")
		return writeProblem(p.c, err)
	case status == pay.StatusStarted:
		err := pay.Errorf(pay.ECONFLICT, "A request with the key %q is still being processed. Retry with the same key after %d second(s).", truncate(p.key, 64), retryAfterSeconds)
		p.publish(live.Conflict, http.StatusConflict, "first request still running")
		return writeProblem(p.c, err)
	}
	p.publish(live.Replayed, savedStatus, "saved response sent again; nothing executed")
	return writeSaved(p.c, savedStatus, savedBody, true)
}

// execute does the claimed request's work: the gateway call, outside any
// transaction, then one transaction that saves the charge and the response.
func (p *payment) execute(ctx context.Context) error {
	s := p.s
	if d := p.faults.DelayMS; d > 0 {
		p.publish(live.Delayed, 0, "fault: holding the key started for "+time.Duration(d*int(time.Millisecond)).String())
		if err := s.sleep(ctx, time.Duration(d)*time.Millisecond); err != nil {
			// Nothing left the building yet: release the claim so a retry runs afresh.
			return p.release(p.claim, err)
		}
	}

	if p.chargeKey != "" {
		p.publish(live.GatewayCall, 0, "charging the gateway with a reference of this request's own, not the key")
	} else {
		p.publish(live.GatewayCall, 0, "charging the gateway with the key")
	}
	charge, err := s.gateway.ChargeWith(ctx, p.gw, p.gatewayKey(), p.req.OrderID, p.req.AmountSatang)
	if p.faults.CrashMidway {
		// Whatever the gateway answered, nobody is left to act on it: only
		// the sweeper, asking the gateway, can tell what happened.
		p.publish(live.Crashed, 0, "fault: the server stopped right after the gateway call; key left started")
		p.finish()
		return dropConnection(p.c)
	}
	switch {
	case errors.Is(err, sim.ErrGatewayTimeout):
		// The money may have moved: only the sweeper may close this key.
		p.publish(live.GatewayReply, http.StatusGatewayTimeout, "no answer: outcome unknown, key stays started")
		p.finish()
		return s.writeTimeout(p.c, err)
	case err != nil:
		// A definite answer from the gateway: save it, so retries replay it.
		p.publish(live.GatewayReply, problemFor(pay.ErrorCode(err)).Status, pay.ErrorMessage(err))
		return p.save(ctx, err, nil)
	}
	p.publish(live.GatewayReply, http.StatusOK, "charged "+charge.ID)

	// The local charge records what the gateway took, so the two always
	// agree.
	local := &pay.Charge{ID: pay.NewID("ch_"), Scope: p.scope, Key: p.key, OrderID: charge.OrderID,
		AmountSatang: charge.AmountSatang, GatewayRef: charge.ID, CreatedAt: s.clock.Now()}
	var outcome error
	if charge.OrderID != p.req.OrderID || charge.AmountSatang != p.req.AmountSatang {
		// The gateway already held a charge for this key, for another
		// order. Record it (it is money taken) and refuse: this request is
		// never answered with another order's charge.
		outcome = keyUsedForAnotherOrder(p.key, charge.OrderID, charge.AmountSatang, charge.CreatedAt)
	} else if p.faults.ServerError {
		outcome = pay.Errorf(pay.EINTERNAL, "The server failed after the payment started. The charge may have happened: look it up with GET /v1/payments?order_id=%s before paying again, and do not switch to a new key.", p.req.OrderID)
	}
	return p.save(ctx, outcome, local)
}

// save stores the outcome on the key, with the charge if there is one, in
// one transaction; then answers. outcome nil means 201 for the charge.
func (p *payment) save(ctx context.Context, outcome error, charge *pay.Charge) error {
	r := p.c.Request()
	status, body := http.StatusCreated, []byte(nil)
	if outcome != nil {
		status, body = problemBody(r, outcome)
	} else {
		body = charge.ResponseBody()
	}
	saved, err := p.s.db.Complete(ctx, store.Completion{ClaimRequest: p.claimRequest(), Claim: p.claim,
		Status: status, Body: body, Charge: charge, FailHalfway: p.faults.FailHalfway})
	claim := p.claim
	if charge != nil || !errors.Is(err, store.ErrHalfway) {
		p.finish() // nothing of this request is left to save
	}
	switch {
	case errors.Is(err, store.ErrHalfway) && charge == nil:
		// The gateway said no: nothing happened outside, so the claim goes
		// and a retry runs afresh.
		p.publish(live.RolledBack, http.StatusInternalServerError, "fault: the transaction saving the gateway's refusal rolled back; nothing was charged")
		return p.release(claim, err)
	case errors.Is(err, store.ErrHalfway):
		p.publish(live.RolledBack, http.StatusInternalServerError, "fault: the charge's transaction rolled back after the gateway charged; key stays started for the sweeper")
		return writeProblem(p.c, err)
	case err != nil:
		return p.fail(err)
	}
	switch {
	case saved.ClaimLost:
		p.publish(live.Completed, saved.Status, "the key was closed while this request worked; its charge is recorded all the same, nothing charged twice")
	case charge != nil && saved.ChargeExisted:
		p.publish(live.Completed, saved.Status, "this key's charge was already recorded (its key row had been pruned): nothing charged twice, the original charge is answered")
	default:
		if charge != nil {
			p.publish(live.Charged, 0, "charge "+charge.ID+" recorded")
		}
		p.publish(live.Completed, saved.Status, "response saved on the key")
	}
	if p.faults.ResponseLost {
		p.publish(live.ResponseLost, saved.Status, "fault: the work committed, but the connection closed before the response")
		return dropConnection(p.c)
	}
	return writeSaved(p.c, saved.Status, saved.Body, false)
}

// release deletes the claim after a failure that happened before any
// external side effect, so a retry runs afresh.
func (p *payment) release(claim string, cause error) error {
	ctx := context.WithoutCancel(p.c.Request().Context())
	_, err := p.s.db.Release(ctx, p.scope, p.key, claim)
	p.finish()
	if err != nil {
		return p.fail(err)
	}
	p.publish(live.Released, http.StatusServiceUnavailable, "claim released before any side effect: a retry runs afresh")
	return writeProblem(p.c, &pay.Error{Code: pay.EUNAVAILABLE, Message: "The request was interrupted before anything happened; retry with the same key."})
}

// fail answers an unexpected error without saving it.
func (p *payment) fail(err error) error {
	p.finish()
	p.s.logf("payment %s: %v", p.id, err)
	status, body := problemBody(p.c.Request(), err)
	p.publish(live.Rejected, status, pay.ErrorMessage(err))
	return p.c.Blob(status, "application/problem+json", body)
}

// gatewayKey is the key passed on to the gateway: scoped, so one caller's
// key can never match another caller's charge there either.
func gatewayKey(scope, key string) string { return scope + "|" + key }

func contentTypeFor(status int) string {
	if status >= 400 {
		return "application/problem+json"
	}
	return echo.MIMEApplicationJSON
}

// readPaymentBody checks the content type and the size, then decodes.
func readPaymentBody(r *http.Request) (pay.PaymentRequest, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != echo.MIMEApplicationJSON {
		return pay.PaymentRequest{}, pay.Errorf(pay.EMEDIATYPE, "Send the body as JSON with Content-Type: application/json (got %q).", truncate(r.Header.Get("Content-Type"), 40))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, pay.MaxBodyBytes+1))
	if err != nil {
		return pay.PaymentRequest{}, pay.Errorf(pay.EINVALID, "The body could not be read.")
	}
	if len(body) > pay.MaxBodyBytes {
		return pay.PaymentRequest{}, pay.Errorf(pay.ETOOLARGE, "The body is larger than %d bytes.", pay.MaxBodyBytes)
	}
	return pay.DecodePayment(body)
}

// dropConnection closes the client's connection without a response: what
// a lost packet, a dead load balancer or a crashed server look like from
// the client's side.
func dropConnection(c echo.Context) error {
	conn, _, err := c.Response().Hijack()
	if err != nil {
		// HTTP/2 cannot be hijacked; aborting the handler resets the stream.
		panic(http.ErrAbortHandler)
	}
	return conn.Close()
}

// truncate shortens s to n bytes for a message, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
