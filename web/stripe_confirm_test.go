package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stripe/stripe-go/v85"
)

// These tests run the two steps many shops take with Stripe, create now
// and confirm later, with stripe-go and its automatic retries, against
// the sandbox: the confirm meets every fault switch, and each intent ends
// with exactly one charge, whatever the SDK was told and however often
// the shop confirms.

// sdkOutcome is what a Stripe SDK reports for a call: a succeeded intent
// (status 0), a network error (status -1), or Stripe's typed error.
type sdkOutcome struct {
	status  int
	errType stripe.ErrorType
}

// sandboxFaults are the fault switches and what stripe-go reports, after
// its own retries, for a payment made under each: the create-and-confirm
// and the confirm of an intent created before answer alike.
var sandboxFaults = []struct {
	name, faults string
	want         sdkOutcome
}{
	{"with no fault", `{}`, sdkOutcome{}},
	{"when the response is lost, the SDK's retry is answered the saved intent", `{"server":{"response_lost":true}}`, sdkOutcome{}},
	{"when the connection never happens", `{"server":{"connection_never_happens":true}}`, sdkOutcome{status: -1}},
	{"when the server errs after the charge, the 500 is saved", `{"server":{"server_error":true}}`, sdkOutcome{http.StatusInternalServerError, stripe.ErrorTypeAPI}},
	{"when the server fails halfway", `{"server":{"fail_halfway":true}}`, sdkOutcome{http.StatusInternalServerError, stripe.ErrorTypeAPI}},
	{"when the server crashes midway, the SDK's retry meets the key still held", `{"server":{"crash_midway":true}}`, sdkOutcome{http.StatusConflict, stripe.ErrorTypeIdempotency}},
	{"when the gateway declines", `{"gateway":{"decline":true}}`, sdkOutcome{http.StatusPaymentRequired, stripe.ErrorTypeCard}},
	{"when the gateway fails", `{"gateway":{"error":true}}`, sdkOutcome{http.StatusBadGateway, stripe.ErrorTypeAPI}},
	{"when the gateway times out", `{"gateway":{"timeout":true}}`, sdkOutcome{http.StatusGatewayTimeout, stripe.ErrorTypeAPI}},
}

// checkSDKOutcome fails the test unless err is what want says, with the
// request id and a message a Stripe error always carries.
func checkSDKOutcome(t *testing.T, what string, err error, want sdkOutcome) {
	t.Helper()
	var se *stripe.Error
	switch {
	case want.status == 0 && err != nil:
		t.Fatalf("%s: the SDK returned %v, want success", what, err)
	case want.status == -1 && (err == nil || errors.As(err, &se)):
		t.Fatalf("%s: the SDK returned %v, want a network error", what, err)
	case want.status > 0 && !errors.As(err, &se):
		t.Fatalf("%s: the SDK returned %T %v, want a *stripe.Error", what, err, err)
	case want.status > 0 && (se.HTTPStatusCode != want.status || se.Type != want.errType || se.Msg == "" || se.RequestID == ""):
		t.Fatalf("%s: the SDK's error: status %d type %q code %q request %q %q, want %d %q", what, se.HTTPStatusCode, se.Type, se.Code, se.RequestID, se.Msg, want.status, want.errType)
	}
}

// createUnconfirmed is the shop's first step: an intent for the order,
// not confirmed, under the create's key.
func createUnconfirmed(c *stripe.Client, order, key string, amount int64) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(amount),
		Currency:      stripe.String("thb"),
		Confirm:       stripe.Bool(false),
		PaymentMethod: stripe.String("pm_card_visa"),
		Metadata:      map[string]string{"order_id": order},
	}
	params.SetIdempotencyKey(key)
	return c.V1PaymentIntents.Create(context.Background(), params)
}

