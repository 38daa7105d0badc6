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
	case <-time.After(10 * time.Second):
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
