package web

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"paytwice/web/live"
)

// What retry libraries read: Retry-After on what is worth retrying, and
// Stripe-Should-Retry, true on 409 and false on every saved answer, so
// that no client resends a saved 500 until it runs out of attempts.
func TestRetryHeadersOnEachAnswer(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	check := func(name string, r response, status int, retryAfter, shouldRetry, replayed string) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: %d %s, want %d", name, r.Status, r.Body, status)
		}
		for h, want := range map[string]string{"Retry-After": retryAfter, "Stripe-Should-Retry": shouldRetry, "Idempotent-Replayed": replayed} {
			if got := r.Header.Get(h); got != want {
				t.Fatalf("%s: %s %q, want %q", name, h, got, want)
			}
		}
	}

	t.Run("201, then its replay", func(t *testing.T) {
		check("201", env.mustPay("rh-ok", articleBody), http.StatusCreated, "", "", "")
		check("replayed 201", env.mustPay("rh-ok", articleBody), http.StatusCreated, "", "false", "true")
	})
	for _, c := range []struct {
		name, faults string
		status       int
	}{
		{"saved 402", `{"gateway":{"decline":true}}`, http.StatusPaymentRequired},
		{"saved 502", `{"gateway":{"error":true}}`, http.StatusBadGateway},
		{"saved 500", `{"server":{"server_error":true}}`, http.StatusInternalServerError},
	} {
		t.Run(c.name+", then its replay", func(t *testing.T) {
			env.setFaults(c.faults)
			key := "rh-" + strconv.Itoa(c.status)
			check(c.name, env.mustPay(key, articleBody), c.status, "", "false", "")
			env.setFaults(`{}`)
			check("replayed "+c.name, env.mustPay(key, articleBody), c.status, "", "false", "true")
		})
	}
	t.Run("504 says when the sweeper will know; the retries meanwhile get 409", func(t *testing.T) {
		env.setFaults(`{"gateway":{"timeout":true}}`)
		wait := strconv.Itoa(int((env.Server.cfg.LockTimeout + env.Server.cfg.SweepEvery).Seconds()))
		check("504", env.mustPay("rh-504", articleBody), http.StatusGatewayTimeout, wait, "true", "")
		env.setFaults(`{}`)
		// Its request has stopped, so the 409s say when the sweeper can
		// close the key, counting down on the server's clock.
		check("409", env.mustPay("rh-504", articleBody), http.StatusConflict, wait, "true", "")
		env.Clock.Advance(10 * time.Second)
		check("409 ten seconds later", env.mustPay("rh-504", articleBody), http.StatusConflict, strconv.Itoa(int((env.Server.cfg.LockTimeout + env.Server.cfg.SweepEvery - 10*time.Second).Seconds())), "true", "")
	})
	t.Run("a refused request is not saved; the same request would be refused again", func(t *testing.T) {
		check("400", env.mustPay("", articleBody), http.StatusBadRequest, "", "false", "")
	})
	t.Run("a 409 while the first request runs asks for a retry in a second", func(t *testing.T) {
		release := env.holdGateway()
		done := make(chan response, 1)
		go func() { r, _ := env.payFI("rh-409", articleBody); done <- r }()
		env.waitForEvent(live.GatewayCall, "rh-409")
		check("409", env.mustPay("rh-409", articleBody), http.StatusConflict, strconv.Itoa(retryAfterSeconds), "true", "")
		release()
		if r := <-done; r.Status != http.StatusCreated {
			t.Fatalf("the held request: %d %s", r.Status, r.Body)
		}
	})
}
