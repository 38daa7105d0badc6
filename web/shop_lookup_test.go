package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
)

// These tests play a shop that follows the advice docs/shop.md gives for
// each state of an order's look-up, against every fault switch and the
// sweeper: whatever goes wrong, every order ends with exactly one charge.

// shopWorld is the world the shop lives in: the server, the shop's own
// HTTP client with its time-out, and time, which passes only when the
// shop waits.
type shopWorld struct {
	e *fiEnv
	// client is the shop's: it gives up after its time-out and never
	// reuses a connection, so that a dropped one is seen.
	client *http.Client
	// waited is the time the shop spent waiting, on the server's clock.
	waited time.Duration
	// lookedUp, when set, is called after each look-up's answer.
	lookedUp func(shopLookup)
}

// wait lets d pass: every payment the server has in flight ends first (a
// request the shop gave up on still runs to its end on the server), the
// server's clock moves on by d, and the sweeper runs, as its periodic job
// would have in that time.
func (w *shopWorld) wait(d time.Duration) {
	w.e.Server.payments.inflight.Lock()
	//lint:ignore SA2001 an empty critical section: it waits for every payment in flight
	w.e.Server.payments.inflight.Unlock()
	w.e.Clock.Advance(d)
	w.waited += d
	w.e.sweepNow()
}

// shopLookup is the look-up's answer as the shop reads it.
type shopLookup struct {
	State      pay.OrderState `json:"state"`
	Paid       bool           `json:"paid"`
	Charges    []struct{}     `json:"charges"`
	NotCharged *struct {
		Reason pay.NotChargedReason `json:"reason"`
	} `json:"not_charged"`
	RetryAfterSeconds int64 `json:"retry_after_seconds"`
	retryAfter        time.Duration
}

// pay sends one payment as the shop does, with its time-out. It reports
// whether the order is paid by this answer; any other outcome (an error
// status, a time-out, a dropped connection) is for the look-up to explain.
func (w *shopWorld) pay(t *testing.T, key, order string) bool {
	t.Helper()
	body := fmt.Sprintf(`{"order_id":%q,"amount_satang":12900}`, order)
	req, err := http.NewRequest(http.MethodPost, w.e.URL+paymentsPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := w.client.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusCreated
}

// lookUp asks the server what it knows of the order.
func (w *shopWorld) lookUp(t *testing.T, order string) shopLookup {
	t.Helper()
	r := w.e.must(http.MethodGet, paymentsPath+"?order_id="+order, "")
	if r.Status != http.StatusOK {
		t.Fatalf("look-up of %s: %d %s", order, r.Status, r.Body)
	}
	var l shopLookup
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("look-up of %s: %s: %v", order, r.Body, err)
	}
	if l.State == pay.OrderPending {
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if err != nil || secs < 1 || int64(secs) != l.RetryAfterSeconds {
			t.Fatalf("pending look-up of %s: Retry-After %q, retry_after_seconds %d", order, r.Header.Get("Retry-After"), l.RetryAfterSeconds)
		}
		l.retryAfter = time.Duration(secs) * time.Second
	}
	if w.lookedUp != nil {
		w.lookedUp(l)
	}
	return l
}

// checkout pays one order as docs/shop.md says, and returns the states
// the look-ups went through. The fault switches are as the test set them
// for the first attempt only; healed says to switch them all off.
func (w *shopWorld) checkout(t *testing.T, order string, healed func()) []string {
	t.Helper()
	key := "shop-" + order
	var seen []string
	const maxSteps = 12 // a bound, never reached when the advice is sound
	for attempt := 0; attempt < maxSteps; attempt++ {
		paid := w.pay(t, key, order)
		if attempt == 0 {
			healed()
		}
		if paid {
			return append(seen, "201")
		}
		// Anything but a 201: look the order up before anything else, and
		// keep looking while it is pending.
		l := w.lookUp(t, order)
		for steps := 0; l.State == pay.OrderPending && steps < maxSteps; steps++ {
			seen = append(seen, string(l.State))
			w.wait(l.retryAfter)
			l = w.lookUp(t, order)
		}
		switch l.State {
		case pay.OrderPaid:
			if !l.Paid || len(l.Charges) == 0 {
				t.Fatalf("order %s: paid without a charge: %+v", order, l)
			}
			return append(seen, "paid")
		case pay.OrderNotCharged:
			seen = append(seen, "not_charged:"+string(l.NotCharged.Reason))
			switch l.NotCharged.Reason {
			case pay.ReasonDeclined, pay.ReasonGatewayFailed, pay.ReasonValidation:
				key = fmt.Sprintf("shop-%s-%d", order, attempt+1) // the old key replays its refusal
			case pay.ReasonReleased:
				// the same key runs afresh
			default:
				t.Fatalf("order %s: unknown reason %q", order, l.NotCharged.Reason)
			}
		case pay.OrderNeverSeen:
			seen = append(seen, "never_seen") // send again with the same key
		default:
			t.Fatalf("order %s: still %s after %d looks", order, l.State, maxSteps)
		}
	}
	t.Fatalf("order %s: not paid after %d attempts (%v)", order, maxSteps, seen)
	return nil
}

