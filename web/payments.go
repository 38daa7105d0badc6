package web

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// This file is the HTTP adapter of the payment protocol. The protocol
// itself, and every rule of it, is pay.Service (pay/service.go); here a
// request is parsed into a pay.Payment, its steps become timeline events,
// and its pay.Outcome becomes a response.

// paymentsPath is the one idempotent endpoint.
const paymentsPath = "/v1/payments"

// handleCreatePayment is POST /v1/payments.
func (h *paymentHandlers) handleCreatePayment(c echo.Context) error {
	slot, err := h.takeTurn(c)
	if err != nil {
		return err
	}
	defer slot.done()
	// A reset waits until every payment in flight has finished, and holds
	// new ones back until it is done: no payment writes half before and
	// half after it (resetDemo).
	h.inflight.RLock()
	defer h.inflight.RUnlock()
	p := h.newPayment(c)
	p.slot = slot
	return h.payInLabMode(p)
}

// takeTurn waits for the payment's turn at the server's work
// (payment_admission.go); past its share it is refused before anything is
// read or claimed, with Retry-After.
func (h *paymentHandlers) takeTurn(c echo.Context) (*paySlot, error) {
	r := c.Request()
	first := h.admission.hasPriority(r) || h.fromLabChecker(r)
	slot, no := h.admission.payments.admit(r.Context(), h.admission.presenter.clientIP(r), callerScope(r), first)
	if no != nil {
		if no.retry > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(no.retry)))
		}
		return nil, no.err
	}
	if first {
		// The presenter's payment takes nobody's turn, the students' work
		// steps aside while it is at work (student_work.go), and its
		// writes go before the students' queued at the store's writer.
		slot = &paySlot{presenter: &h.admission.work.presenter, leave: h.admission.work.presenter.enter()}
		c.SetRequest(r.WithContext(pay.WriteFirst(r.Context())))
	}
	return slot, nil
}

// payInLabMode is the one place that decides which handler takes a
// payment, of /v1/payments or of the Stripe-shaped sandbox: the real
// protocol (payCorrect), or the mistaken one the lab has switched on
// (lab_naive.go).
func (h *paymentHandlers) payInLabMode(p *payment) error {
	c := p.c
	r := c.Request()
	key := h.switches.lab.observePayment(r)
	var err error
	switch h.switches.lab.Settings().Server.Mode {
	case room.LabNoKey:
		err = h.payNoKey(p)
	case room.LabCheckThenInsert:
		err = h.payCheckFirst(p, false)
	case room.LabCheckThenInsertConstrained:
		err = h.payCheckFirst(p, true)
	case room.LabKeyTableOnly:
		err = h.payKeyTableOnly(p)
	case room.LabMemoryLock:
		err = h.payMemoryLock(p)
	default:
		err = h.payCorrect(p)
	}
	if st := c.Response().Status; c.Response().Committed && (st == http.StatusBadRequest || st == http.StatusUnprocessableEntity) {
		h.switches.lab.counts.refusals.count(callerScope(r), key, st)
	}
	return err
}

// payCorrect is the real protocol: parse (nothing saved), then the
// service's claim, work and save.
func (h *paymentHandlers) payCorrect(p *payment) error {
	if ok, err := p.parse(""); !ok {
		return err
	}
	return p.answer(h.books.protocol.Pay(p.c.Request().Context(), p.protocol()))
}

// payment carries one HTTP request through the protocol.
type payment struct {
	h     *paymentHandlers
	c     echo.Context
	id    string // request id, grouping its events on the timeline
	scope string
	// source is the client address, the request's share of the timeline.
	source string
	// priority says the presenter sent it.
	priority bool
	// slot is its turn at the server's work, given back while it waits on
	// something that costs nothing (payment_slot.go).
	slot *paySlot
	// server names the server inside this process that took the request
	// (the lock in memory's two, inProcessServer); "" is this server.
	server string
	key    string
	// chargeKey files the charge under a reference of its own; only the
	// lab's key-table-only mode sets it.
	chargeKey string
	req       pay.PaymentRequest
	fp        string
	faults    pay.ServerFaults  // drawn once per request (random mode may thin them)
	gw        pay.GatewayFaults // the gateway switches this request charges with
	step      step.Progress     // where step mode has held it (web/room/step)
	run       *pay.Payment      // the request as the service runs it, once made
	// intent, when set, makes this a request of the Stripe-shaped sandbox
	// (stripe_sandbox.go): its body, its path and its answers' shape.
	intent *intentShape
}

// path is the endpoint the request's key and fingerprint belong to.
func (p *payment) path() string {
	if p.intent != nil {
		return p.intent.path()
	}
	return paymentsPath
}

// readBody reads the request's body as its endpoint takes it.
func (p *payment) readBody(r *http.Request) (pay.PaymentRequest, error) {
	if p.intent != nil {
		return p.intent.read(r)
	}
	return readPaymentBody(r)
}

