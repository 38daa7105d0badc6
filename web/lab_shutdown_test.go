package web

import (
	"bytes"
	stdjson "encoding/json"
	"net/http"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

// A payment of the lock in memory's unguarded tables, waiting on the
// gateway when a shutdown stops waiting for it, is answered that its
// outcome is unknown and how to find out, and a retry with its key
// replays that answer rather than meeting a started row (409).
func TestLabPaymentAbandonedOnTheGatewayAnswersOutcomeUnknown(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabMemoryLock}})
	if r := env.send(http.MethodPut, "/api/faults", stdjson.RawMessage(`{"gateway":{"latency_ms":10000}}`)); r.Status != http.StatusOK {
		t.Fatalf("PUT /api/faults: %d %s", r.Status, r.Body)
	}
	sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
	const body = `{"order_id":"U-2","amount_satang":100}`
	answer := make(chan response, 1)
	go func() {
		r, err := env.tryPay("in-flight", body)
		if err != nil {
			r = response{Status: -1, Body: []byte(err.Error())}
		}
		answer <- r
	}()
	waitForKind(t, sub, live.GatewayCall)
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
	for _, w := range []string{"whether the gateway charged is unknown", "U-2", "same key"} {
		if !bytes.Contains(r.Body, []byte(w)) {
			t.Errorf("the answer does not say %q: %s", w, r.Body)
		}
	}
	retry := env.pay("in-flight", body)
	if retry.Status == http.StatusConflict || !bytes.Contains(retry.Body, []byte("whether the gateway charged is unknown")) {
		t.Fatalf("the retry: %d %s, want the unknown answer replayed", retry.Status, retry.Body)
	}
}

// A payment of the lock in memory waiting for the lock when a shutdown
// stops waiting for the work is answered at once that nothing was
// charged, rather than losing its connection when the grace runs out.
func TestLabLockWaiterAtShutdownIsAnsweredNothingCharged(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabMemoryLock, CheckGapMS: 1000}})
	sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
	reached, release := holdGap(env.Server)
	defer close(release)
	const key, body = "double-click", `{"order_id":"U-3","amount_satang":100}`
	answers := make(chan response, 2)
	for range 2 {
		go func() {
			r, err := env.tryPay(key, body)
			if err != nil {
				r = response{Status: -1, Body: []byte(err.Error())}
			}
			answers <- r
		}()
	}
	<-reached // one request holds the lock, in the lab's pause
	waitEvents(t, sub, 1, "the other waiting for the lock", noteIs(memoryLockWaiting))
	env.Server.AbandonWork()
	var r response
	select {
	case r = <-answers:
	case <-time.After(waitUntilBound):
		t.Fatal("the waiter was not answered after the work was abandoned")
	}
	if r.Status != http.StatusServiceUnavailable || !bytes.Contains(r.Body, []byte("nothing was charged")) || !bytes.Contains(r.Body, []byte("same key")) {
		t.Fatalf("the waiter's answer: %d %s", r.Status, r.Body)
	}
}
