package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
)

// Create now, confirm later: the two steps many shops take with Stripe.
// A PaymentIntent created with confirm=false charges nothing; its creation
// is saved on its idempotency key like any answer (so a retry of the
// create replays the same intent, another body with the key is an
// idempotency_error). Its id names that key, so the books alone say what
// the intent is: GET and confirm read the key's saved intent and the
// charges recorded for it, and a forged id names no saved creation.
//
// The confirm is a payment through the protocol with an idempotency key
// of its own, and with the intent's id as its charge key: the gateway is
// charged, and the charge recorded, under the intent. So a retry of the
// confirm with its key replays, and a second confirm with another key
// can never charge the intent again (it is refused once the intent has
// succeeded, and two that race both meet the one charge the gateway
// keeps for the intent).

// Stripe's statuses the sandbox's intents take.
const (
	intentRequiresPaymentMethod = "requires_payment_method"
	intentRequiresConfirmation  = "requires_confirmation"
	intentProcessing            = "processing"
	intentSucceeded             = "succeeded"
)

// intentIDPrefix starts the id of an intent created unconfirmed. A
// succeeded intent's id made by a create-and-confirm is "pi_" and a
// charge's 24 hex digits, so the "x" tells the two apart.
const intentIDPrefix = "pi_x"

// intentNonceLen is the hex digits of randomness in an intent's id: the
// same key, pruned and used again, makes another intent.
const intentNonceLen = 16

// maxIntentIDLen is the longest id the sandbox makes: the prefix, the
// nonce and the longest key in base64.
var maxIntentIDLen = len(intentIDPrefix) + intentNonceLen + base64.RawURLEncoding.EncodedLen(pay.MaxKeyLength)

