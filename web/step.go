package web

import (
	"context"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// Step mode (web/room/step) holds payments at checkpoints; this file is
// what a payment tells the stepper of itself (step.Request). Its JSON API
// is the board's handler group's (board_handlers.go), and the step bar the
// pages draw is web/board's.

// StepState and HeldRequest are the bodies of the step API.
type (
	StepState   = step.State
	HeldRequest = step.HeldRequest
)

// ID is the payment's id on the timeline.
func (p *payment) ID() string { return p.id }

// Step is the payment's passage through step mode.
func (p *payment) Step() *step.Progress { return &p.step }

// Describe is the payment as the step bar lists it.
func (p *payment) Describe() step.HeldRequest {
	return step.HeldRequest{Request: p.id, Click: pageClick(p.c.Request()), Key: p.key, OrderID: p.req.OrderID, Scope: p.scope, Amount: p.req.AmountSatang}
}

// Done is closed when the payment's client went away.
func (p *payment) Done() <-chan struct{} { return p.c.Request().Context().Done() }

// Publish publishes one of step mode's events for the payment.
func (p *payment) Publish(kind live.Kind, msg string) {
	p.publishEvent(live.Event{Kind: kind, Message: msg})
}

// PauseWork stops the deadline of p's claimed work, if it has one, until
// resume.
func (p *payment) PauseWork() (resume func()) {
	if p.run == nil {
		return func() {}
	}
	return p.run.PauseWork()
}

// RenewWork tells every sweeper that p's claimed work, if it has one, is
// alive for lease from now.
func (p *payment) RenewWork(lease time.Duration) {
	if p.run == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.h.work.base), pay.MaxClaimWait)
	defer cancel()
	if err := p.run.RenewWork(ctx, lease); err != nil {
		p.h.logf("step mode: renewing the work lease of %s: %v", p.id, err)
	}
}

// StopHeld is for shutdown: every request step mode holds on this server
// ends at once, those held before the gateway without charging
// (step.Stepper's StopHeld); it returns how many.
func (s *Server) StopHeld() int { return s.payments.steps.StopHeld() }

// stoppedBeforeGateway is the answer of a payment the server stopped
// while step mode held it before its gateway call (step.Progress.Stopped).
// key says what became of what the server had written for its key, as
// the mode that ran it knows: the answer states only that.
func (p *payment) stoppedBeforeGateway(key string) error {
	return pay.Errorf(pay.EUNAVAILABLE, "The server stopped while step mode held this payment, before it called the gateway: nobody let it go on, so nothing was charged and %s. Look the order up (GET /v1/payments?order_id=%s) or send it again with the same key once the server is back.", key, p.req.OrderID)
}

// What a stopped payment's answer says of its key (stoppedBeforeGateway).
const (
	stoppedKeyReleased = "its key was released"
	stoppedNoKey       = "this server, ignoring keys, had written nothing for it"
	stoppedLooseRow    = "the row it had inserted for its key was deleted"
)

// aimedAt applies the faults aimed at p: into the protocol's faults
// (while it runs), and into p's own (the lost response, which the HTTP
// side plays).
func (p *payment) aimedAt(f *pay.ServerFaults) {
	lost, crash := p.step.Aimed()
	if f != nil && crash {
		f.CrashMidway = true
	}
	if lost {
		p.faults.ResponseLost = true
	}
}
