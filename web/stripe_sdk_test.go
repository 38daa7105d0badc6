package web

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85"

	"paytwice/pay"
)

// These tests point Stripe's own Go SDK (stripe-go), with its own retries,
// at a real server on 127.0.0.1, the way a backend engineer would use it
// against Stripe, under every fault switch.

// seenRequests records what reached the server: the key of every payment
// request, in order, whatever the client or its transport sent by itself.
type seenRequests struct {
	mu   sync.Mutex
	keys []string
}

func (s *seenRequests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == paymentsPath {
			s.mu.Lock()
			s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
			s.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// take returns the keys seen since the last call.
func (s *seenRequests) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys
	s.keys = nil
	return k
}

// stripeSDK is stripe-go's backend aimed at the server, retrying as it
// does by default (two network retries) unless told otherwise. Each call
// gets a fresh connection, so Go's transport never resends a request on
// its own and every attempt the server sees is the SDK's.
func stripeSDK(t *testing.T, url string, retries int64) stripe.RawRequestBackend {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(url),
		HTTPClient:        &http.Client{Transport: tr, Timeout: 20 * time.Second},
		MaxNetworkRetries: stripe.Int64(retries),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	return b.(stripe.RawRequestBackend)
}

const stripeTestKey = "sk_test_paytwice"

func TestStripeGoSDKUnderEveryFaultSwitch(t *testing.T) {
	waitsOnRealClocks(t)
	env := newFIEnv(t, Config{})
	var seen seenRequests
	hs := httptest.NewServer(seen.wrap(env.Server.Handler()))
	t.Cleanup(hs.Close)
	sdk := stripeSDK(t, hs.URL, 2)
	scope := "token:" + scopeID(stripeTestKey)

	cases := []struct {
		name, faults string
		// status and errType are the typed error the SDK returns; 0 for
		// a success, -1 for a connection error (not Stripe's).
		status  int
		errType stripe.ErrorType
		// attempts the server sees; charged whether the order is paid
		// once the sweeper has closed every key.
		attempts int
		charged  bool
	}{
		{"healthy", `{}`, 0, "", 1, true},
		{"delay", `{"server":{"delay_ms":20}}`, 0, "", 1, true},
		{"response lost: the SDK's retry is answered with the replay", `{"server":{"response_lost":true}}`, 0, "", 2, true},
		{"connection never happens: every attempt dropped, nothing done", `{"server":{"connection_never_happens":true}}`, -1, "", 3, false},
		{"crash midway: the retry meets the stopped request's 409", `{"server":{"crash_midway":true}}`, http.StatusConflict, stripe.ErrorTypeIdempotency, 2, true},
		{"server error: the saved 500 is not retried", `{"server":{"server_error":true}}`, http.StatusInternalServerError, stripe.ErrorTypeAPI, 1, true},
		{"fails halfway after the charge", `{"server":{"fail_halfway":true}}`, http.StatusInternalServerError, stripe.ErrorTypeAPI, 1, true},
		{"gateway declines", `{"gateway":{"decline":true}}`, http.StatusPaymentRequired, stripe.ErrorTypeCard, 1, false},
		{"gateway fails", `{"gateway":{"error":true}}`, http.StatusBadGateway, stripe.ErrorTypeAPI, 1, false},
		{"gateway times out after charging", `{"gateway":{"timeout":true}}`, http.StatusGatewayTimeout, stripe.ErrorTypeAPI, 1, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env.setFaults(tc.faults)
			order := "SDK-" + string(rune('A'+i))
			key := "sdk-key-" + order
			params := &stripe.RawParams{Params: stripe.Params{IdempotencyKey: stripe.String(key)}}
			_, err := sdk.RawRequest(http.MethodPost, paymentsPath, stripeTestKey, "order_id="+order+"&amount_satang=129900", params)
			env.setFaults(`{}`)

			var se *stripe.Error
			switch {
			case tc.status == 0 && err != nil:
				t.Fatalf("the SDK returned %v, want success", err)
			case tc.status == -1 && (err == nil || errors.As(err, &se)):
				t.Fatalf("the SDK returned %v, want a connection error", err)
			case tc.status > 0 && !errors.As(err, &se):
				t.Fatalf("the SDK returned %T %v, want a *stripe.Error", err, err)
			case tc.status > 0 && (se.HTTPStatusCode != tc.status || se.Type != tc.errType || se.Msg == ""):
				t.Fatalf("the SDK's error: status %d type %q code %q %q, want %d %q", se.HTTPStatusCode, se.Type, se.Code, se.Msg, tc.status, tc.errType)
			}
			keys := seen.take()
			if len(keys) != tc.attempts {
				t.Fatalf("the server saw %d attempts (%q), want %d", len(keys), keys, tc.attempts)
			}
			for _, k := range keys {
				if k != key {
					t.Fatalf("an attempt carried the key %q, want %q on every one", k, key)
				}
			}
			// Whatever the SDK was told, the order is paid at most once,
			// and once the sweeper has closed the keys the gateway and the
			// server agree on it.
			env.Clock.Advance(env.Server.cfg.LockTimeout + time.Second)
			env.sweepNow()
			charges, err := env.DB.ChargesByOrder(context.Background(), scope, order)
			if err != nil {
				t.Fatal(err)
			}
			_, atGateway, err := env.DB.LookupGatewayCharge(context.Background(), pay.GatewayKey(scope, key))
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.charged]; len(charges) != want || atGateway != tc.charged {
				t.Fatalf("%d local charges and gateway charged %v, want %d and %v", len(charges), atGateway, want, tc.charged)
			}
		})
	}
}

