package web

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// The Stripe-shaped sandbox: the subset of Stripe's PaymentIntents API a
// checkout uses, so that an unmodified Stripe SDK pointed at paytwice runs
// a shop's payment code against lost responses, halfway failures and
// crashes. Every create goes through the same claim, gateway and fault
// switches as POST /v1/payments (it is a payment, on the timeline and the
// board like any other); only the body it reads and the shape it answers
// in are Stripe's. Stripe's idempotency rules are the protocol's own: the
// first answer is saved, 5xx included, and replayed with
// Idempotent-Replayed; another body with the key is an idempotency_error;
// a key still in use is a 409.

// intentsPath is the sandbox's endpoint.
const intentsPath = "/v1/payment_intents"

// sandboxCurrency is the one currency the sandbox takes: amounts are in
// satang, as everywhere in paytwice.
const sandboxCurrency = "thb"

// routeStripeSandbox adds the sandbox's routes.
func (s *Server) routeStripeSandbox(e *echo.Echo) {
	// Each route is wrapped on its own: a group with middleware would add
	// catch-all routes that turn a 405 into a 404.
	e.POST(intentsPath, stampRequestID(s.handleCreateIntent))
	e.GET(intentsPath+"/search", stampRequestID(s.handleSearchIntents))
	e.GET(intentsPath+"/:id", stampRequestID(s.handleGetIntent))
	e.POST(intentsPath+"/:id/confirm", stampRequestID(s.handleConfirmIntent))
}

// stampRequestID gives every sandbox answer a Request-Id, as Stripe's do:
// the SDKs report it with every error.
func stampRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Request-Id", pay.NewID("req_"))
		return next(c)
	}
}

// handleCreateIntent is POST /v1/payment_intents with confirm=true: a
// payment, through the real protocol, answered as a PaymentIntent.
func (s *Server) handleCreateIntent(c echo.Context) error {
	s.inflight.RLock()
	defer s.inflight.RUnlock()
	p := s.newPayment(c)
	p.intent = &intentShape{}
	if ok, err := p.parse(" (Stripe sandbox)"); !ok {
		return err
	}
	if p.intent.decline {
		p.gw.Decline = true // the test card that is always declined
	}
	return p.answer(s.protocol.Pay(c.Request().Context(), p.protocol()))
}

// handleGetIntent is GET /v1/payment_intents/{id}: a succeeded intent is
// the caller's charge of the same suffix.
func (s *Server) handleGetIntent(c echo.Context) error {
	ch, err := s.intentCharge(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, intentOf(ch))
}

// handleConfirmIntent is POST /v1/payment_intents/{id}/confirm. Every
// intent the sandbox holds was confirmed on creation and has succeeded,
// and Stripe refuses to confirm a succeeded intent again.
func (s *Server) handleConfirmIntent(c echo.Context) error {
	if _, err := s.intentCharge(c); err != nil {
		return err
	}
	return pay.Errorf(pay.EINVALID, "This PaymentIntent's status is succeeded: it was confirmed when it was created, and cannot be confirmed again.")
}

// intentCharge reads the charge an intent id names, in the caller's scope.
func (s *Server) intentCharge(c echo.Context) (pay.Charge, error) {
	id := c.Param("id")
	suffix, ok := strings.CutPrefix(id, "pi_")
	if !ok || suffix == "" || len(id) > 64 {
		return pay.Charge{}, pay.Errorf(pay.ENOTFOUND, "No such payment_intent: '%s'", pay.Truncate(id, 64))
	}
	ch, err := s.db.GetCharge(c.Request().Context(), callerScope(c.Request()), "ch_"+suffix)
	if pay.ErrorCode(err) == pay.ENOTFOUND {
		return ch, pay.Errorf(pay.ENOTFOUND, "No such payment_intent: '%s'", pay.Truncate(id, 64))
	}
	return ch, err
}

