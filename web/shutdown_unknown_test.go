package web

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"net/http"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

// TestShutdownAnswersWhatTheBooksSay: a shutdown that will wait no longer
// ends the work of the payments in flight (AbandonWork), and each one
// answers what the server knows at that moment. One waiting on the
// gateway (a slow gateway) may have been charged: its answer says the
// outcome is unknown and how to find it out, its key stays started for
// the sweeper, and a restart's sweep, asking the gateway, closes it. One
// held before its gateway call (the delay switch) was not: its answer
// says nothing was charged, and its key is gone.
func TestShutdownAnswersWhatTheBooksSay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, faults string
		// at is the step the payment is in when the work is abandoned.
		at      live.Kind
		says    []string
		keyLeft bool
	}{
		{"waiting on the gateway", `{"gateway":{"latency_ms":10000}}`, live.GatewayCall,
			[]string{"whether the gateway charged is unknown", "GET /v1/payments?order_id=U-1", "retry with the same key"}, true},
		{"before its gateway call", `{"server":{"delay_ms":10000}}`, live.Delayed,
			[]string{"before it called the gateway: nothing was charged", "its key was released", "same key"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, Config{})
			if r := env.send(http.MethodPut, "/api/faults", stdjson.RawMessage(tc.faults)); r.Status != http.StatusOK {
				t.Fatalf("PUT /api/faults: %d %s", r.Status, r.Body)
			}
			sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
			answer := make(chan response, 1)
			go func() {
				r, err := env.tryPay("in-flight", `{"order_id":"U-1","amount_satang":100}`)
				if err != nil {
					r = response{Status: -1, Body: []byte(err.Error())}
				}
				answer <- r
			}()
			waitForKind(t, sub, tc.at)
			env.Server.AbandonWork()
			var r response
			select {
			case r = <-answer:
			case <-time.After(waitUntilBound):
				t.Fatal("no answer after the work was abandoned")
			}
			if r.Status != http.StatusServiceUnavailable {
				t.Fatalf("answer %d %s, want 503", r.Status, r.Body)
			}
			for _, w := range tc.says {
				if !bytes.Contains(r.Body, []byte(w)) {
					t.Errorf("the answer does not say %q: %s", w, r.Body)
				}
			}
			k, err := env.DB.GetKey(context.Background(), AnonymousScope, "in-flight")
			switch {
			case tc.keyLeft && (err != nil || k.Status != pay.StatusStarted):
				t.Fatalf("the key is %+v (%v), want it left started for the sweeper", k, err)
			case !tc.keyLeft && pay.ErrorCode(err) != pay.ENOTFOUND:
				t.Fatalf("the key is %+v (%v), want it released", k, err)
			}
			if n := env.charges(); n != 0 {
				t.Fatalf("%d charges recorded, want none", n)
			}
			if tc.keyLeft {
				// What the restarted server does first: ask the gateway,
				// which never finished the charge, and release the key.
				out, err := env.Server.Jobs().SweepOrphans(context.Background())
				if err != nil || len(out) != 1 || out[0].Charged {
					t.Fatalf("the start-up sweep: %+v (%v), want the key released", out, err)
				}
				if _, err := env.DB.GetKey(context.Background(), AnonymousScope, "in-flight"); pay.ErrorCode(err) != pay.ENOTFOUND {
					t.Fatalf("after the sweep the key is still there (%v)", err)
				}
			}
		})
	}
}

// waitForKind waits for an event of the kind on sub.
func waitForKind(t *testing.T, sub *live.Subscription, kind live.Kind) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		entries, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", kind, err)
		}
		for _, e := range entries {
			if e.Kind == kind {
				return
			}
		}
	}
}