// An SDK's key protects the retries of one call, not the customer's
// action: without a key passed in, stripe-go makes a new one for each
// call, so the two calls of a double-click are two payments.
func TestStripeGoSDKDoubleClickWithoutAKeyChargesTwice(t *testing.T) {
	env := newFIEnv(t, Config{})
	var seen seenRequests
	hs := httptest.NewServer(seen.wrap(env.Server.Handler()))
	t.Cleanup(hs.Close)
	sdk := stripeSDK(t, hs.URL, 2)
	scope := "token:" + scopeID(stripeTestKey)
	body := "order_id=DBL-1&amount_satang=129900"

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, errs[i] = sdk.RawRequest(http.MethodPost, paymentsPath, stripeTestKey, body, &stripe.RawParams{})
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the two clicks: %v, %v", errs[0], errs[1])
	}
	keys := seen.take()
	if len(keys) != 2 || keys[0] == keys[1] || keys[0] == "" {
		t.Fatalf("keys seen: %q, want two different keys the SDK made", keys)
	}
	charges, err := env.DB.ChargesByOrder(context.Background(), scope, "DBL-1")
	if err != nil || len(charges) != 2 {
		t.Fatalf("%d charges for one order (%v), want 2: the double-click paid twice", len(charges), err)
	}

	// One key made when the customer starts paying, passed to both calls:
	// one charge.
	action := &stripe.RawParams{Params: stripe.Params{IdempotencyKey: stripe.String("order-DBL-2-pay")}}
	for i := range 2 {
		wg.Go(func() {
			_, errs[i] = sdk.RawRequest(http.MethodPost, paymentsPath, stripeTestKey, "order_id=DBL-2&amount_satang=129900", action)
		})
	}
	wg.Wait()
	charges, err = env.DB.ChargesByOrder(context.Background(), scope, "DBL-2")
	if err != nil || len(charges) != 1 {
		t.Fatalf("%d charges with one key for the action (%v), want 1", len(charges), err)
	}
	for _, err := range errs {
		var se *stripe.Error
		if err != nil && !(errors.As(err, &se) && se.HTTPStatusCode == http.StatusConflict && se.Type == stripe.ErrorTypeIdempotency) {
			t.Fatalf("a click with the action's key: %v, want success or Stripe's 409 idempotency_error", err)
		}
	}
}

// What stripe-go really does with the retry headers, measured on a stub
// that answers every attempt alike: the README's table of SDKs rests on
// it. An error in Stripe's shape is retried only when it is a 429 with
// the code lock_timeout, whatever Stripe-Should-Retry says; a body in any
// other shape fails to decode, and that error is retried whatever the
// status and the header (a 422 with Stripe-Should-Retry: false too).
// Retry-After is never read: the waits are the SDK's own backoff. So the
// header the SDK's code does look at never decides anything.
func TestStripeGoSDKRetryRules(t *testing.T) {
	waitsOnRealClocks(t)
	const stripeShape, problemShape = `{"error":{"type":"api_error","code":"x","message":"m"}}`, `{"type":"/problems/x","title":"t","status":0}`
	cases := []struct {
		name        string
		status      int
		body, retry string
		code        string
		attempts    int
	}{
		{"Stripe's shape, 409, Stripe-Should-Retry true", 409, stripeShape, "true", "", 1},
		{"Stripe's shape, 503, Stripe-Should-Retry true", 503, stripeShape, "true", "", 1},
		{"Stripe's shape, 500, no advice", 500, stripeShape, "", "", 1},
		{"Stripe's shape, 429 lock_timeout", 429, stripeShape, "", "lock_timeout", 2},
		{"problem+json, 409, Stripe-Should-Retry false", 409, problemShape, "false", "", 2},
		{"problem+json, 400, Stripe-Should-Retry true", 400, problemShape, "true", "", 2},
		{"problem+json, 409, no advice", 409, problemShape, "", "", 2},
		{"problem+json, 500, no advice", 500, problemShape, "", "", 2},
		{"problem+json, 422, Stripe-Should-Retry false", 422, problemShape, "false", "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var at []time.Time
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				body := tc.body
				if tc.code != "" {
					body = `{"error":{"type":"invalid_request_error","code":"` + tc.code + `","message":"m"}}`
				}
				if tc.retry != "" {
					w.Header().Set("Stripe-Should-Retry", tc.retry)
				}
				w.Header().Set("Retry-After", "30")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(body))
			}))
			defer hs.Close()
			_, err := stripeSDK(t, hs.URL, 1).RawRequest(http.MethodPost, paymentsPath, stripeTestKey, "a=1", &stripe.RawParams{})
			if err == nil {
				t.Fatal("the SDK took an error status for a success")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(at) != tc.attempts {
				t.Fatalf("%d attempts, want %d", len(at), tc.attempts)
			}
			for i := 1; i < len(at); i++ {
				// Logged, not asserted: a wait far below the Retry-After of
				// 30 s shows the header was not read.
				t.Logf("wait before attempt %d: %v (Retry-After said 30 s)", i+1, at[i].Sub(at[i-1]).Round(time.Millisecond))
			}
		})
	}
}
