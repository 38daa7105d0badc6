package web

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// paymentHandlers take payments: POST /v1/payments and the Stripe-shaped
// sandbox's create and confirm (payments.go, stripe_sandbox.go,
// stripe_confirm.go), in the lab's mode when one is on (lab_naive.go). A
// payment (type payment) carries one request through them. They hold the
// three ideas a payment meets, each a small type of its own: the protocol
// and its stores (paymentBooks), what the room has switched on
// (paymentSwitches) and the timeline it is told on; and what decides
// whether and when it runs: its turn (admission), a reset (inflight) and
// the server's life (paymentWork).
type paymentHandlers struct {
	books    *paymentBooks
	switches *paymentSwitches
	timeline timeline
	// admission gives the payment its turn at the server's work and
	// names its address and priority (admission.go).
	admission *admission
	// fromLabChecker says the lab page's checker sent the request: it
	// goes first, as the presenter's do (lab_check.go).
	fromLabChecker func(*http.Request) bool
	// inflight is held shared by every payment and the sweeper, and
	// exclusively by a reset, which so waits for them (admin.go).
	inflight *sync.RWMutex
	work     paymentWork
	times    paymentTimes
	// sleep waits during the delay fault and the lab's pauses; tests may
	// replace the server's.
	sleep func(ctx context.Context, d time.Duration) error
	logf  func(format string, args ...any)
}

// routes registers the handlers that take a payment. The look-ups are
// paymentLookups' (payments_get.go).
func (h *paymentHandlers) routes(e *echo.Echo) {
	e.POST(paymentsPath, h.handleCreatePayment)
	// Each route is wrapped on its own: a group with middleware would add
	// catch-all routes that turn a 405 into a 404.
	e.POST(intentsPath, stampRequestID(h.handleCreateIntent))
	e.POST(intentsPath+"/:id/confirm", stampRequestID(h.handleConfirmIntent))
}

// paymentBooks are the protocol and the stores a payment reads and
// writes: the payments database, the gateway, and the counts that follow
// what is written (the idle sweeper's, the lab's tally).
type paymentBooks struct {
	// protocol runs the payment protocol (pay/service.go); payments.go
	// adapts it to HTTP.
	protocol *pay.Service
	store    paymentStore
	gateway  chargingGateway
	// sweeps hears of every key a lab handler starts outside the
	// protocol (idle.go).
	sweeps *idleSweeps
	// tally counts the lab's charge tables as they are written
	// (lab_tally.go).
	tally *labTally
	// now is the room's clock, which the charges are dated by.
	now func() time.Time
}

// paymentStore is what a payment needs of the payments database: the
// protocol's storage, the look-ups of a key, an order and a charge, and
// the lab's deliberately unguarded writes.
type paymentStore interface {
	pay.Storage
	chargeBooks
	GetKey(ctx context.Context, scope, key string) (pay.KeyRow, error)
	OrderRecord(ctx context.Context, scope, orderID string) (pay.OrderRecord, error)
	LabInsertKeyUnguarded(ctx context.Context, c pay.ClaimRequest) (string, error)
	LabRecordCharge(ctx context.Context, ch pay.Charge) error
	LabLooseFindKey(ctx context.Context, scope, key string) (pay.LabLooseKey, bool, error)
	LabLooseInsertKey(ctx context.Context, c pay.ClaimRequest, request string) (rowID int64, rows int, err error)
	LabLooseComplete(ctx context.Context, rowID int64, status int, body []byte, ch *pay.Charge, request string) (charges int, err error)
	LabLooseRelease(ctx context.Context, rowID int64) error
}

// chargingGateway is the simulated gateway as a payment charges it, with
// the switches it drew (sim.Gateway).
type chargingGateway interface {
	ChargeWith(ctx context.Context, sw pay.GatewayFaults, key, orderID string, amountSatang int64) (pay.GatewayCharge, error)
	With(sw pay.GatewayFaults) pay.Gateway
}

// paymentSwitches are what the room has switched on for a payment: the
// fault switches, the lab's mode and its counts, and step mode.
type paymentSwitches struct {
	// draw returns the faults one request runs with (faults.go).
	draw func() (pay.ServerFaults, pay.GatewayFaults)
	// lab is the common-mistakes lab: its mode, its locks and its counts
	// (lab.go).
	lab *mistakesLab
	// steps holds payments in step mode (web/room/step; step.go).
	steps *step.Stepper
	// shared says the database is shared with other servers: the lock in
	// memory then runs on real servers, not the two inside this process.
	shared bool
}

// timeline is where a payment tells its steps (the live hub).
type timeline interface {
	Publish(e live.Event) live.Event
}

// paymentWork is what a payment's work runs under.
type paymentWork struct {
	// base outlives requests and ends at shutdown: a held payment's
	// lease is renewed under it.
	base context.Context
	// ctx is base, ended early by AbandonWork when a shutdown will wait
	// no longer.
	ctx context.Context
}

// abandoned reports whether AbandonWork was called.
func (w paymentWork) abandoned() bool { return errors.Is(context.Cause(w.ctx), errWorkAbandoned) }

// paymentTimes are the server's timings as a payment's answers state
// them.
type paymentTimes struct {
	// work bounds one request's work after its claim (GatewayTimeout).
	work time.Duration
	// settle is how long a started key whose request has stopped may stay
	// started: the sweeper closes it at the latest one sweep period after
	// the lock timeout.
	settle time.Duration
}

// paymentTimes are cfg's timings for the payments.
func (c Config) paymentTimes() paymentTimes {
	return paymentTimes{work: c.GatewayTimeout, settle: c.LockTimeout + c.SweepEvery}
}

// settleSeconds is settle in whole seconds, rounded up.
func (t paymentTimes) settleSeconds() int64 {
	return int64((t.settle + time.Second - 1) / time.Second)
}

// paymentHandlers builds the payments' group from the parts of the server
// it uses.
func (s *Server) paymentHandlers() *paymentHandlers {
	return &paymentHandlers{
		books: &paymentBooks{protocol: s.payments.protocol, store: s.db, gateway: s.world.gateway, sweeps: s.payments.idleSweeps,
			tally: s.lab.tally, now: s.clock.Now},
		switches:       &paymentSwitches{draw: s.faultSwitches().drawFaults, lab: s.lab, steps: s.payments.steps, shared: s.servers.peers.Shared()},
		timeline:       s.hub,
		admission:      s.admission,
		fromLabChecker: s.lab.check.fromLabChecker,
		inflight:       &s.payments.inflight,
		work:           paymentWork{base: s.life.base, ctx: s.life.work},
		times:          s.cfg.paymentTimes(),
		sleep:          func(ctx context.Context, d time.Duration) error { return s.payments.sleep(ctx, d) },
		logf:           s.logf,
	}
}
