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

// stampRequestID gives every sandbox answer a Request-Id, as Stripe's do:
// the SDKs report it with every error.
func stampRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Request-Id", pay.NewID("req_"))
		return next(c)
	}
}

// handleCreateIntent is POST /v1/payment_intents. With confirm=true it is
// a payment, through the real protocol, answered as a PaymentIntent; with
// confirm=false (Stripe's default) it saves an intent that a confirm
// charges later (stripe_confirm.go).
func (h *paymentHandlers) handleCreateIntent(c echo.Context) error {
	slot, err := h.takeTurn(c)
	if err != nil {
		return err
	}
	defer slot.done()
	h.inflight.RLock()
	defer h.inflight.RUnlock()
	p := h.newPayment(c)
	p.slot = slot
	p.intent = &intentShape{}
	// The lab's mistaken handlers take it as they take /v1/payments: a
	// Stripe SDK meets the same mistakes a shop's own client does.
	return h.payInLabMode(p)
}

// handleGetIntent is GET /v1/payment_intents/{id}: an intent created
// unconfirmed as the books say it is now, or the succeeded intent of a
// create-and-confirm, which is the caller's charge of the same suffix.
func (h paymentLookups) handleGetIntent(c echo.Context) error {
	if id := c.Param("id"); strings.HasPrefix(id, intentIDPrefix) {
		in, err := h.orders.unconfirmedIntent(c.Request().Context(), callerScope(c.Request()), id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, in)
	}
	ch, err := intentCharge(c, h.books)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, intentOf(ch))
}

// intentCharge reads the charge an intent id names, in the caller's scope.
func intentCharge(c echo.Context, books chargeBooks) (pay.Charge, error) {
	id := c.Param("id")
	suffix, ok := strings.CutPrefix(id, "pi_")
	if !ok || suffix == "" || len(id) > 64 {
		return pay.Charge{}, pay.Errorf(pay.ENOTFOUND, "No such payment_intent: '%s'", pay.Truncate(id, 64))
	}
	ch, err := books.GetCharge(c.Request().Context(), callerScope(c.Request()), "ch_"+suffix)
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
func (h paymentLookups) handleSearchIntents(c echo.Context) error {
	m := searchQuery.FindStringSubmatch(c.QueryParam("query"))
	if m == nil {
		return pay.Errorf(pay.EINVALID, "The sandbox searches by order only: query=metadata['order_id']:'A-1001'.")
	}
	order := m[1]
	if len(order) > pay.MaxOrderIDLen {
		return pay.Errorf(pay.EINVALID, "order_id is longer than %d bytes.", pay.MaxOrderIDLen)
	}
	l, err := h.orders.lookUpOrder(c.Request().Context(), callerScope(c.Request()), order)
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
	PaymentMethod  string            `json:"payment_method,omitempty"`
	// LastPaymentError is why the last confirm charged nothing (a
	// declined card), until a confirm succeeds.
	LastPaymentError *intentError `json:"last_payment_error,omitempty"`
}

// intentError is a PaymentIntent's last_payment_error.
type intentError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// intentOf is the succeeded intent of a charge. An intent created
// unconfirmed charges under its own id; a create-and-confirm's id is the
// charge's with Stripe's prefix, so that GET finds the charge again.
func intentOf(ch pay.Charge) intent {
	id := "pi_" + strings.TrimPrefix(ch.ID, "ch_")
	if strings.HasPrefix(ch.Key, intentIDPrefix) {
		id = ch.Key
	}
	return intent{ID: id, Object: "payment_intent", Amount: ch.AmountSatang, AmountReceived: ch.AmountSatang,
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
	// confirm says the create charges now (confirm=true); card is the
	// payment method it names, if any.
	confirm bool
	card    string
	// confirming, when set, is the intent a confirm request confirms: the
	// request reads the confirm's form, its key and fingerprint belong to
	// the confirm's path, and its answers carry the intent's id.
	confirming *intent
}

// createsOnly says the request creates an intent without confirming it:
// nothing to charge.
func (sh *intentShape) createsOnly() bool { return sh.confirming == nil && !sh.confirm }

// path is the endpoint a sandbox request's key and fingerprint belong to.
func (sh *intentShape) path() string {
	if sh.confirming != nil {
		return intentsPath + "/" + sh.confirming.ID + "/confirm"
	}
	return intentsPath
}

// testCard reads one of Stripe's test payment methods: whether it is
// declined, or a 400 for any other.
func testCard(v string) (decline bool, err error) {
	switch v {
	case "pm_card_visa", "pm_card_mastercard", "pm_card_amex", "pm_card_th":
		return false, nil
	case "pm_card_chargeDeclined", "pm_card_visa_chargeDeclined":
		return true, nil
	}
	return false, pay.Errorf(pay.EINVALID, "payment_method must be one of Stripe's test cards: pm_card_visa, pm_card_mastercard, pm_card_amex, pm_card_th, or pm_card_chargeDeclined; not %q.", pay.Truncate(v, 40))
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
	if sh.confirming != nil && r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		mt, err = echo.MIMEApplicationForm, nil // a confirm with nothing to change (curl -X POST)
	}
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
	lines := make([]string, 0, len(form))
	for name, values := range form {
		if len(values) != 1 {
			return bad("The parameter %q appears %d times.", pay.Truncate(name, 40), len(values))
		}
		lines = append(lines, name+"="+values[0])
	}
	slices.Sort(lines)
	sh.canonical = strings.Join(lines, "\n")
	if sh.confirming != nil {
		return sh.readConfirm(form)
	}
	return sh.readCreate(form)
}

// readCreate reads the parameters of a create.
func (sh *intentShape) readCreate(form url.Values) (pay.PaymentRequest, error) {
	bad := func(format string, args ...any) (pay.PaymentRequest, error) {
		return pay.PaymentRequest{}, pay.Errorf(pay.EINVALID, format, args...)
	}
	var req pay.PaymentRequest
	var err error
	for name, values := range form {
		v := values[0]
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
			switch strings.ToLower(v) {
			case "true":
				sh.confirm = true
			case "false":
			default:
				return bad("confirm must be true or false, not %q.", pay.Truncate(v, 16))
			}
		case name == "payment_method":
			if sh.decline, err = testCard(v); err != nil {
				return pay.PaymentRequest{}, err
			}
			sh.card = v
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
	for _, need := range []string{"amount", "currency", "metadata[order_id]"} {
		if _, ok := form[need]; !ok {
			return bad("Missing required param: %s. The sandbox needs amount, currency=thb, and metadata[order_id], the order the payment is for; with confirm=true, a test payment_method too.", need)
		}
	}
	if sh.confirm && sh.card == "" {
		return bad("Missing required param: payment_method. A PaymentIntent confirmed as it is created needs one of Stripe's test cards, such as pm_card_visa.")
	}
	if err := pay.CheckOrderID(req.OrderID); err != nil {
		return pay.PaymentRequest{}, err
	}
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
	in := intentOf(pay.Charge{ID: saved.ID, OrderID: saved.OrderID, AmountSatang: saved.AmountSatang, CreatedAt: saved.CreatedAt})
	if sh.confirming != nil {
		in.ID, in.Created = sh.confirming.ID, sh.confirming.Created
	}
	in.PaymentMethod = sh.card
	return c.JSON(http.StatusOK, in)
}
