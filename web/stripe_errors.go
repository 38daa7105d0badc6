package web

import (
	"encoding/json"
	"net/http"
	"strings"

	"paytwice/pay"
)

// Stripe's SDKs read errors in Stripe's own shape,
// {"error":{"type","code","message","doc_url"}}, with the statuses Stripe
// uses; given a problem+json body, some of them (stripe-node) take a 4xx
// for a success. So a caller that identifies itself as a Stripe SDK gets
// that shape, and everyone else RFC 9457 problem+json. The answer saved
// on a key is kept as problem+json and translated on the way out, so a
// replay reads the same to either kind of client.

// stripeCaller reports whether the request comes from one of Stripe's
// SDKs, which send both headers on every request.
func stripeCaller(r *http.Request) bool {
	return r.Header.Get("Stripe-Version") != "" || r.Header.Get("X-Stripe-Client-User-Agent") != "" ||
		strings.HasPrefix(r.URL.Path, intentsPath) // the Stripe-shaped sandbox answers in Stripe's shape only
}

// StripeErrorMapping is how one problem type reads to a Stripe SDK.
type StripeErrorMapping struct {
	Status int    // the status Stripe answers such an error with
	Type   string // Stripe's error type
	Code   string // Stripe's code where Stripe has one, else the problem's own
}

// stripeErrorTypes are the only error types Stripe's SDKs know.
const (
	stripeAPIError            = "api_error"
	stripeCardError           = "card_error"
	stripeIdempotencyError    = "idempotency_error"
	stripeInvalidRequestError = "invalid_request_error"
)

// StripeErrors maps every problem type to Stripe's shape (the README's
// table is this one). Stripe answers a key reused with other parameters
// with 400 and a key still in use with 409, both idempotency_error;
// a declined card is a 402 card_error; its own failures are api_error.
var StripeErrors = map[pay.Code]StripeErrorMapping{
	pay.EMISSINGKEY:     {http.StatusBadRequest, stripeInvalidRequestError, "idempotency_key_missing"},
	pay.EINVALIDKEY:     {http.StatusBadRequest, stripeInvalidRequestError, "idempotency_key_invalid"},
	pay.EINVALID:        {http.StatusBadRequest, stripeInvalidRequestError, "parameter_invalid"},
	pay.ETOOLARGE:       {http.StatusBadRequest, stripeInvalidRequestError, "body_too_large"},
	pay.EMEDIATYPE:      {http.StatusBadRequest, stripeInvalidRequestError, "unsupported_media_type"},
	pay.ECONFLICT:       {http.StatusConflict, stripeIdempotencyError, "idempotency_key_in_use"},
	pay.EMISMATCH:       {http.StatusBadRequest, stripeIdempotencyError, "idempotency_key_reused"},
	pay.EMETHOD:         {http.StatusMethodNotAllowed, stripeInvalidRequestError, "method_not_allowed"},
	pay.ENOTFOUND:       {http.StatusNotFound, stripeInvalidRequestError, "resource_missing"},
	pay.EDECLINED:       {http.StatusPaymentRequired, stripeCardError, "card_declined"},
	pay.EGATEWAY:        {http.StatusBadGateway, stripeAPIError, "gateway_error"},
	pay.ETIMEOUT:        {http.StatusGatewayTimeout, stripeAPIError, "gateway_timeout"},
	pay.EINTERNAL:       {http.StatusInternalServerError, stripeAPIError, "server_error"},
	pay.EUNAUTHORIZED:   {http.StatusUnauthorized, stripeInvalidRequestError, "unauthorized"},
	pay.ETOOMANYGUESSES: {http.StatusTooManyRequests, stripeInvalidRequestError, "rate_limit"},
	pay.EFORBIDDEN:      {http.StatusForbidden, stripeInvalidRequestError, "forbidden"},
	pay.EBUSY:           {http.StatusTooManyRequests, stripeInvalidRequestError, "rate_limit"},
	pay.EUNAVAILABLE:    {http.StatusServiceUnavailable, stripeAPIError, "unavailable"},
}

// stripeError turns a problem+json body into Stripe's error object and
// status. The problem type's slug names the mapping; a body that is not
// one of ours keeps its status and becomes an api_error.
func stripeError(status int, problemBody []byte) (int, []byte) {
	var p Problem
	_ = json.Unmarshal(problemBody, &p)
	code := pay.Code(p.Type[strings.LastIndex(p.Type, "/")+1:])
	m, ok := StripeErrors[code]
	if !ok {
		m = StripeErrorMapping{Status: status, Type: stripeAPIError, Code: "server_error"}
	}
	message := p.Detail
	if message == "" {
		message = http.StatusText(status)
	}
	type stripeErr struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
		DocURL  string `json:"doc_url,omitempty"`
	}
	e := stripeErr{Type: m.Type, Code: m.Code, Message: message}
	if ok {
		e.DocURL = problemURL(code)
	}
	b, _ := json.Marshal(struct {
		Error stripeErr `json:"error"`
	}{e})
	return m.Status, b
}
