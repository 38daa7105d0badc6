package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
)

// paymentLookups serve what a client reads of its payments: one charge,
// an order's look-up, and the same two in the Stripe sandbox's shape
// (stripe_sandbox.go). They translate HTTP; what an order's state is, is
// pay.LookUpOrder's, with the server's timings (lookUpOrder).
type paymentLookups struct {
	books  chargeBooks
	orders orderLookup
	events eventPublisher
	// clientIP names the caller on the timeline; reconciled counts a
	// client's look-up for the lab.
	clientIP   func(*http.Request) string
	reconciled func()
}

// chargeBooks is the part of the store the look-ups read directly.
type chargeBooks interface {
	GetCharge(ctx context.Context, scope, id string) (pay.Charge, error)
}

// orderLookup is what the look-ups ask of the server: an order's state
// by the server's timings, and an intent created unconfirmed as the books
// say it is now. The server is one (below, stripe_confirm.go).
type orderLookup interface {
	lookUpOrder(ctx context.Context, scope, order string) (pay.OrderLookup, error)
	unconfirmedIntent(ctx context.Context, scope, id string) (intent, error)
}

// routes registers the look-ups, of /v1/payments and of the sandbox.
func (h paymentLookups) routes(e *echo.Echo) {
	e.GET(paymentsPath, h.handleListPayments)
	e.GET(paymentsPath+"/:id", h.handleGetPayment)
	e.GET(intentsPath+"/search", stampRequestID(h.handleSearchIntents))
	e.GET(intentsPath+"/:id", stampRequestID(h.handleGetIntent))
}

// handleGetPayment is GET /v1/payments/:id: one of the caller's charges.
func (h paymentLookups) handleGetPayment(c echo.Context) error {
	ch, err := h.books.GetCharge(c.Request().Context(), callerScope(c.Request()), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ch)
}

// cardCheckHeader marks a look-up the checkout page makes on its own to
// keep its card true (static/pay.js).
const cardCheckHeader = "Paytwice-Card-Check"

// handleListPayments is GET /v1/payments?order_id=…: what the server
// knows of one of the caller's orders (pay.LookUpOrder): paid, with its
// charges; pending, with when to look again (Retry-After, and
// retry_after_seconds in the body); not charged, and why; or never seen.
// After a 500 or a time-out, this is how a client finds out what happened
// before it does anything else, and it is never told "not paid" while a
// key for the order is claimed and its outcome unknown.
func (h paymentLookups) handleListPayments(c echo.Context) error {
	order := c.QueryParam("order_id")
	if order == "" {
		return pay.Errorf(pay.EINVALID, "Give the order to look up: GET /v1/payments?order_id=A-1001.")
	}
	if len(order) > pay.MaxOrderIDLen {
		return pay.Errorf(pay.EINVALID, "order_id is longer than %d bytes.", pay.MaxOrderIDLen)
	}
	scope := callerScope(c.Request())
	l, err := h.orders.lookUpOrder(c.Request().Context(), scope, order)
	if err != nil {
		return err
	}
	if l.State == pay.OrderPending {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(l.RetryAfterSeconds, 10))
	}
	if c.Request().Header.Get(cardCheckHeader) != "" {
		// The checkout card checking what it says against the server,
		// after every answer: not a client reconciling, so neither the
		// timeline nor the lab counts it.
		return c.JSON(http.StatusOK, l)
	}
	h.reconciled()
	// A look-up is how a client reconciles after a 500: the timeline and
	// the lab count it.
	e := live.Event{Kind: live.LookedUp, Scope: scope, Source: h.clientIP(c.Request()), OrderID: order, Status: http.StatusOK, Lookup: string(l.State),
		Message: fmt.Sprintf("order %s looked up: %s", order, lookupWords(l))}
	if len(l.Charges) > 0 {
		e.Charge = l.Charges[0].ID
	}
	h.events.Publish(e)
	return c.JSON(http.StatusOK, l)
}

// lookUpOrder reads an order's record and says what state it is in, with
// the server's own timings: a stopped key is closed by the sweeper one
// sweep period after the lock timeout, and a running one may answer any
// moment within the gateway time-out. On a store of its own, the server
// knows which keys are at work: the others have stopped.
func (h *paymentHandlers) lookUpOrder(ctx context.Context, scope, order string) (pay.OrderLookup, error) {
	rec, err := h.books.store.OrderRecord(ctx, scope, order)
	if err != nil {
		return pay.OrderLookup{}, err
	}
	return pay.LookUpOrder(order, rec, pay.LookupTimes{
		Now:     h.books.now(),
		Settle:  h.times.settle,
		Work:    h.times.work,
		Poll:    retryAfterSeconds * time.Second,
		Running: h.books.protocol.Running,
		// Step mode may hold a request of this server's at any step for
		// as long as the presenter takes: its key is not stopped.
		Alone: h.books.sweeps.private && !h.switches.steps.On(),
	}), nil
}

// lookupWords is a look-up's answer as the timeline says it.
func lookupWords(l pay.OrderLookup) string {
	switch l.State {
	case pay.OrderPaid:
		return fmt.Sprintf("paid, %d charge(s)", len(l.Charges))
	case pay.OrderPending:
		return fmt.Sprintf("pending, outcome not known yet (look again in %d s)", l.RetryAfterSeconds)
	case pay.OrderNotCharged:
		return "not charged (" + strings.ReplaceAll(string(l.NotCharged.Reason), "_", " ") + ")"
	}
	return "never seen"
}
