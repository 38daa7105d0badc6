package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestUnknownOutcomesSayHowToFindOut(t *testing.T) {
	t.Parallel()
	t.Run("the fails-halfway 500 asks for the same key after the sweep, or a look-up, and is not saved", func(t *testing.T) {
		e := newFIEnv(t, Config{})
		e.setFaults(`{"server":{"fail_halfway":true}}`)
		r := e.mustPay("halfway-1", `{"order_id":"H-1","amount_satang":12900}`)
		settle := e.Server.cfg.paymentTimes().settleSeconds()
		if r.Status != http.StatusInternalServerError || r.Header.Get("Retry-After") != fmt.Sprint(settle) ||
			r.Header.Get("Stripe-Should-Retry") != "true" {
			t.Fatalf("answer %d, Retry-After %q, Stripe-Should-Retry %q; want 500, %d, true", r.Status,
				r.Header.Get("Retry-After"), r.Header.Get("Stripe-Should-Retry"), settle)
		}
		detail := string(r.JSON(t)["detail"].(string))
		for _, want := range []string{"same key after " + fmt.Sprint(settle) + " s", "GET /v1/payments?order_id=H-1", "new key"} {
			if !strings.Contains(detail, want) {
				t.Errorf("the problem's detail %q does not say %q", detail, want)
			}
		}
		if s := e.keyStatus("halfway-1"); s != "started" {
			t.Fatalf("key %q after the rollback, want started (nothing saved)", s)
		}
		// Following the advice: the same key after Retry-After seconds.
		e.setFaults(`{}`)
		e.Clock.Advance(time.Duration(settle) * time.Second)
		e.sweepNow()
		if again := e.mustPay("halfway-1", `{"order_id":"H-1","amount_satang":12900}`); again.Status != http.StatusCreated || !isReplay(again) {
			t.Fatalf("the same key after Retry-After: %d %s", again.Status, again.Body)
		}
		if n := e.chargesFor("H-1"); n != 1 {
			t.Fatalf("%d charges", n)
		}
	})

	t.Run("a 504 held past the sweep answers what the key holds when it is sent", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		if r := env.api(http.MethodPut, "/api/faults", `{"gateway":{"timeout":true}}`); r.Status != http.StatusOK {
			t.Fatalf("faults: %d %s", r.Status, r.Body)
		}
		ans := env.payAsync("stale-1", "T-1")
		for _, cp := range []string{"received", "key claimed", "before the gateway", "gateway answered", "answered"} {
			id := env.waitHeld(cp)
			if cp == "answered" {
				// The server is held here, as a paused one would be, with its
				// 504 ready; meanwhile the sweeper settles the key.
				env.Clock.Advance(env.Server.cfg.LockTimeout + time.Second)
				if r := env.api(http.MethodPost, "/api/sweep", ""); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"outcome":"charged"`) {
					t.Fatalf("the sweep while the answer is held: %d %s", r.Status, r.Body)
				}
			}
			if r := env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id)); r.Status != http.StatusOK {
				t.Fatalf("Next at %q: %d %s", cp, r.Status, r.Body)
			}
		}
		r := wantStatus(t, ans, http.StatusCreated)
		if !isReplay(r) {
			t.Fatalf("the held answer is the sweeper's saved 201 but not marked a replay: %v", r.Header)
		}
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges", n)
		}
	})
}