func TestShopFollowingTheLookupNeverPaysTwice(t *testing.T) {
	waitsOnRealClocks(t)
	cases := []struct {
		name, faults string
		// timeout is the shop's; the delay fault outlasts it.
		timeout time.Duration
		// want is a state the look-ups must have gone through, "" none.
		want string
	}{
		{"with no fault", `{}`, 0, "201"},
		// The shop gives up while the key is held: long enough after
		// sending for the server to have claimed the key on a loaded
		// machine (a look-up before the claim truly says never_seen), and
		// well before the delay ends.
		{"when a delay outlasts the shop's time-out", `{"server":{"delay_ms":1200}}`, 400 * time.Millisecond, "pending"},
		{"when the connection never happens", `{"server":{"connection_never_happens":true}}`, 0, "never_seen"},
		{"when the server fails halfway", `{"server":{"fail_halfway":true}}`, 0, "pending"},
		{"when the server answers 500 after the charge", `{"server":{"server_error":true}}`, 0, "paid"},
		{"when the response is lost", `{"server":{"response_lost":true}}`, 0, "paid"},
		{"when the server crashes midway", `{"server":{"crash_midway":true}}`, 0, "pending"},
		{"when the gateway declines", `{"gateway":{"decline":true}}`, 0, "not_charged:declined"},
		{"when the gateway fails", `{"gateway":{"error":true}}`, 0, "not_charged:gateway_failed"},
		{"when the gateway times out", `{"gateway":{"timeout":true}}`, 0, "pending"},
		{"when the sweeper finds no charge and releases the key", `{"server":{"crash_midway":true},"gateway":{"error":true}}`, 0, "not_charged:released"},
	}
	// Each case checks out orders one after another, the same way each
	// time: a quick run samples five of them, a full run (fullRun) twenty.
	orders := 5
	if fullRun() {
		orders = 20
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.timeout == 0 {
				// A server of its own and a shop that waits 10 s: beside
				// the other such cases. The case with a tight time-out
				// runs first, alone among them.
				t.Parallel()
			}
			e := newFIEnv(t, Config{})
			timeout := c.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			tr := &http.Transport{DisableKeepAlives: true}
			t.Cleanup(tr.CloseIdleConnections)
			w := &shopWorld{e: e, client: &http.Client{Transport: tr, Timeout: timeout}}
			went := map[string]int{}
			for i := range orders {
				order := fmt.Sprintf("S-%03d", i)
				if c.timeout != 0 {
					// The delay outlasts the shop's time-out and its first
					// look-up, however slow the machine: it ends once the
					// shop has been answered.
					var once sync.Once
					release := e.holdServerDelay()
					w.lookedUp = func(shopLookup) { once.Do(release) }
				}
				e.setFaults(c.faults)
				for _, s := range w.checkout(t, order, func() { e.setFaults(`{}`) }) {
					went[s]++
				}
				w.wait(0) // whatever the server still had in flight for it
				if n := e.chargesFor(order); n != 1 {
					t.Fatalf("order %s: %d charges, want 1 (%v)", order, n, went)
				}
			}
			if went[c.want] < orders {
				t.Errorf("the look-ups went through %v; want %q for each of %d orders", went, c.want, orders)
			}
			if n := e.charges(); n != orders {
				t.Errorf("%d charges for %d orders", n, orders)
			}
			gw, err := e.DB.CountGatewayCharges(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if gw != orders {
				t.Errorf("the gateway holds %d charges for %d orders", gw, orders)
			}
		})
	}
}