// confirmIntent is the shop's second step, under the confirm's own key.
func confirmIntent(c *stripe.Client, id, key, card string) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentConfirmParams{}
	if card != "" {
		params.PaymentMethod = stripe.String(card)
	}
	params.SetIdempotencyKey(key)
	return c.V1PaymentIntents.Confirm(context.Background(), id, params)
}

// sdkCharges counts the money taken for an order of the SDK's account:
// the protocol's charges, and those of the lab's unguarded table.
func sdkCharges(t *testing.T, e *fiEnv, order string) int {
	t.Helper()
	rec, err := e.DB.OrderRecord(context.Background(), "token:"+scopeID(stripeTestKey), order)
	if err != nil {
		t.Fatal(err)
	}
	return len(rec.Charges) + len(rec.Unguarded)
}

func getIntent(t *testing.T, c *stripe.Client, id string) *stripe.PaymentIntent {
	t.Helper()
	pi, err := c.V1PaymentIntents.Retrieve(context.Background(), id, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", id, err)
	}
	return pi
}

func TestStripeSandboxCreateThenConfirmWithStripeGo(t *testing.T) {
	waitsOnRealClocks(t)
	for _, c := range sandboxFaults {
		t.Run(c.name, func(t *testing.T) {
			e := newFIEnv(t, Config{})
			hs := httptest.NewServer(e.Server.Handler())
			t.Cleanup(hs.Close)
			sdk := sandboxClient(t, hs.URL)
			world := &shopWorld{e: e}
			scope := "token:" + scopeID(stripeTestKey)
			order := "TWO-1"

			pi, err := createUnconfirmed(sdk, order, "create-"+order, 12900)
			if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresConfirmation || !strings.HasPrefix(pi.ID, intentIDPrefix) {
				t.Fatalf("create: %+v %v", pi, err)
			}
			if n := sdkCharges(t, e, order); n != 0 {
				t.Fatalf("%d charges after a create with confirm=false, want none", n)
			}
			// The create is idempotent on its own key: a retry is the same
			// intent, another body with the key an idempotency_error.
			if again, err := createUnconfirmed(sdk, order, "create-"+order, 12900); err != nil || again.ID != pi.ID {
				t.Fatalf("create again with its key: %+v %v, want intent %s", again, err, pi.ID)
			}
			_, err = createUnconfirmed(sdk, order, "create-"+order, 99)
			checkSDKOutcome(t, "create with the key and another amount", err, sdkOutcome{http.StatusBadRequest, stripe.ErrorTypeIdempotency})
			if got := getIntent(t, sdk, pi.ID); got.Status != stripe.PaymentIntentStatusRequiresConfirmation || got.Amount != 12900 {
				t.Fatalf("GET before the confirm: %+v", got)
			}
			// The order's look-up says what the books hold: created, not
			// charged, waiting for its confirmation.
			lookup, err := e.call(http.MethodGet, paymentsPath+"?order_id="+order, "", "Authorization", "Bearer "+stripeTestKey)
			if err != nil || !strings.Contains(string(lookup.Body), `"state":"not_charged"`) || !strings.Contains(string(lookup.Body), `"reason":"awaiting_confirmation"`) {
				t.Fatalf("the order's look-up before the confirm: %s %v", lookup.Body, err)
			}

			key := "confirm-" + order
			e.setFaults(c.faults)
			_, err = confirmIntent(sdk, pi.ID, key, "")
			e.setFaults(`{}`)
			checkSDKOutcome(t, "the first confirm", err, c.want)
			last := err

			// The shop reads the intent, waits while it is processing, and
			// confirms again while it is not paid: with the same key, unless
			// the answer saved on it was a definite refusal.
			for steps := 0; ; steps++ {
				got := getIntent(t, sdk, pi.ID)
				if got.Status == stripe.PaymentIntentStatusSucceeded {
					if got.LatestCharge == nil || got.LatestCharge.ID == "" || got.AmountReceived != 12900 {
						t.Fatalf("succeeded without its charge: %+v", got)
					}
					break
				}
				if steps == 6 {
					t.Fatalf("not paid after %d looks: %+v", steps, got)
				}
				if got.Status == stripe.PaymentIntentStatusProcessing {
					world.wait(e.Server.cfg.LockTimeout + e.Server.cfg.SweepEvery)
					continue
				}
				var se *stripe.Error
				if errors.As(last, &se) && (se.Type == stripe.ErrorTypeCard || se.HTTPStatusCode == http.StatusBadGateway) {
					if se.Type == stripe.ErrorTypeCard && got.Status != stripe.PaymentIntentStatusRequiresPaymentMethod {
						t.Fatalf("after a declined confirm the intent reads %q, want requires_payment_method", got.Status)
					}
					key += "-again"
				}
				_, last = confirmIntent(sdk, pi.ID, key, "pm_card_visa")
			}
			world.wait(0)

			// Once paid, a retry of the paying confirm replays it and a
			// confirm with a new key is refused: neither charges.
			if replay, err := confirmIntent(sdk, pi.ID, key, ""); err == nil && replay.Status != stripe.PaymentIntentStatusSucceeded {
				t.Fatalf("retry of the confirm that paid: %+v", replay)
			}
			_, err = confirmIntent(sdk, pi.ID, "confirm-once-more", "")
			checkSDKOutcome(t, "a confirm of the succeeded intent with a new key", err, sdkOutcome{http.StatusBadRequest, stripe.ErrorTypeInvalidRequest})
			charges, err := e.DB.ChargesByOrder(context.Background(), scope, order)
			if err != nil || len(charges) != 1 || charges[0].Key != pi.ID {
				t.Fatalf("charges of the order: %+v %v, want one, under the intent %s", charges, err, pi.ID)
			}
			if local, gateway := e.ledgers(); local != 1 || gateway != 1 {
				t.Fatalf("%d local and %d gateway charges, want 1 and 1", local, gateway)
			}
		})
	}
}

