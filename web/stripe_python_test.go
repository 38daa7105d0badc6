package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"
)

// stripePython is the Python that has Debian's python3-stripe (stripe-python
// 5), which .ci/run installs. Without it the test skips locally and fails
// in CI.
func stripePython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import stripe").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("stripe-python is missing (apt-get install python3-stripe): %v", err)
		}
		t.Skipf("stripe-python is missing (apt-get install python3-stripe): %v", err)
	}
	return py
}

// pythonCheckout is what the checkout script reports.
type pythonCheckout struct {
	Status     string `json:"status"`
	Error      string `json:"error"`
	HTTPStatus int    `json:"http_status"`
	RequestID  string `json:"request_id"`
	// Waits are the SDK's waits before its retries, in seconds; nil
	// when the checkout does not report them.
	Waits []float64 `json:"waits"`
}

// pythonCheckoutCommand runs the checkout script with stripe-python. In a
// quick run the SDK's waits between retries are recorded, not slept
// (PAYTWICE_SDK_WAITS=recorded): the test's server runs on a clock that
// only the test moves, so a retry after a wait of three seconds meets the
// same key, in the same state, as one at once, and its answer is the same.
// The full run (fullRun) lets the SDK sleep them on the real clock.
func pythonCheckoutCommand(ctx context.Context, py string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, py, append([]string{"testdata/stripe_python_checkout.py"}, args...)...)
	if !fullRun() {
		cmd.Env = append(os.Environ(), "PAYTWICE_SDK_WAITS=recorded")
	}
	return cmd
}

func TestStripeSandboxWithStripePython(t *testing.T) {
	waitsOnRealClocks(t)
	py := stripePython(t)
	checkoutUnderEveryFault(t, func(ctx context.Context, url, order, key string) *exec.Cmd {
		return pythonCheckoutCommand(ctx, py, url, order, key, "pm_card_visa")
	})
}

// The same checkout in two steps, create then confirm (stripe-python's
// PaymentIntent.confirm), under every fault switch.
func TestStripeSandboxCreateThenConfirmWithStripePython(t *testing.T) {
	waitsOnRealClocks(t)
	py := stripePython(t)
	checkoutUnderEveryFault(t, func(ctx context.Context, url, order, key string) *exec.Cmd {
		return pythonCheckoutCommand(ctx, py, url, order, key, "pm_card_visa", "later")
	})
}

// checkoutUnderEveryFault runs a shop's checkout, written with one of
// Stripe's SDKs (checkout makes the command that runs it once and prints
// what the SDK reported), under every fault switch: the SDK reports what
// happened, the shop searches the order and waits while it is
// processing, and each order ends with exactly one charge.
func checkoutUnderEveryFault(t *testing.T, command func(ctx context.Context, url, order, key string) *exec.Cmd) {
	// first is what the SDK reports for the order's first checkout, after
	// its own retries: the Stripe error type and status, or "succeeded",
	// or "network". stripe-node and stripe-python retry a 500 or a 504
	// that says Stripe-Should-Retry: true, with the same key; while the key
	// is still held, every retry meets its 409, and that is what they
	// report when their retries run out.
	cases := []struct {
		name, faults, first string
		status              int
	}{
		{"with no fault", `{}`, "succeeded", 0},
		{"when the response is lost", `{"server":{"response_lost":true}}`, "succeeded", 0},
		{"when the connection never happens", `{"server":{"connection_never_happens":true}}`, "network", 0},
		{"when the server errs after the charge", `{"server":{"server_error":true}}`, "api_error", 500},
		{"when the server fails halfway", `{"server":{"fail_halfway":true}}`, "idempotency_error", 409},
		{"when the server crashes midway", `{"server":{"crash_midway":true}}`, "idempotency_error", 409},
		{"when the gateway declines", `{"gateway":{"decline":true}}`, "card_error", 402},
		{"when the gateway fails", `{"gateway":{"error":true}}`, "api_error", 502},
		{"when the gateway times out", `{"gateway":{"timeout":true}}`, "idempotency_error", 409},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case has its own server and database, and its time goes
			// in the SDK's own waits between retries: the cases overlap.
			waitsOnRealClocks(t)
			// The SDKs wait out Retry-After (up to a minute) between their
			// retries: a short lock timeout keeps that wait short.
			e := newFIEnv(t, Config{LockTimeout: 2 * time.Second, SweepEvery: time.Second})
			hs := httptest.NewServer(e.Server.Handler())
			t.Cleanup(hs.Close)
			sdk := sandboxClient(t, hs.URL) // the shop's look-ups
			world := &shopWorld{e: e}
			scope := "token:" + scopeID(stripeTestKey)
			checkout := func(order, key string) pythonCheckout {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				out, err := command(ctx, hs.URL, order, key).Output()
				var r pythonCheckout
				if err != nil || json.Unmarshal(out, &r) != nil {
					t.Fatalf("the SDK's checkout: %v %s", err, out)
				}
				t.Logf("order %s, key %s: the SDK reported %+v", order, key, r)
				return r
			}
			// A second order on the same server takes the same path as
			// the first: a quick run checks out one, the full run
			// (fullRun) two, one after the other.
			orders := 1
			if fullRun() {
				orders = 2
			}
			for i := range orders {
				order := fmt.Sprintf("PY-%d", i)
				key := "py-" + order
				e.setFaults(c.faults)
				got := checkout(order, key)
				e.setFaults(`{}`)
				switch {
				case c.first == "succeeded" && got.Status != "succeeded",
					c.first != "succeeded" && (got.Error != c.first || got.HTTPStatus != c.status),
					got.Error != "" && got.Error != "network" && got.RequestID == "":
					t.Errorf("order %s: the SDK reported %+v, want %s (status %d) with a request id", order, got, c.first, c.status)
				}
				// A held key's answers ask for Retry-After: the lock
				// timeout and a sweep, on a clock that stands still. An
				// SDK that says how it waited (Waits reported) and met the
				// key held to the end waited that long before its last
				// retry, as docs/api.md says stripe-python does.
				if held := e.Server.cfg.LockTimeout + e.Server.cfg.SweepEvery; got.Waits != nil && got.Error == "idempotency_error" &&
					(len(got.Waits) == 0 || got.Waits[len(got.Waits)-1] < held.Seconds()) {
					t.Errorf("order %s: the SDK waited %v s before its retries, the last under the held key's Retry-After of %v", order, got.Waits, held)
				}
				for steps := 0; ; steps++ {
					succeeded, processing, err := searchOrder(sdk, order)
					if err != nil {
						t.Fatal(err)
					}
					if succeeded > 0 {
						break
					}
					if steps == 6 {
						t.Fatalf("order %s: not paid after %d looks (%+v)", order, steps, got)
					}
					if processing > 0 {
						world.wait(e.Server.cfg.LockTimeout + e.Server.cfg.SweepEvery)
						continue
					}
					if got.Error == "card_error" || got.HTTPStatus == 502 {
						key += "-again" // a definite refusal is saved on the key
					}
					got = checkout(order, key)
				}
				world.wait(0)
				if cs, err := e.DB.ChargesByOrder(context.Background(), scope, order); err != nil || len(cs) != 1 {
					t.Fatalf("order %s: %d charges %v", order, len(cs), err)
				}
			}
		})
	}
}
