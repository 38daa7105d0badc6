package web

import (
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
)

// A server knows it sent an answer, never that the answer arrived: a page
// that gave up waiting, or whose connection closed, never gets it. So the
// checkout page says, for each attempt it sent, whether the answer reached
// it, and the timeline draws the answer's arrow as arrived only then (and
// with a cross when the page says it never came).

// deliveryReport is the body of POST /api/delivery.
type deliveryReport struct {
	// Attempt is the Paytwice-Attempt header the page sent the payment with.
	Attempt string `json:"attempt"`
	// Received says whether the answer reached the page; Status is its
	// status when it did, Why what happened when it did not.
	Received bool   `json:"received"`
	Status   int    `json:"status,omitempty"`
	Why      string `json:"why,omitempty"`
}

// maxDeliveryWhy bounds the words a page may put on the timeline.
const maxDeliveryWhy = 80

// deliveryHandlers take the pages' word on their answers and put it on
// the timeline: all they need is where the caller is and where events go.
type deliveryHandlers struct {
	events   eventPublisher
	clientIP func(*http.Request) string
}

// eventPublisher is the part of the hub (web/live) that takes new events.
type eventPublisher interface {
	Publish(live.Event) live.Event
}

// routes registers the page's report.
func (h deliveryHandlers) routes(e *echo.Echo) {
	e.POST("/api/delivery", h.handleDelivery)
}

// handleDelivery is POST /api/delivery: a page's word on one attempt. It
// is published for the caller's scope, so a page speaks only for its own
// requests.
func (h deliveryHandlers) handleDelivery(c echo.Context) error {
	var d deliveryReport
	if err := decodeAdminJSON(c.Request(), &d); err != nil {
		return err
	}
	switch {
	case !validSessionID(d.Attempt):
		return pay.Errorf(pay.EINVALID, "attempt must be the Paytwice-Attempt the page sent its payment with.")
	case d.Received && (d.Status < 100 || d.Status > 599):
		return pay.Errorf(pay.EINVALID, "status must be the HTTP status the page received, 100 to 599.")
	case !d.Received && d.Why == "":
		return pay.Errorf(pay.EINVALID, "why must say what happened to an answer that did not arrive.")
	case len(d.Why) > maxDeliveryWhy:
		return pay.Errorf(pay.EINVALID, "why is longer than %d bytes.", maxDeliveryWhy)
	case strings.IndexFunc(d.Why, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) >= 0:
		return pay.Errorf(pay.EINVALID, "why must be plain printable text: no control or formatting characters.")
	}
	e := live.Event{Kind: live.Delivered, Attempt: d.Attempt, Scope: callerScope(c.Request()), Source: h.clientIP(c.Request()), Status: d.Status,
		Message: "the page received the answer (" + strconv.Itoa(d.Status) + ")"}
	if !d.Received {
		e.Kind, e.Status, e.Message = live.Undelivered, 0, d.Why
	}
	h.events.Publish(e)
	return c.NoContent(http.StatusNoContent)
}
