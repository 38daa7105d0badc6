package web

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// ProblemType describes one kind of error the API returns. Its slug is
// the pay.Code, and /problems/<slug> serves the explanation page, so the
// type URI in every problem+json body is a link a learner can open.
type ProblemType struct {
	Code    pay.Code
	Status  int
	Title   string
	Explain string // what happened, for the explanation page
	Fix     string // what the client should do
	Saved   bool   // whether the response is saved on the key and replayed
}

// Problems lists every problem type, in the order the pages show them.
var Problems = []ProblemType{
	{pay.EMISSINGKEY, http.StatusBadRequest, "Idempotency-Key header missing",
		"A payment endpoint cannot tell a retry from a new payment unless every request names its action. Without a key the server would have to execute whatever arrives, and a double-click would charge twice.",
		"Create one random key (a UUID) when the customer starts paying and send it in the Idempotency-Key header on the request and on every retry of it.", false},
	{pay.EINVALIDKEY, http.StatusBadRequest, "Idempotency-Key header malformed",
		"The key must be 1 to 255 visible ASCII characters, sent once, either bare (abc) or as a quoted structured-field string (\"abc\", with \\\" and \\\\ as the only escapes). Control characters, spaces, Unicode, an unclosed quote or two header lines are refused.",
		"Fix the header and send the request again with the same key: nothing was saved.", false},
	{pay.EINVALID, http.StatusBadRequest, "The request is invalid",
		"A payment body must have exactly order_id and amount_satang, each once, as a JSON object or a form. order_id is 1 to 64 bytes of UTF-8 text without control characters; amount_satang is a whole number of satang from 1 to 10,000,000,000 (100 satang = 1 baht): money is never a float. Query parameters and settings must be in range; the detail names the field that is not.",
		"Correct the field the detail names and send it again. Nothing was saved, so a payment can reuse the same key.", false},
	{pay.ETOOLARGE, http.StatusRequestEntityTooLarge, "The request body is too large",
		"A payment body is a few dozen bytes; this one was over the 16 KiB limit and was not read.",
		"Send a smaller body. Nothing was saved.", false},
	{pay.EMEDIATYPE, http.StatusUnsupportedMediaType, "The media type of the body is not accepted",
		"POST /v1/payments reads a JSON body (application/json) or a form (application/x-www-form-urlencoded, as Stripe's SDKs send it); the two are read as strictly, and a form and its JSON twin are the same request. The other APIs read JSON only.",
		"Send the header Content-Type: application/json with a JSON body, or a form to /v1/payments. Nothing was saved.", false},
	{pay.ECONFLICT, http.StatusConflict, "A request with this key is still running",
		"The first request with this idempotency key has claimed it and has not finished. Running this one too could charge twice, so it was turned away. If the first request is no longer running (it crashed, or its gateway never answered), the answer says so, and only the sweeper can close the key: its Retry-After is the time until the sweeper can, the lock timeout plus one sweep period after the claim.",
		"Wait at least the Retry-After seconds, then retry with the same key and the same body. This answer is not saved.", false},
	{pay.EMISMATCH, http.StatusUnprocessableEntity, "This key was used for a different request",
		"An idempotency key belongs to one action. This key was first used with another body (or another method or path), so replaying that response would be wrong and running this one would break the promise of the key. The original is untouched.",
		"Do not retry this: it will fail every time. A new payment needs a new key.", false},
	{pay.EMETHOD, http.StatusMethodNotAllowed, "Method not allowed",
		"The path exists but does not take this HTTP method.",
		"Check the API table in the README for the methods each path takes.", false},
	{pay.ENOTFOUND, http.StatusNotFound, "Not found",
		"There is no such object in your scope. Each browser session and each bearer token sees only its own payments.",
		"Check the id, and that you are sending the same Authorization header or cookie as when you paid.", false},
	{pay.EDECLINED, http.StatusPaymentRequired, "The payment was declined",
		"The payment gateway refused the charge. That is a definite outcome, so it is saved on the key and every retry with the same key gets the same 402.",
		"Do not retry with the same key; ask the customer for another card and start a new payment with a new key.", true},
	{pay.EGATEWAY, http.StatusBadGateway, "The payment gateway failed",
		"The payment gateway answered with an error before charging. That answer is definite, so it is saved on the key and every retry with the same key gets the same 502.",
		"Do not switch to a new key; try again later as a new payment once the gateway is healthy, after checking the order with GET /v1/payments?order_id=….", true},
	{pay.ETIMEOUT, http.StatusGatewayTimeout, "The payment gateway did not answer",
		"The gateway was called but its answer never came, so nobody knows yet whether money moved. Nothing is saved: the key stays started, retries get 409, and after the lock timeout the sweeper asks the gateway what happened and closes the key either way.",
		"Retry with the same key, waiting as Retry-After says; never switch to a new key. Look the order up with GET /v1/payments?order_id=… to reconcile.", false},
	{pay.EINTERNAL, http.StatusInternalServerError, "The server failed",
		"The server failed after it had started executing the request. Like Stripe, paytwice saves that 500 on the key: a retry with the same key gets the same 500, because the charge may have happened.",
		"Do not switch to a new key. Look the payment up by order id (GET /v1/payments?order_id=…) to reconcile before paying again.", true},
	{pay.EUNAUTHORIZED, http.StatusUnauthorized, "The Authorization header names no caller",
		"Keys and charges belong to a caller: a Bearer token (any token is its own demo account), else the browser's session cookie, else the shared anonymous scope. The header was present but was not a Bearer credential (the scheme in any case, one or more spaces, then a token of visible ASCII characters), so the request was not run in anybody's scope, least of all the shared one, where another caller could replay its answer.",
		"Send \"Authorization: Bearer <token>\" with the same token on every retry, or no Authorization header. Nothing was saved.", false},
	{pay.ETOOMANYGUESSES, http.StatusTooManyRequests, "Too many wrong presenter tokens",
		"Each address may send five wrong presenter tokens in a row; after that, one more is looked at every ten seconds, so a token cannot be guessed by trying. Until then even the right token is not looked at.",
		"Wait the Retry-After seconds, then use the presenter's link or header with the right token.", false},
	{pay.EFORBIDDEN, http.StatusForbidden, "Not allowed",
		"Only the presenter may change the switches in this classroom.",
		"Open the board with the presenter's link, or ask the presenter.", false},
	{pay.EBUSY, http.StatusTooManyRequests, "Too many requests",
		"Simulations are heavy, so the server runs one at a time with a short queue behind it, and payments always come first. The queue was full.",
		"Wait the Retry-After seconds and ask again, or ask for a smaller run. Identical runs are answered from a cache.", false},
	{pay.EUNAVAILABLE, http.StatusServiceUnavailable, "Unavailable",
		"The server is shutting down or could not take the request.",
		"Retry with the same key after a short wait.", false},
}