// searchQuery is the one search the sandbox answers: by the order id in
// the metadata, quoted as Stripe's query language quotes it.
var searchQuery = regexp.MustCompile(`^\s*metadata\[['"]order_id['"]\]\s*:\s*['"]([^'"]+)['"]\s*$`)

// handleSearchIntents is GET /v1/payment_intents/search?query=
// metadata['order_id']:'…': the order's look-up in Stripe's shape. A paid
// order lists its charges as succeeded intents; a key whose outcome is not
// known yet lists as a processing intent, with Retry-After, so that a shop
// never reads "no payment" while one may be under way.
func (s *Server) handleSearchIntents(c echo.Context) error {
	m := searchQuery.FindStringSubmatch(c.QueryParam("query"))
	if m == nil {
		return pay.Errorf(pay.EINVALID, "The sandbox searches by order only: query=metadata['order_id']:'A-1001'.")
	}
	order := m[1]
	if len(order) > pay.MaxOrderIDLen {
		return pay.Errorf(pay.EINVALID, "order_id is longer than %d bytes.", pay.MaxOrderIDLen)
	}
	l, err := s.lookUpOrder(c.Request().Context(), callerScope(c.Request()), order)
	if err != nil {
		return err
	}
	data := []intent{}
	for _, ch := range l.Charges {
		data = append(data, intentOf(ch.Charge))
	}
	if l.State == pay.OrderPending {
		c.Response().Header().Set("Retry-After", fmt.Sprint(l.RetryAfterSeconds))
		for _, k := range l.Pending {
			sum := sha256.Sum256([]byte(k.Key))
			data = append(data, intent{ID: "pi_key_" + hex.EncodeToString(sum[:12]), Object: "payment_intent", Currency: sandboxCurrency,
				Status: "processing", Created: k.LockedAt.Unix(), Metadata: map[string]string{"order_id": order}, CaptureMethod: "automatic"})
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"object": "search_result", "url": intentsPath + "/search", "has_more": false,
		"next_page": nil, "data": data})
}

