package web

import (
	"fmt"
	"net/http"

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

// handleListPayments is GET /v1/payments?order_id=…: the caller's charges
// for one order. After a 500 or a time-out, this is how a client finds out
// whether it already paid before it does anything else.
func (s *Server) handleListPayments(c echo.Context) error {
	order := c.QueryParam("order_id")
	if order == "" {
		return pay.Errorf(pay.EINVALID, "Give the order to look up: GET /v1/payments?order_id=A-1001.")
	}
	if len(order) > pay.MaxOrderIDLen {
		return pay.Errorf(pay.EINVALID, "order_id is longer than %d bytes.", pay.MaxOrderIDLen)
	}
	scope := callerScope(c.Request())
	charges, err := s.db.ChargesByOrder(c.Request().Context(), scope, order)
	if err != nil {
		return err
	}
	if c.Request().Header.Get(cardCheckHeader) != "" {
		// The checkout card checking what it says against the server,
		// after every answer: not a client reconciling, so neither the
		// timeline nor the lab counts it.
		return c.JSON(http.StatusOK, map[string]any{"order_id": order, "charges": charges, "paid": len(charges) > 0})
	}
	s.lab.reconciliations.Add(1)
	// A look-up is how a client reconciles after a 500: the timeline and
	// the lab count it.
	e := live.Event{Kind: live.LookedUp, Scope: scope, OrderID: order, Status: http.StatusOK,
		Message: fmt.Sprintf("order %s looked up: %d charge(s)", order, len(charges))}
	if len(charges) > 0 {
		e.Charge = charges[0].ID
	}
	s.hub.Publish(e)
	return c.JSON(http.StatusOK, map[string]any{"order_id": order, "charges": charges, "paid": len(charges) > 0})
}
