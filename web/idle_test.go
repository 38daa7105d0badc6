package web

import (
	"testing"
	"time"

	"paytwice/pay"
)

// TestIdleSweeps drives the periodic sweep with the manual clock: it asks
// the database nothing while no key can be started, and still closes
// every key that was.
func TestIdleSweeps(t *testing.T) {
	t.Parallel()
	const body = `{"order_id":"I-1","amount_satang":700}`
	sweep := func(t *testing.T, env *fiEnv) bool {
		t.Helper()
		queried, err := env.Server.keySweeper().periodicSweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return queried
	}

	t.Run("an idle server stops querying; a key left started by a crash is still swept", func(t *testing.T) {
		env := newFIEnv(t, Config{LockTimeout: 30 * time.Second})
		if !sweep(t, env) {
			t.Fatal("the first sweep did not look for started keys")
		}
		if sweep(t, env) {
			t.Fatal("the sweep queried again although nothing was claimed since it found no started key")
		}
		select {
		case <-env.Server.payments.idleSweeps.wake: // a stale wake, if any, from before
		default:
		}
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("idle-crash", body)
		select {
		case <-env.Server.payments.idleSweeps.wake:
		default:
			t.Fatal("a claim did not wake the job loop")
		}
		if !sweep(t, env) {
			t.Fatal("the sweep skipped its query after a claim")
		}
		if got := env.keyStatus("idle-crash"); got != pay.StatusStarted {
			t.Fatalf("key is %q before the lock timeout, want started", got)
		}
		if !sweep(t, env) {
			t.Fatal("the sweep stopped querying while a key is still started")
		}
		env.pastLockTimeout()
		if !sweep(t, env) {
			t.Fatal("the sweep did not query past the lock timeout")
		}
		if got := env.keyStatus("idle-crash"); got != pay.StatusDone {
			t.Fatalf("key is %q after the sweep, want done", got)
		}
		if !sweep(t, env) || sweep(t, env) {
			t.Fatal("once every key was closed, the sweep should look once more and then stop")
		}
	})

	t.Run("a key already started when the server starts is found by its first sweep", func(t *testing.T) {
		env := newFIEnv(t, Config{LockTimeout: 30 * time.Second})
		if _, err := env.DB.LabInsertKeyUnguarded(t.Context(), pay.ClaimRequest{Scope: AnonymousScope, Key: "idle-left",
			Method: "POST", Path: paymentsPath, Fingerprint: "f", OrderID: "I-2", AmountSatang: 700}); err != nil {
			t.Fatal(err)
		}
		env.pastLockTimeout()
		if !sweep(t, env) {
			t.Fatal("the first sweep did not query")
		}
		if got := env.keyStatus("idle-left"); got != "" {
			t.Fatalf("key is %q after the sweep, want it released", got)
		}
	})

	t.Run("storage shared with other servers is queried on every sweep", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.Server.payments.idleSweeps.private = false
		for range 3 {
			if !sweep(t, env) {
				t.Fatal("the sweep skipped its query on shared storage")
			}
		}
	})
}