// newIntentID makes the id of an intent created with key.
func newIntentID(key string) string {
	var nonce [intentNonceLen / 2]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	return intentIDPrefix + hex.EncodeToString(nonce[:]) + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// intentCreationKey is the idempotency key an intent's id names; ok is
// false for an id the sandbox never makes for an unconfirmed intent.
func intentCreationKey(id string) (key string, ok bool) {
	rest, found := strings.CutPrefix(id, intentIDPrefix)
	if !found || len(id) > maxIntentIDLen || len(rest) <= intentNonceLen {
		return "", false
	}
	if _, err := hex.DecodeString(rest[:intentNonceLen]); err != nil {
		return "", false
	}
	k, err := base64.RawURLEncoding.DecodeString(rest[intentNonceLen:])
	if err != nil || len(k) == 0 || len(k) > pay.MaxKeyLength {
		return "", false
	}
	return string(k), true
}

// createUnconfirmed answers a create with confirm=false: the intent is
// saved on the request's key, as started then done in two writes like any
// payment's, and nothing is charged. A key already used answers as the
// protocol does: the saved intent replayed, 409 while its first request
// runs, idempotency_error for another body.
func (p *payment) createUnconfirmed() error {
	pp := p.protocol()
	if saved, ok := p.h.books.store.CachedResponse(p.scope, p.key); ok {
		return p.answer(pp.AnswerHeld(pay.KeyRow{Status: pay.StatusDone, ResponseStatus: saved.Status, ResponseBody: saved.Body, Fingerprint: saved.Fingerprint}))
	}
	// The writes run to their end whatever the client does, as a
	// payment's claim does: one cut off half-way would leave a started key.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.c.Request().Context()), pay.MaxClaimWait)
	defer cancel()
	req := pay.ClaimRequest{Scope: p.scope, Key: p.key, Method: http.MethodPost, Path: intentsPath, Fingerprint: p.fp,
		OrderID: p.req.OrderID, AmountSatang: p.req.AmountSatang}
	claim, err := p.h.books.store.Claim(ctx, req)
	switch {
	case err != nil:
		return p.fail(err)
	case claim.Reused != nil:
		return p.answer(pay.Outcome{Kind: pay.Reused, Err: pay.KeyUsedForAnotherOrder(p.key, *claim.Reused, p.req)})
	case !claim.Claimed:
		return p.answer(pp.AnswerHeld(claim.Existing))
	}
	p.publish(live.Claimed, 0, "key row inserted as started")
	in := intent{ID: newIntentID(p.key), Object: "payment_intent", Amount: p.req.AmountSatang, Currency: sandboxCurrency,
		Status: intentRequiresConfirmation, PaymentMethod: p.intent.card, Metadata: map[string]string{"order_id": p.req.OrderID},
		Created: p.h.books.now().Unix(), CaptureMethod: "automatic"}
	if in.PaymentMethod == "" {
		in.Status = intentRequiresPaymentMethod
	}
	body, err := json.Marshal(in)
	if err != nil {
		return p.fail(err)
	}
	done, err := p.h.books.store.Complete(ctx, pay.Completion{ClaimRequest: req, Claim: claim.Claim, Status: http.StatusOK, Body: body})
	if err != nil {
		// Nothing was charged: free the key so that a retry runs afresh.
		if _, rerr := p.h.books.store.Release(ctx, p.scope, p.key, claim.Claim, pay.ReleasedBeforeWork); rerr != nil {
			p.h.logf("payment %s: release after a failed save: %v", p.id, rerr)
		}
		return p.fail(err)
	}
	p.publish(live.Completed, http.StatusOK, "PaymentIntent created, status "+in.Status+": nothing charged until it is confirmed")
	return p.answer(pay.Outcome{Kind: pay.Saved, Status: done.Status, Body: done.Body})
}

// unconfirmedIntent is an intent created unconfirmed, as the books say it
// is now: its saved creation, then succeeded when a charge is recorded
// for it, processing while a confirm of it is at work or its outcome is
// unknown, requires_payment_method after a declined confirm.
func (h *paymentHandlers) unconfirmedIntent(ctx context.Context, scope, id string) (intent, error) {
	notFound := pay.Errorf(pay.ENOTFOUND, "No such payment_intent: '%s'", pay.Truncate(id, 64))
	key, ok := intentCreationKey(id)
	if !ok {
		return intent{}, notFound
	}
	row, err := h.books.store.GetKey(ctx, scope, key)
	if pay.ErrorCode(err) == pay.ENOTFOUND {
		return intent{}, notFound
	}
	if err != nil {
		return intent{}, err
	}
	var in intent
	if row.Path != intentsPath || row.Status != pay.StatusDone || row.ResponseStatus != http.StatusOK ||
		json.Unmarshal(row.ResponseBody, &in) != nil || in.ID != id {
		return intent{}, notFound // the key holds something else: the id is not one the sandbox made
	}
	rec, err := h.books.store.OrderRecord(ctx, scope, in.Metadata["order_id"])
	if err != nil {
		return intent{}, err
	}
	for _, ch := range rec.Charges {
		if ch.Key == id {
			in.Status, in.AmountReceived, in.LatestCharge, in.LastPaymentError = intentSucceeded, ch.AmountSatang, ch.ID, nil
			return in, nil
		}
	}
	for _, k := range rec.Keys {
		if k.Status == pay.StatusDone && k.ResponseStatus != http.StatusPaymentRequired {
			continue
		}
		full, err := h.books.store.GetKey(ctx, scope, k.Key)
		if err != nil || full.ChargeKey != id {
			continue // gone since the record was read, or another intent's
		}
		if k.Status == pay.StatusStarted {
			in.Status, in.LastPaymentError = intentProcessing, nil
			return in, nil
		}
		in.Status = intentRequiresPaymentMethod
		in.LastPaymentError = &intentError{Type: stripeCardError, Code: "card_declined", Message: "The card was declined; nothing was charged. Confirm again with another payment_method and a new key."}
	}
	return in, nil
}

// handleConfirmIntent is POST /v1/payment_intents/{id}/confirm: the
// payment of an intent created unconfirmed, through the protocol, with
// the confirm's own key. An intent made by create-and-confirm has
// succeeded already, and Stripe refuses to confirm a succeeded intent.
func (h *paymentHandlers) handleConfirmIntent(c echo.Context) error {
	slot, err := h.takeTurn(c)
	if err != nil {
		return err
	}
	defer slot.done()
	h.inflight.RLock()
	defer h.inflight.RUnlock()
	id := c.Param("id")
	ctx, scope := c.Request().Context(), callerScope(c.Request())
	if !strings.HasPrefix(id, intentIDPrefix) {
		if _, err := intentCharge(c, h.books.store); err != nil {
			return err
		}
		return errUnexpectedIntentState(id, intentSucceeded)
	}
	in, err := h.unconfirmedIntent(ctx, scope, id)
	if err != nil {
		return err
	}
	p := h.newPayment(c)
	p.slot = slot
	p.intent = &intentShape{confirming: &in}
	p.chargeKey = id // the gateway and the charges know the payment by its intent
	if ok, err := p.parse(" (Stripe sandbox: confirm " + pay.Truncate(id, 24) + ")"); !ok {
		return err
	}
	if in.Status == intentSucceeded {
		// A retry of the confirm that succeeded replays its answer; a
		// confirm with another key is refused, and charges nothing.
		if _, cached := h.books.store.CachedResponse(p.scope, p.key); !cached {
			if _, err := h.books.store.GetKey(ctx, p.scope, p.key); pay.ErrorCode(err) == pay.ENOTFOUND {
				return p.refuse(errUnexpectedIntentState(id, in.Status))
			}
		}
	}
	return p.answer(h.books.protocol.Pay(ctx, p.protocol()))
}

// errUnexpectedIntentState refuses to confirm an intent in a status that
// cannot be confirmed.
func errUnexpectedIntentState(id, status string) error {
	return pay.Errorf(pay.EINVALID, "This PaymentIntent (%s) has status %s and cannot be confirmed again: it was charged once, and that charge stands.", pay.Truncate(id, 64), status)
}

// readConfirm parses the form of a confirm: optionally the payment_method
// (required when the intent was created without one), and the few other
// parameters a checkout sends. An empty body is a confirm with nothing
// to change. The request is the intent's: its order and amount.
func (sh *intentShape) readConfirm(form map[string][]string) (pay.PaymentRequest, error) {
	in := sh.confirming
	card := in.PaymentMethod
	for name, values := range form {
		v := values[0]
		switch name {
		case "payment_method":
			card = v
		case "return_url", "receipt_email", "off_session", "use_stripe_sdk", "capture_method":
			// Kept in the fingerprint; nothing else to do with them here.
		default:
			return pay.PaymentRequest{}, pay.Errorf(pay.EINVALID, "Received unknown parameter: %s", pay.Truncate(name, 60))
		}
	}
	if card == "" {
		return pay.PaymentRequest{}, pay.Errorf(pay.EINVALID, "This PaymentIntent has no payment_method: confirm it with one of Stripe's test cards, such as payment_method=pm_card_visa.")
	}
	decline, err := testCard(card)
	if err != nil {
		return pay.PaymentRequest{}, err
	}
	sh.card, sh.decline = card, decline
	return pay.PaymentRequest{OrderID: in.Metadata["order_id"], AmountSatang: in.Amount}, nil
}