// canonical is what the fingerprint covers of the body.
func (p *payment) canonical() []byte {
	if p.intent != nil {
		return []byte(p.intent.canonical)
	}
	return p.req.Canonical()
}

// writeSaved sends an answer saved on the key in the endpoint's shape.
func (p *payment) writeSaved(status int, body []byte, replayed bool) error {
	if p.intent != nil && status == pay.PaidStatus {
		return p.intent.writeCharge(p.c, body, replayed)
	}
	return writeSaved(p.c, status, body, replayed)
}

// newPayment starts carrying one request through the protocol.
func (h *paymentHandlers) newPayment(c echo.Context) *payment {
	return &payment{h: h, c: c, id: pay.NewID("rq_")[:11], scope: callerScope(c.Request()), source: h.admission.presenter.clientIP(c.Request()),
		priority: h.admission.hasPriority(c.Request())}
}

func (p *payment) publish(kind live.Kind, status int, msg string) {
	p.publishEvent(live.Event{Kind: kind, Status: status, Message: msg})
}

// publishFault publishes a step that a fault switch caused.
func (p *payment) publishFault(kind live.Kind, status int, msg string) {
	p.publishEvent(live.Event{Kind: kind, Status: status, Message: msg, Fault: true})
}

// publishEvent fills in what the request knows (its id, key, order and
// fingerprint) and publishes e.
func (p *payment) publishEvent(e live.Event) {
	// A payment that gave its turn back while it waited takes it again
	// with its next step.
	p.slot.resume()
	defer p.idleAfter(e.Kind)
	e.Request, e.Scope, e.Key, e.OrderID, e.Amount, e.Fingerprint = p.id, p.scope, p.key, p.req.OrderID, p.req.AmountSatang, p.fp
	e.Server = p.server
	e.Source, e.Priority = p.source, p.priority
	if e.Kind == live.Received {
		if id := p.c.Request().Header.Get(pageAttemptHeader); validSessionID(id) {
			e.Attempt = id // the page will say whether the answer reached it (delivery.go)
		}
	}
	if e.Kind == live.GatewayCall {
		// The timeline draws the arrow to the gateway when the gateway is
		// called: a request step mode holds "before the gateway" has not
		// called it, so the hold comes first and the event after it. A
		// request the hold ended as stopped (shutdown) never calls it:
		// the caller checks Stopped next and releases its key, so no
		// arrow is drawn for it.
		p.holdAt(e.Kind)
		if p.step.Stopped() {
			return
		}
		p.h.timeline.Publish(e)
		return
	}
	p.h.timeline.Publish(e)
	if e.Status != 0 && step.At(e.Kind) == step.CheckAnswered {
		p.step.Answer = e.Status // what the step bar says it answers
	}
	p.holdAt(e.Kind) // step mode may hold the request here
}

// holdAt is step mode's hold at the checkpoint of kind, if any; a held
// payment gives its turn at the server's work back meanwhile.
func (p *payment) holdAt(kind live.Kind) {
	if !p.h.switches.steps.On() {
		return
	}
	p.slot.pause()
	p.h.switches.steps.At(p, kind)
	p.slot.resume()
}

// idleAfter gives the payment's turn back after a step that is followed
// by a wait costing the server nothing: the delay fault's, or the
// gateway's latency switch's. The next step takes it again.
func (p *payment) idleAfter(kind live.Kind) {
	if kind == live.Delayed || (kind == live.GatewayCall && p.gw.LatencyMS > 0) {
		p.slot.pause()
	}
}

// parse reads the key and the body and draws the request's faults. A bad
// request is refused before anything is saved, so the caller can correct
// it and retry with the same key. It reports ok=false when it has already
// answered (refused, dropped, or a sandbox intent created unconfirmed,
// which charges nothing); then its error is the answer's. note is
// added to the "received" event, so the lab can say which handler ran.
func (p *payment) parse(note string) (ok bool, err error) {
	c, r := p.c, p.c.Request()
	key, err := pay.ParseKey(r.Header.Values("Idempotency-Key"))
	if err == nil {
		p.key = key
		p.req, err = p.readBody(r)
	}
	p.publish(live.Received, 0, r.Method+" "+r.URL.Path+note+resentNote(c))
	if err == nil && p.step.Full() {
		err = pay.Errorf(pay.EUNAVAILABLE, "Step mode already holds %d requests on this server, its limit, and this one was not taken in: nothing was saved. Retry with the same key once the presenter has let some go.", p.h.switches.steps.Max)
	}
	if err != nil {
		return false, p.refuse(err)
	}
	p.fp = pay.Fingerprint(r.Method, p.path(), p.canonical())
	p.faults, p.gw = p.h.switches.draw()
	if p.faults.ConnectionNeverHappens {
		p.publishFault(live.Dropped, 0, "the connection was dropped before the server did anything")
		return false, dropConnection(c)
	}
	if p.intent != nil {
		if p.intent.decline {
			p.gw.Decline = true // the test card that is always declined
		}
		if p.intent.createsOnly() {
			return false, p.createUnconfirmed() // nothing to charge (stripe_confirm.go)
		}
	}
	return true, nil
}

