package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

// dropped stands for "the connection closed with no response" in the
// tables below.
const dropped = -1

// A switchCase is one switch (or pair of switches) and what a learner
// sees: the first request, the state it leaves, and the retry with the
// same key.
type switchCase struct {
	name   string
	faults string // PUT /api/faults body

	first     int    // status of the first request, or dropped
	firstSlug string // problem type of the first answer when it is an error
	// left is the key's status after the first request: "" (released, or
	// never claimed), "started" or "done".
	left          string
	gatewayCharge bool // whether the gateway holds a charge after the first request

	// sweep is what the sweeper does once the key is older than the lock
	// timeout: "charged", "released", or "" when the key is not started.
	sweep string
	// switchOffFirst turns every switch off before the retry: the network
	// came back, or the presenter fixed the fault.
	switchOffFirst bool

	retry         int  // the retry's status
	retryReplayed bool // whether the retry is a replay of a saved response
	charges       int  // local charges for the key at the end
}

func TestEachSwitch(t *testing.T) {
	t.Parallel()
	cases := []switchCase{
		{name: "with every switch off, the first request is charged and a retry replays the 201",
			faults: `{}`, first: 201, left: "done", gatewayCharge: true,
			retry: 201, retryReplayed: true, charges: 1},
		{name: "with connection_never_happens, the request is dropped before the claim and a retry runs afresh",
			faults: `{"server":{"connection_never_happens":true}}`, first: dropped, left: "",
			switchOffFirst: true, retry: 201, charges: 1},
		{name: "with fail_halfway after the gateway charged, the key stays started until the sweeper records the charge",
			faults: `{"server":{"fail_halfway":true}}`, first: 500, firstSlug: "server-error", left: "started", gatewayCharge: true,
			sweep: "charged", retry: 201, retryReplayed: true, charges: 1},
		{name: "with fail_halfway after the gateway declined, the claim is released and a retry runs afresh",
			faults: `{"server":{"fail_halfway":true},"gateway":{"decline":true}}`, first: 503, firstSlug: "unavailable", left: "",
			switchOffFirst: true, retry: 201, charges: 1},
		{name: "with server_error, the 500 is saved with the charge and a retry replays the same 500",
			faults: `{"server":{"server_error":true}}`, first: 500, firstSlug: "server-error", left: "done", gatewayCharge: true,
			retry: 500, retryReplayed: true, charges: 1},
		{name: "with response_lost, the work commits, the connection closes, and a retry replays the 201",
			faults: `{"server":{"response_lost":true}}`, first: dropped, left: "done", gatewayCharge: true,
			retry: 201, retryReplayed: true, charges: 1},
		{name: "with crash_midway, the key stays started until the sweeper finds the gateway's charge",
			faults: `{"server":{"crash_midway":true}}`, first: dropped, left: "started", gatewayCharge: true,
			sweep: "charged", retry: 201, retryReplayed: true, charges: 1},
		{name: "with crash_midway while the gateway declines, the sweeper releases the key and a retry runs afresh",
			faults: `{"server":{"crash_midway":true},"gateway":{"decline":true}}`, first: dropped, left: "started",
			sweep: "released", switchOffFirst: true, retry: 201, charges: 1},
		{name: "with the gateway declining, the 402 is saved and a retry replays it without charging",
			faults: `{"gateway":{"decline":true}}`, first: 402, firstSlug: "payment-declined", left: "done",
			retry: 402, retryReplayed: true, charges: 0},
		{name: "with the gateway failing, the 502 is saved and a retry replays it without charging",
			faults: `{"gateway":{"error":true}}`, first: 502, firstSlug: "gateway-error", left: "done",
			retry: 502, retryReplayed: true, charges: 0},
		{name: "with the gateway timing out after charging, the key stays started until the sweeper records the charge",
			faults: `{"gateway":{"timeout":true}}`, first: 504, firstSlug: "gateway-timeout", left: "started", gatewayCharge: true,
			sweep: "charged", retry: 201, retryReplayed: true, charges: 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newFIEnv(t, Config{})
			key, order := fmt.Sprintf("switch-%d", i), fmt.Sprintf("S-%d", i)
			body := fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order)
			env.setFaults(tc.faults)

			first, err := env.payFI(key, body)
			switch {
			case tc.first == dropped && err == nil:
				t.Fatalf("first request: got %d %s, want the connection dropped", first.Status, first.Body)
			case tc.first != dropped && err != nil:
				t.Fatalf("first request: %v, want %d", err, tc.first)
			case tc.first != dropped && first.Status != tc.first:
				t.Fatalf("first request: got %d %s, want %d", first.Status, first.Body, tc.first)
			case tc.firstSlug != "":
				if got := problemSlug(t, first); got != tc.firstSlug {
					t.Fatalf("first request: problem %q, want %q", got, tc.firstSlug)
				}
			}
			if got := env.keyStatus(key); got != tc.left {
				t.Fatalf("after the first request the key is %q, want %q", got, tc.left)
			}
			if got := env.gatewayCharged(key); got != tc.gatewayCharge {
				t.Fatalf("after the first request the gateway charged = %v, want %v", got, tc.gatewayCharge)
			}
			if n := env.chargesFor(order); n > 1 {
				t.Fatalf("%d local charges for one key", n)
			}

			if tc.left == pay.StatusStarted {
				// Nobody can tell yet what happened: retries are turned away.
				for range 3 {
					r := env.mustPay(key, body)
					if r.Status != http.StatusConflict || problemSlug(t, r) != "request-in-progress" || r.Header.Get("Retry-After") == "" {
						t.Fatalf("retry while started: got %d %v %s, want 409 with Retry-After", r.Status, r.Header, r.Body)
					}
				}
				if rep := env.sweepNow(); len(rep.Closed) != 0 {
					t.Fatalf("a sweep before the lock timeout closed %+v", rep.Closed)
				}
				env.pastLockTimeout()
				rep := env.sweepNow()
				if len(rep.Closed) != 1 || rep.Closed[0].Key != key || rep.Closed[0].Outcome != tc.sweep {
					t.Fatalf("sweep closed %+v, want %s %s", rep.Closed, key, tc.sweep)
				}
			}
			if tc.switchOffFirst {
				env.setFaults(`{}`)
			}

			retry := env.mustPay(key, body)
			if retry.Status != tc.retry || isReplay(retry) != tc.retryReplayed {
				t.Fatalf("retry: got %d replayed=%v %s, want %d replayed=%v", retry.Status, isReplay(retry), retry.Body, tc.retry, tc.retryReplayed)
			}
			if tc.retryReplayed && tc.left == pay.StatusDone && tc.first != dropped && !bytes.Equal(retry.Body, first.Body) {
				t.Fatalf("retry body %s, want the first body %s again", retry.Body, first.Body)
			}
			again := env.mustPay(key, body)
			if again.Status != retry.Status || !bytes.Equal(again.Body, retry.Body) || !isReplay(again) {
				t.Fatalf("another retry: got %d %s, want %d %s replayed", again.Status, again.Body, retry.Status, retry.Body)
			}
			if n := env.chargesFor(order); n != tc.charges {
				t.Fatalf("%d local charges for the key, want %d", n, tc.charges)
			}
			if env.gatewayCharged(key) != (tc.charges == 1) {
				t.Fatalf("the gateway and the local charges disagree: gateway %v, local %d", env.gatewayCharged(key), tc.charges)
			}
			if tc.retry == http.StatusCreated {
				var ch struct {
					ID     string `json:"charge_id"`
					Status string `json:"status"`
				}
				if err := json.Unmarshal(retry.Body, &ch); err != nil || ch.Status != "paid" || !strings.HasPrefix(ch.ID, "ch_") {
					t.Fatalf("201 body %s is not a charge", retry.Body)
				}
			}
		})
	}
}