// intent is a PaymentIntent, in the fields Stripe's SDKs read.
type intent struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountReceived int64             `json:"amount_received"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	LatestCharge   string            `json:"latest_charge,omitempty"`
	Metadata       map[string]string `json:"metadata"`
	Created        int64             `json:"created"`
	CaptureMethod  string            `json:"capture_method"`
	Livemode       bool              `json:"livemode"`
}

// intentOf is the succeeded intent of a charge: its id is the charge's
// with Stripe's prefix, so that GET finds the charge again.
func intentOf(ch pay.Charge) intent {
	return intent{ID: "pi_" + strings.TrimPrefix(ch.ID, "ch_"), Object: "payment_intent", Amount: ch.AmountSatang, AmountReceived: ch.AmountSatang,
		Currency: sandboxCurrency, Status: "succeeded", LatestCharge: ch.ID, Metadata: map[string]string{"order_id": ch.OrderID},
		Created: ch.CreatedAt.Unix(), CaptureMethod: "automatic"}
}

// intentShape is what a sandbox request reads and answers differently
// from POST /v1/payments.
type intentShape struct {
	// canonical is the form's parameters, sorted: the fingerprint covers
	// all of them, so any other body with the key is an idempotency_error.
	canonical string
	// decline says the payment method is a test card that is declined.
	decline bool
}

// read parses the form a Stripe SDK sends to create a PaymentIntent:
// amount (satang), currency (thb), confirm (true, or True as
// stripe-python writes it), payment_method (a test card), metadata[…]
// with order_id, and the few other parameters a checkout sends. The body
// may come chunked, without Content-Length (stripe-go).
func (sh *intentShape) read(r *http.Request) (pay.PaymentRequest, error) {
	bad := func(format string, args ...any) (pay.PaymentRequest, error) {
		return pay.PaymentRequest{}, pay.Errorf(pay.EINVALID, format, args...)
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != echo.MIMEApplicationForm {
		return pay.PaymentRequest{}, pay.Errorf(pay.EMEDIATYPE, "Send the parameters as a form (application/x-www-form-urlencoded), as Stripe's SDKs do.")
	}
	body, err := readAll(io.LimitReader(r.Body, pay.MaxBodyBytes+1), r.ContentLength)
	if err != nil {
		return bad("The body could not be read.")
	}
	if len(body) > pay.MaxBodyBytes {
		return pay.PaymentRequest{}, pay.Errorf(pay.ETOOLARGE, "The body is larger than %d bytes.", pay.MaxBodyBytes)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return bad("The form is not valid URL encoding.")
	}
	var req pay.PaymentRequest
	lines := make([]string, 0, len(form))
	for name, values := range form {
		if len(values) != 1 {
			return bad("The parameter %q appears %d times.", pay.Truncate(name, 40), len(values))
		}
		v := values[0]
		lines = append(lines, name+"="+v)
		switch {
		case name == "amount":
			if req.AmountSatang, err = pay.ParseAmountSatang(v); err != nil {
				return bad("amount must be a whole number of satang from 1 to %d (1 baht = 100 satang), not %q.", pay.MaxAmountSatang, pay.Truncate(v, 24))
			}
		case name == "currency":
			if !strings.EqualFold(v, sandboxCurrency) {
				return bad("The sandbox takes currency=thb only (amounts are in satang), not %q.", pay.Truncate(v, 16))
			}
		case name == "confirm":
			if !strings.EqualFold(v, "true") {
				return bad("The sandbox confirms a PaymentIntent as it creates it: send confirm=true with a payment_method.")
			}
		case name == "payment_method":
			switch v {
			case "pm_card_visa", "pm_card_mastercard", "pm_card_amex", "pm_card_th":
			case "pm_card_chargeDeclined", "pm_card_visa_chargeDeclined":
				sh.decline = true
			default:
				return bad("payment_method must be one of Stripe's test cards: pm_card_visa, pm_card_mastercard, pm_card_amex, pm_card_th, or pm_card_chargeDeclined; not %q.", pay.Truncate(v, 40))
			}
		case name == "metadata[order_id]":
			req.OrderID = v
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]"),
			name == "description", name == "receipt_email", name == "statement_descriptor_suffix",
			name == "payment_method_types[0]", name == "automatic_payment_methods[enabled]", name == "automatic_payment_methods[allow_redirects]":
			// Kept in the fingerprint; nothing else to do with them here.
		default:
			return bad("Received unknown parameter: %s", pay.Truncate(name, 60))
		}
	}
	for _, need := range []string{"amount", "currency", "confirm", "payment_method", "metadata[order_id]"} {
		if _, ok := form[need]; !ok {
			return bad("Missing required param: %s. The sandbox needs amount, currency=thb, confirm=true, a test payment_method, and metadata[order_id], the order the payment is for.", need)
		}
	}
	if err := pay.CheckOrderID(req.OrderID); err != nil {
		return pay.PaymentRequest{}, err
	}
	slices.Sort(lines)
	sh.canonical = strings.Join(lines, "\n")
	return req, nil
}

// writeCharge sends a saved 201 (the charge's body) as the PaymentIntent
// Stripe answers with 200.
func (sh *intentShape) writeCharge(c echo.Context, body []byte, replayed bool) error {
	var saved struct {
		ID           string    `json:"charge_id"`
		OrderID      string    `json:"order_id"`
		AmountSatang int64     `json:"amount_satang"`
		CreatedAt    time.Time `json:"created_at"`
	}
	if err := json.Unmarshal(body, &saved); err != nil {
		return err
	}
	h := c.Response().Header()
	if replayed {
		h.Set("Idempotent-Replayed", "true")
		h.Set("Stripe-Should-Retry", "false")
	}
	return c.JSON(http.StatusOK, intentOf(pay.Charge{ID: saved.ID, OrderID: saved.OrderID, AmountSatang: saved.AmountSatang, CreatedAt: saved.CreatedAt}))
}