// protocol is the request as the service takes it.
func (p *payment) protocol() *pay.Payment {
	r := p.c.Request()
	pp := &pay.Payment{
		Scope: p.scope, Key: p.key, Method: r.Method, Path: p.path(), Request: p.req,
		KnownFingerprint: p.fp, // computed by parse from the same method, path and request
		ChargeKey:        p.chargeKey,
		Faults:           p.faults,
		Gateway:          p.gateway(),
		Render:           func(err error) (int, []byte) { return problemBody(r, err) },
		Stopped:          p.step.Stopped,
	}
	pp.Observe = func(st pay.Step) {
		p.publishEvent(live.Event{Kind: stepEvents[st.Kind], Status: st.Status, Message: st.Detail, Charge: st.ChargeID, Fault: st.Fault})
		p.aimedAt(&pp.Faults) // a fault the presenter aimed at this request (step.go)
	}
	p.run = pp
	return pp
}

// gateway is the gateway as this request charges it: with the switches
// it drew, or nil, the service's own, when it drew none.
func (p *payment) gateway() pay.Gateway {
	if p.gw == (pay.GatewayFaults{}) {
		return nil
	}
	return p.h.books.gateway.With(p.gw)
}

// stepEvents are the timeline's names for the protocol's steps.
var stepEvents = map[pay.StepKind]live.Kind{
	pay.StepClaimed:      live.Claimed,
	pay.StepReplayed:     live.Replayed,
	pay.StepConflict:     live.Conflict,
	pay.StepMismatch:     live.Mismatch,
	pay.StepDelayed:      live.Delayed,
	pay.StepGatewayCall:  live.GatewayCall,
	pay.StepGatewayReply: live.GatewayReply,
	pay.StepCharged:      live.Charged,
	pay.StepCompleted:    live.Completed,
	pay.StepReleased:     live.Released,
	pay.StepCrashed:      live.Crashed,
	pay.StepRolledBack:   live.RolledBack,
	pay.StepFailed:       live.Rejected,
}

// answer turns the protocol's outcome into the HTTP response.
func (p *payment) answer(o pay.Outcome) error {
	c := p.c
	if p.h.switches.steps.On() {
		// The step bar says what a request held at "answered" will answer.
		p.step.Answer, p.step.Saved = o.Status, o.Kind == pay.Saved
		switch o.Kind {
		case pay.InProgress:
			p.step.Answer = http.StatusConflict
		case pay.Crashed:
			p.step.Answer = 0
		case pay.Unknown, pay.Failed:
			p.step.Answer, _ = problemBody(c.Request(), o.Err)
		}
	}
	if p.h.switches.steps.On() {
		p.slot.pause()
		p.h.switches.steps.Hold(p, step.CheckAnswered)
		p.slot.resume()
	}
	p.aimedAt(nil)
	switch o.Kind {
	case pay.Saved:
		if p.faults.ResponseLost {
			p.publishFault(live.ResponseLost, o.Status, "the work committed, but the connection closed before the response")
			return dropConnection(c)
		}
		return p.writeSaved(o.Status, o.Body, false)
	case pay.Replayed:
		return p.writeSaved(o.Status, o.Body, true)
	case pay.Crashed:
		return dropConnection(c)
	case pay.Unknown, pay.RolledBack:
		return p.answerUnknown(o)
	case pay.InProgress:
		return p.h.writeConflict(c, p.key, o)
	case pay.Released:
		if p.step.Stopped() {
			return writeProblem(c, p.stoppedBeforeGateway(stoppedKeyReleased))
		}
		if p.h.work.abandoned() {
			return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is stopping and ended this payment before it called the gateway: nothing was charged, and its key was released. Send it again with the same key once the server is back: it runs afresh."))
		}
	case pay.Failed:
		p.h.logf("payment %s: %v", p.id, o.Err)
	}
	return writeProblem(c, o.Err)
}

// refuse answers a request that failed parsing: nothing saved.
func (p *payment) refuse(err error) error {
	status, body := problemBody(p.c.Request(), err)
	p.publish(live.Rejected, status, pay.ErrorMessage(err))
	return sendProblem(p.c, status, body)
}

// fail answers an unexpected error without saving it.
func (p *payment) fail(err error) error {
	p.h.logf("payment %s: %v", p.id, err)
	status, body := problemBody(p.c.Request(), err)
	p.publish(live.Rejected, status, pay.ErrorMessage(err))
	return sendProblem(p.c, status, body)
}

// gatewayKey is the key passed on to the gateway for a scope's key.
func gatewayKey(scope, key string) string { return pay.GatewayKey(scope, key) }

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
