package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// handleGetPayment is GET /v1/payments/:id: one of the caller's charges.
func (s *Server) handleGetPayment(c echo.Context) error {
	ch, err := s.db.GetCharge(c.Request().Context(), callerScope(c.Request()), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ch)
}

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
	s.lab.reconciliations.Add(1)
	charges, err := s.db.ChargesByOrder(c.Request().Context(), callerScope(c.Request()), order)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"order_id": order, "charges": charges, "paid": len(charges) > 0})
}