// Many confirms of one intent at once, some retrying one key and some
// with keys of their own: one charge.
func TestStripeSandboxConcurrentConfirmsChargeOnce(t *testing.T) {
	e := newFIEnv(t, Config{})
	hs := httptest.NewServer(e.Server.Handler())
	t.Cleanup(hs.Close)
	sdk := sandboxClient(t, hs.URL)
	pi, err := createUnconfirmed(sdk, "RACE-1", "create-race", 4200)
	if err != nil {
		t.Fatal(err)
	}
	e.setFaults(`{"server":{"delay_ms":30}}`) // the confirms overlap at the server
	var wg sync.WaitGroup
	succeeded := make([]bool, 8)
	for i := range succeeded {
		key := "confirm-race-shared"
		if i%2 == 1 {
			key = fmt.Sprintf("confirm-race-%d", i)
		}
		wg.Go(func() {
			got, err := confirmIntent(sdk, pi.ID, key, "")
			succeeded[i] = err == nil && got.Status == stripe.PaymentIntentStatusSucceeded
			var se *stripe.Error
			if err != nil && !(errors.As(err, &se) && (se.HTTPStatusCode == http.StatusConflict || se.HTTPStatusCode == http.StatusBadRequest)) {
				t.Errorf("confirm %d: %v, want the intent, a 409 or a 400", i, err)
			}
		})
	}
	wg.Wait()
	e.setFaults(`{}`)
	if local, gateway := e.ledgers(); local != 1 || gateway != 1 {
		t.Fatalf("%d local and %d gateway charges for one intent confirmed 8 times, want 1 and 1", local, gateway)
	}
	if got := getIntent(t, sdk, pi.ID); got.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("the intent after the race: %q", got.Status)
	}
	if !succeeded[0] && !succeeded[1] && !succeeded[2] && !succeeded[3] && !succeeded[4] && !succeeded[5] && !succeeded[6] && !succeeded[7] {
		t.Fatal("no confirm was told the intent succeeded")
	}
}

