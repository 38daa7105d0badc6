package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85"
)

// These tests run a shop's payment code, written against Stripe's Go SDK
// (stripe-go v85, with its automatic retries), against the sandbox under
// every fault switch: each order ends with exactly one charge, and the
// SDK reports what happened.

// sandboxClient is stripe-go's client aimed at the sandbox, with the
// three lines a shop changes: the key, the URL, the retries.
func sandboxClient(t *testing.T, url string) *stripe.Client {
	return stripe.NewClient(stripeTestKey, stripe.WithBackends(&stripe.Backends{API: sandboxBackend(t, url)}))
}

// sandboxBackend is sandboxClient's backend: the URL, two retries, and an
// HTTP client that never reuses a connection.
func sandboxBackend(t *testing.T, url string) *stripe.BackendImplementation {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(url),
		HTTPClient:        &http.Client{Transport: conformingTransport{tr}, Timeout: 20 * time.Second},
		MaxNetworkRetries: stripe.Int64(2),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	}).(*stripe.BackendImplementation)
}

// sandboxClientRetryingAtOnce is sandboxClient whose retries follow each
// other at once in a quick run, by the SDK's own switch for its tests
// (SetNetworkRetriesSleep). stripe-go never reads Retry-After: its waits
// are its own backoff (0.5 s, then more), and a test server's clock
// stands still until the test moves it, so a retry at once meets the key
// in the state a retry after the wait would, and is answered the same.
// The full run (fullRun) lets the SDK wait on the real clock.
func sandboxClientRetryingAtOnce(t *testing.T, url string) *stripe.Client {
	backend := sandboxBackend(t, url)
	if !fullRun() {
		backend.SetNetworkRetriesSleep(false)
	}
	return stripe.NewClient(stripeTestKey, stripe.WithBackends(&stripe.Backends{API: backend}))
}

// createIntent is the shop's checkout call: one idempotency key per order.
func createIntent(c *stripe.Client, order, key, card string) (*stripe.PaymentIntent, error) {
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(12900),
		Currency:      stripe.String("thb"),
		Confirm:       stripe.Bool(true),
		PaymentMethod: stripe.String(card),
		Metadata:      map[string]string{"order_id": order},
	}
	params.SetIdempotencyKey(key)
	return c.V1PaymentIntents.Create(context.Background(), params)
}

// searchOrder is the shop's look-up: the order's intents.
func searchOrder(c *stripe.Client, order string) (succeeded, processing int, err error) {
	params := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: fmt.Sprintf("metadata['order_id']:'%s'", order)}}
	for pi, err := range c.V1PaymentIntents.Search(context.Background(), params).All(context.Background()) {
		if err != nil {
			return 0, 0, err
		}
		switch pi.Status {
		case stripe.PaymentIntentStatusSucceeded:
			succeeded++
		case stripe.PaymentIntentStatusProcessing:
			processing++
		}
	}
	return succeeded, processing, nil
}

func TestStripeSandboxWithStripeGo(t *testing.T) {
	waitsOnRealClocks(t)
	for _, c := range sandboxFaults {
		t.Run(c.name, func(t *testing.T) {
			// Its own server and database; the time goes in the SDK's
			// waits between retries, which a quick run skips
			// (sandboxClientRetryingAtOnce).
			waitsOnRealClocks(t)
			e := newFIEnv(t, Config{})
			hs := httptest.NewServer(e.Server.Handler())
			t.Cleanup(hs.Close)
			sdk := sandboxClientRetryingAtOnce(t, hs.URL)
			world := &shopWorld{e: e}
			scope := "token:" + scopeID(stripeTestKey)
			const orders = 5
			for i := range orders {
				order := fmt.Sprintf("SDK-%d", i)
				key := "sdk-" + order
				e.setFaults(c.faults)
				pi, err := createIntent(sdk, order, key, "pm_card_visa")
				last := err
				e.setFaults(`{}`)
				checkSDKOutcome(t, "order "+order, err, c.want)
				if err == nil && pi.Status != stripe.PaymentIntentStatusSucceeded {
					t.Fatalf("order %s: %+v", order, pi)
				}
				var se *stripe.Error
				// The shop looks the order up, and waits while it is processing.
				for steps := 0; ; steps++ {
					succeeded, processing, err := searchOrder(sdk, order)
					if err != nil {
						t.Fatal(err)
					}
					if succeeded > 0 {
						break
					}
					if steps == 6 {
						t.Fatalf("order %s: not paid after %d looks", order, steps)
					}
					if processing > 0 {
						world.wait(e.Server.cfg.LockTimeout + e.Server.cfg.SweepEvery)
						continue
					}
					// Nothing under way, nothing charged: pay again, with the
					// same key unless its answer was a definite refusal.
					if errors.As(last, &se) && (se.Type == stripe.ErrorTypeCard || se.HTTPStatusCode == http.StatusBadGateway) {
						key += "-again"
					}
					if _, last = createIntent(sdk, order, key, "pm_card_visa"); last != nil && !errors.As(last, &se) {
						t.Fatalf("order %s: pay again: %v", order, last)
					}
				}
				world.wait(0)
				if cs, err := e.DB.ChargesByOrder(context.Background(), scope, order); err != nil || len(cs) != 1 {
					t.Fatalf("order %s: %d charges %v", order, len(cs), err)
				}
			}
			if n := e.charges(); n != orders {
				t.Fatalf("%d charges for %d orders", n, orders)
			}
		})
	}
}
