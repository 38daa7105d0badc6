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

// handleGetPayment is GET /v1/payments/:id: one of the caller's charges.
func (s *Server) handleGetPayment(c echo.Context) error {
	ch, err := s.db.GetCharge(c.Request().Context(), callerScope(c.Request()), c.Param("id"))
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
func (s *Server) handleListPayments(c echo.Context) error {
	order := c.QueryParam("order_id")
	if order == "" {
		return pay.Errorf(pay.EINVALID, "Give the order to look up: GET /v1/payments?order_id=A-1001.")
	}
	if len(order) > pay.MaxOrderIDLen {
		return pay.Errorf(pay.EINVALID, "order_id is longer than %d bytes.", pay.MaxOrderIDLen)
	}
	scope := callerScope(c.Request())
	l, err := s.lookUpOrder(c.Request().Context(), scope, order)
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
	s.lab.reconciliations.Add(1)
	// A look-up is how a client reconciles after a 500: the timeline and
	// the lab count it.
	e := live.Event{Kind: live.LookedUp, Scope: scope, Source: s.clientIP(c.Request()), OrderID: order, Status: http.StatusOK, Lookup: string(l.State),
		Message: fmt.Sprintf("order %s looked up: %s", order, lookupWords(l))}
	if len(l.Charges) > 0 {
		e.Charge = l.Charges[0].ID
	}
	s.hub.Publish(e)
	return c.JSON(http.StatusOK, l)
}

// lookUpOrder reads an order's record and says what state it is in, with
// the server's own timings: a stopped key is closed by the sweeper one
// sweep period after the lock timeout, and a running one may answer any
// moment within the gateway time-out. On a store of its own, the server
// knows which keys are at work: the others have stopped.
func (s *Server) lookUpOrder(ctx context.Context, scope, order string) (pay.OrderLookup, error) {
	rec, err := s.db.OrderRecord(ctx, scope, order)
	if err != nil {
		return pay.OrderLookup{}, err
	}
	return pay.LookUpOrder(order, rec, pay.LookupTimes{
		Now:     s.clock.Now(),
		Settle:  s.cfg.LockTimeout + s.cfg.SweepEvery,
		Work:    s.cfg.GatewayTimeout,
		Poll:    retryAfterSeconds * time.Second,
		Running: s.protocol.Running,
		// Step mode may hold a request of this server's at any step for
		// as long as the presenter takes: its key is not stopped.
		Alone: s.idleSweeps.private && !s.steps.On(),
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