var problemsByCode = func() map[pay.Code]ProblemType {
	m := make(map[pay.Code]ProblemType, len(Problems))
	for _, p := range Problems {
		m[p.Code] = p
	}
	return m
}()

// problemFor returns the problem type of a code, falling back to 500.
func problemFor(code pay.Code) ProblemType {
	if p, ok := problemsByCode[code]; ok {
		return p
	}
	return problemsByCode[pay.EINTERNAL]
}

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	// DifferingFields, on a 422 key-reused, names the parts of this
	// request that differ from the one the key first saw (pay.Differs).
	DifferingFields []string `json:"differing_fields,omitempty"`
}

// problemBody builds the problem+json body for err.
func problemBody(r *http.Request, err error) (int, []byte) {
	p := problemFor(pay.ErrorCode(err))
	b, _ := json.Marshal(Problem{
		Type:     problemURL(p.Code),
		Title:    p.Title,
		Status:   p.Status,
		Detail:   pay.ErrorMessage(err),
		Instance: r.URL.Path,

		DifferingFields: pay.ErrorDiffers(err),
	})
	return p.Status, b
}

// problemURL is a problem type's URI: the path of its explanation page,
// a relative reference that a client resolves against the address it
// used. It is an identifier, so it is the same whatever Host a client
// sent, and no client can have a host of its choosing saved into a body
// that others are replayed.
func problemURL(code pay.Code) string {
	return "/problems/" + string(code)
}