func TestDelaySwitch(t *testing.T) {
	t.Parallel()
	t.Run("a second click during the delay gets 409 and the first request still charges once", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		release := env.holdServerDelay()
		env.setFaults(`{"server":{"delay_ms":800}}`)
		body := `{"order_id":"D-1","amount_satang":5000}`

		firstDone := make(chan response, 1)
		go func() {
			r, err := env.payFI("delay-1", body)
			if err != nil {
				r.Status = dropped
			}
			firstDone <- r
		}()
		env.waitForEvent(live.Delayed, "delay-1")
		if got := env.keyStatus("delay-1"); got != pay.StatusStarted {
			t.Fatalf("during the delay the key is %q, want started", got)
		}
		second := env.mustPay("delay-1", body)
		if second.Status != http.StatusConflict {
			t.Fatalf("second click: got %d %s, want 409", second.Status, second.Body)
		}
		release()
		first := <-firstDone
		if first.Status != http.StatusCreated {
			t.Fatalf("first request: got %d %s, want 201", first.Status, first.Body)
		}
		retry := env.mustPay("delay-1", body)
		if retry.Status != http.StatusCreated || !isReplay(retry) || !bytes.Equal(retry.Body, first.Body) {
			t.Fatalf("retry: got %d %s, want the 201 replayed", retry.Status, retry.Body)
		}
		if n := env.chargesFor("D-1"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("a delay cut short before the gateway call releases the key and a retry runs afresh", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		var cut atomic.Bool
		cut.Store(true)
		env.Server.payments.sleep = func(ctx context.Context, d time.Duration) error {
			if cut.Load() {
				return context.DeadlineExceeded
			}
			return nil
		}
		env.setFaults(`{"server":{"delay_ms":800}}`)
		body := `{"order_id":"D-2","amount_satang":5000}`
		first := env.mustPay("delay-2", body)
		if first.Status != http.StatusServiceUnavailable || problemSlug(t, first) != "unavailable" {
			t.Fatalf("first request: got %d %s, want 503", first.Status, first.Body)
		}
		if got := env.keyStatus("delay-2"); got != "" || env.gatewayCharged("delay-2") {
			t.Fatalf("after the cut the key is %q and the gateway charged=%v; want neither", got, env.gatewayCharged("delay-2"))
		}
		cut.Store(false)
		retry := env.mustPay("delay-2", body)
		if retry.Status != http.StatusCreated || isReplay(retry) {
			t.Fatalf("retry: got %d replayed=%v, want a fresh 201", retry.Status, isReplay(retry))
		}
		if n := env.chargesFor("D-2"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
}

func TestGatewayLatencySwitch(t *testing.T) {
	t.Parallel()
	t.Run("while the gateway is slow a retry gets 409, then the single charge is replayed", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"gateway":{"latency_ms":300}}`)
		release := env.holdGateway() // keeps the latency on and waits for release
		body := `{"order_id":"L-1","amount_satang":7000}`
		firstDone := make(chan response, 1)
		go func() {
			r, err := env.payFI("latency-1", body)
			if err != nil {
				r.Status = dropped
			}
			firstDone <- r
		}()
		env.waitForEvent(live.GatewayCall, "latency-1")
		if r := env.mustPay("latency-1", body); r.Status != http.StatusConflict {
			t.Fatalf("retry during the gateway call: got %d %s, want 409", r.Status, r.Body)
		}
		release()
		first := <-firstDone
		if first.Status != http.StatusCreated {
			t.Fatalf("first request: got %d, want 201", first.Status)
		}
		if r := env.mustPay("latency-1", body); r.Status != http.StatusCreated || !isReplay(r) {
			t.Fatalf("retry: got %d replayed=%v, want 201 replayed", r.Status, isReplay(r))
		}
		if n := env.chargesFor("L-1"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
}

// TestArticleFailureCases puts the article's three cases side by side:
// in each, a retry with the same key ends with exactly one charge.
func TestArticleFailureCases(t *testing.T) {
	t.Parallel()
	type failureCase struct {
		name   string
		faults string
		// recover is what has to happen before the retry can succeed.
		recover func(env *fiEnv)
		// clientSawError is true when the first request ends, for the
		// client, in a network error: cases 1 and 3 look the same.
		clientSawError bool
		replayed       bool
	}
	cases := []failureCase{
		{name: "1. the connection never happens: nothing was claimed, so the retry runs the payment once",
			faults: `{"server":{"connection_never_happens":true}}`, clientSawError: true,
			recover: func(env *fiEnv) { env.setFaults(`{}`) }},
		{name: "2. it fails halfway: the rollback leaves the key started, the sweeper finds the gateway's charge, the retry replays it",
			faults: `{"server":{"fail_halfway":true}}`,
			recover: func(env *fiEnv) {
				env.pastLockTimeout()
				env.sweepNow()
			}, replayed: true},
		{name: "3. it succeeds but the response is lost: the retry replays the saved 201 instead of charging again",
			faults: `{"server":{"response_lost":true}}`, clientSawError: true,
			recover: func(env *fiEnv) {}, replayed: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newFIEnv(t, Config{})
			key, order := fmt.Sprintf("article-%d", i+1), fmt.Sprintf("A-%d", i+1)
			body := fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order)
			env.setFaults(tc.faults)
			_, err := env.payFI(key, body)
			if (err != nil) != tc.clientSawError {
				t.Fatalf("first request error = %v, want a network error: %v", err, tc.clientSawError)
			}
			tc.recover(env)
			retry := env.mustPay(key, body)
			if retry.Status != http.StatusCreated || isReplay(retry) != tc.replayed {
				t.Fatalf("retry: got %d replayed=%v %s, want 201 replayed=%v", retry.Status, isReplay(retry), retry.Body, tc.replayed)
			}
			if n := env.chargesFor(order); n != 1 {
				t.Fatalf("%d charges after the retry, want exactly 1", n)
			}
			if n, _ := env.DB.CountGatewayCharges(t.Context()); n != 1 {
				t.Fatalf("the gateway holds %d charges, want 1", n)
			}
		})
	}
}

func TestServerErrorIsSavedAndReconcilable(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	env.setFaults(`{"server":{"server_error":true}}`)
	body := `{"order_id":"E-500","amount_satang":42000}`
	first := env.mustPay("err-500", body)
	if first.Status != http.StatusInternalServerError || problemSlug(t, first) != "server-error" {
		t.Fatalf("first: got %d %s, want 500 server-error", first.Status, first.Body)
	}

	t.Run("a retry with the same key gets the same 500, marked as a replay", func(t *testing.T) {
		env.setFaults(`{}`) // even with the fault gone, the saved answer stands
		retry := env.mustPay("err-500", body)
		if retry.Status != 500 || !bytes.Equal(retry.Body, first.Body) || !isReplay(retry) {
			t.Fatalf("retry: got %d replayed=%v %s, want %s replayed", retry.Status, isReplay(retry), retry.Body, first.Body)
		}
	})
	t.Run("looking the order up shows the charge that the 500 hid", func(t *testing.T) {
		r := env.must(http.MethodGet, paymentsPath+"?order_id=E-500", "")
		var got struct {
			Paid    bool         `json:"paid"`
			Charges []pay.Charge `json:"charges"`
		}
		if err := json.Unmarshal(r.Body, &got); err != nil || r.Status != 200 {
			t.Fatalf("lookup: %d %s", r.Status, r.Body)
		}
		if !got.Paid || len(got.Charges) != 1 || got.Charges[0].AmountSatang != 42000 {
			t.Fatalf("lookup: %s, want one charge of 42000", r.Body)
		}
	})
}

func TestCrashMidwayIsClosedByTheSweeper(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	env.setFaults(`{"server":{"crash_midway":true}}`)
	body := `{"order_id":"C-1","amount_satang":99000}`
	env.mustDrop("crash-1", body)

	t.Run("retries get 409 while the key is younger than the lock timeout", func(t *testing.T) {
		for range 3 {
			if r := env.mustPay("crash-1", body); r.Status != http.StatusConflict {
				t.Fatalf("retry: got %d, want 409", r.Status)
			}
		}
		env.Clock.Advance(env.Server.cfg.LockTimeout - time.Second)
		if rep := env.sweepNow(); len(rep.Closed) != 0 {
			t.Fatalf("sweep closed a young key: %+v", rep.Closed)
		}
		if r := env.mustPay("crash-1", body); r.Status != http.StatusConflict {
			t.Fatalf("retry: got %d, want 409", r.Status)
		}
	})
	var swept SweptKey
	t.Run("once past the lock timeout the sweeper records the gateway's charge", func(t *testing.T) {
		env.Clock.Advance(2 * time.Second)
		rep := env.sweepNow()
		if len(rep.Closed) != 1 || rep.Closed[0].Outcome != "charged" || rep.Closed[0].OrderID != "C-1" {
			t.Fatalf("sweep: %+v", rep)
		}
		swept = rep.Closed[0]
	})
	t.Run("then the retry replays a 201 naming that charge", func(t *testing.T) {
		r := env.mustPay("crash-1", body)
		if r.Status != http.StatusCreated || !isReplay(r) || !strings.Contains(string(r.Body), swept.ChargeID) {
			t.Fatalf("retry: got %d %s, want 201 with %s", r.Status, r.Body, swept.ChargeID)
		}
		if n := env.chargesFor("C-1"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("the swept key is published on the timeline", func(t *testing.T) {
		found := false
		for _, e := range env.Server.hub.Recent(100) {
			found = found || (e.Kind == live.Swept && e.Key == "crash-1" && e.Status == http.StatusCreated)
		}
		if !found {
			t.Fatal("no swept event for the key")
		}
	})
}