// An id the sandbox never made names no intent, even when it names one of
// the caller's keys; an intent is the caller's own.
func TestStripeSandboxIntentIDsAreTheCallersOwn(t *testing.T) {
	e := newFIEnv(t, Config{})
	hs := httptest.NewServer(e.Server.Handler())
	t.Cleanup(hs.Close)
	sdk := sandboxClient(t, hs.URL)
	pi, err := createUnconfirmed(sdk, "OWN-1", "create-own", 4200)
	if err != nil {
		t.Fatal(err)
	}
	forged := pi.ID[:len(intentIDPrefix)] + strings.Repeat("0", intentNonceLen) + pi.ID[len(intentIDPrefix)+intentNonceLen:]
	for _, id := range []string{forged, intentIDPrefix + "zz", intentIDPrefix + strings.Repeat("a", 400)} {
		_, err := sdk.V1PaymentIntents.Retrieve(context.Background(), id, nil)
		checkSDKOutcome(t, "GET "+pay64(id), err, sdkOutcome{http.StatusNotFound, stripe.ErrorTypeInvalidRequest})
		_, err = confirmIntent(sdk, id, "confirm-forged", "")
		checkSDKOutcome(t, "confirm "+pay64(id), err, sdkOutcome{http.StatusNotFound, stripe.ErrorTypeInvalidRequest})
	}
	// Another caller (another secret key) does not see the intent.
	res, err := e.call(http.MethodGet, intentsPath+"/"+pi.ID, "", "Authorization", "Bearer sk_test_someone_else")
	if err != nil || res.Status != http.StatusNotFound {
		t.Fatalf("another caller's GET: %+v %v, want 404", res, err)
	}
}

func pay64(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// The lab's mistaken handlers take the sandbox's payments as they take
// /v1/payments: a shop written with a Stripe SDK meets the same mistakes,
// and its answers stay in Stripe's shapes.
func TestStripeSandboxGoesThroughTheLabModes(t *testing.T) {
	waitsOnRealClocks(t)
	cases := []struct {
		mode string
		// together sends the two creates of one key at once; else one
		// after the other.
		together bool
		charges  int
	}{
		{"correct", true, 1},
		{"no_key", false, 2},
		{"check_then_insert", true, 2},
		{"check_then_insert_constrained", true, 1},
		{"memory_lock", true, 1},
		{"key_table_only", false, 1},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			e := newFIEnv(t, Config{})
			hs := httptest.NewServer(e.Server.Handler())
			t.Cleanup(hs.Close)
			sdk := sandboxClient(t, hs.URL)
			if r := e.must(http.MethodPut, "/api/lab", `{"server":{"mode":"`+c.mode+`","check_gap_ms":300}}`); r.Status != http.StatusOK {
				t.Fatalf("lab mode: %d %s", r.Status, r.Body)
			}
			order := "LAB-" + c.mode
			results := make([]error, 2)
			intents := make([]*stripe.PaymentIntent, 2)
			send := func(i int) { intents[i], results[i] = createIntent(sdk, order, "one-key", "pm_card_visa") }
			if c.together {
				var wg sync.WaitGroup
				wg.Go(func() { send(0) })
				wg.Go(func() { send(1) })
				wg.Wait()
			} else {
				send(0)
				send(1)
			}
			for i, err := range results {
				var se *stripe.Error
				switch {
				case err == nil && (intents[i].Status != stripe.PaymentIntentStatusSucceeded || !strings.HasPrefix(intents[i].ID, "pi_")):
					t.Fatalf("create %d: %+v, want a succeeded intent", i, intents[i])
				case err != nil && (!errors.As(err, &se) || se.RequestID == ""):
					t.Fatalf("create %d: %v, want a Stripe error", i, err)
				}
			}
			if n := sdkCharges(t, e, order); n != c.charges {
				t.Fatalf("%d charges for two creates with one key in mode %s, want %d", n, c.mode, c.charges)
			}
		})
	}
}