// writeProblem sends err as application/problem+json, with the headers
// that tell a retrying client what to do (retryHeaders).
func writeProblem(c echo.Context, err error) error {
	status, body := problemBody(c.Request(), err)
	return sendProblem(c, status, body)
}

// sendProblem sends a problem body, with the headers that tell a retrying
// client what to do, in the shape the caller reads: a Stripe SDK gets
// Stripe's error object (stripe_errors.go), everyone else problem+json.
func sendProblem(c echo.Context, status int, body []byte) error {
	h := c.Response().Header()
	retryHeaders(h, status)
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="paytwice"`)
	}
	if stripeCaller(c.Request()) {
		status, body = stripeError(status, body)
		return c.Blob(status, echo.MIMEApplicationJSON, body)
	}
	return c.Blob(status, "application/problem+json", body)
}

// retryHeaders sets what retry libraries read, on every error. The
// answers worth sending again with the same key, after Retry-After
// seconds, say so in both headers: 409 (the first request has not
// finished), 429 (too much at once), 503 (released, or not taken) and 504
// (the outcome is not known yet). A caller that set Retry-After already
// (a 504 that knows when the sweeper will have closed its key) keeps its
// value. Every other error is one the same request would get again, so
// Stripe-Should-Retry is false; an unexpected 500 that was not saved
// gives no advice either way.
func retryHeaders(h http.Header, status int) {
	switch {
	case retryInvited(status):
		if h.Get("Retry-After") == "" {
			h.Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		}
		h.Set("Stripe-Should-Retry", "true")
	case status >= 400 && status < 500:
		h.Set("Stripe-Should-Retry", "false")
	}
}

// retryInvited reports whether an unsaved answer with this status asks
// the client to send the request again with the same key.
func retryInvited(status int) bool {
	switch status {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// writeSaved sends an answer saved on the key: the first time (replayed
// false) or again. Sending the request again cannot change it, so retry
// libraries are told not to (Stripe-Should-Retry: false) on every replay
// and on an original error; the 201 itself needs no advice.
func writeSaved(c echo.Context, status int, body []byte, replayed bool) error {
	h := c.Response().Header()
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	if replayed || status >= 400 {
		h.Set("Stripe-Should-Retry", "false")
	}
	if status >= 400 && stripeCaller(c.Request()) {
		status, body = stripeError(status, body)
		return c.Blob(status, echo.MIMEApplicationJSON, body)
	}
	return c.Blob(status, contentTypeFor(status), body)
}

// contentTypeFor is the media type of a saved answer with status: a
// problem for an error, the payment's JSON otherwise.
func contentTypeFor(status int) string {
	if status >= 400 {
		return "application/problem+json"
	}
	return echo.MIMEApplicationJSON
}

// writeConflict sends the 409 for a key whose first request has not
// finished. While that request runs, a retry in a second may find its
// answer. When it is no longer running (it crashed, or its gateway never
// answered), only the sweeper can close the key, after the lock timeout:
// the answer says so, and Retry-After is the time until then, so that a
// client with a budget of attempts does not spend them all on 409s while
// the order may be charged.
func (h *paymentHandlers) writeConflict(c echo.Context, key string, o pay.Outcome) error {
	held := o.Held
	if held == nil || o.Running {
		return writeProblem(c, o.Err)
	}
	now := h.books.now()
	// On a database that several servers share, another server's request
	// may be at work until its work's deadline, or held by step mode for
	// as long as the presenter takes.
	if !h.books.sweeps.private && (h.switches.steps.On() || now.Before(held.LockedAt.Add(h.times.work))) {
		return writeProblem(c, o.Err)
	}
	wait := max(held.LockedAt.Add(h.times.settle).Sub(now), time.Second)
	secs := int64((wait + time.Second - 1) / time.Second)
	c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return writeProblem(c, pay.Errorf(pay.ECONFLICT, "The request that claimed the key %q is no longer running: it stopped before saving its outcome, which may include a charge. The sweeper will ask the gateway what happened and close the key within %d s; retry with the same key then, and never with a new one.", pay.Truncate(key, 64), secs))
}

// retryAfterSeconds is what a 409 or a 503 asks the client to wait.
const retryAfterSeconds = 1
