package web

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// ledgers counts the gateway's charges and the local ones; after any
// sequence of requests, sweeps and resets the two must be equal.
func (e *fiEnv) ledgers() (gateway, local int) {
	e.t.Helper()
	g, err := e.DB.CountGatewayCharges(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return g, e.charges()
}

func (e *fiEnv) assertLedgersAgree() {
	e.t.Helper()
	if g, l := e.ledgers(); g != l {
		e.t.Fatalf("the gateway holds %d charges, the payments file %d", g, l)
	}
}

// payAsync posts a payment in the background.
func (e *fiEnv) payAsync(key, body string) <-chan response {
	done := make(chan response, 1)
	go func() {
		r, _ := e.payFI(key, body)
		done <- r
	}()
	return done
}

// resetWhileBusy posts POST /api/reset in the background and returns once
// the reset either has finished or is waiting for the payments in flight:
// a waiting writer makes TryRLock fail. No timer decides the order.
func (e *fiEnv) resetWhileBusy() <-chan response {
	e.t.Helper()
	done := make(chan response, 1)
	go func() {
		r, _ := e.call(http.MethodPost, "/api/reset", "")
		done <- r
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if len(done) > 0 {
			return done // the reset did not wait
		}
		if !e.Server.payments.inflight.TryRLock() {
			return done // the reset is waiting
		}
		e.Server.payments.inflight.RUnlock()
		runtime.Gosched()
	}
	e.t.Fatal("the reset neither finished nor waited")
	return nil
}

func TestSweepNeverClosesARunningRequest(t *testing.T) {
	t.Parallel()
	// The reproduction: a delayed payment is still running when the demo
	// clock is pushed past the lock timeout and the sweeper is run.
	env := newFIEnv(t, Config{LockTimeout: 30 * time.Second})
	release := env.holdServerDelay()
	env.setFaults(`{"server":{"delay_ms":2000}}`)
	body := `{"order_id":"F-1","amount_satang":4200}`
	done := env.payAsync("fence-1", body)
	env.waitForEvent(live.Delayed, "fence-1")
	if r := env.must(http.MethodPost, "/api/clock/advance", `{"seconds":31}`); r.Status != http.StatusOK {
		t.Fatalf("clock: %d %s", r.Status, r.Body)
	}
	if rep := env.sweepNow(); len(rep.Closed) != 0 {
		t.Fatalf("the sweep closed a key whose request is still running: %+v", rep.Closed)
	}
	release()
	r := <-done
	if r.Status != http.StatusCreated {
		t.Fatalf("the payment answered %d %s, want 201", r.Status, r.Body)
	}
	env.assertLedgersAgree()
	if n := env.chargesFor("F-1"); n != 1 {
		t.Fatalf("%d local charges, want 1", n)
	}
	list := env.must(http.MethodGet, "/v1/payments?order_id=F-1", "")
	if !strings.Contains(string(list.Body), `"paid":true`) {
		t.Fatalf("the order is not paid: %s", list.Body)
	}
	// Once the request has ended, its key is done and the sweeper has
	// nothing to do with it.
	if rep := env.sweepNow(); len(rep.Closed) != 0 {
		t.Fatalf("the sweep closed a done key: %+v", rep.Closed)
	}
	if again := env.mustPay("fence-1", body); !isReplay(again) || string(again.Body) != string(r.Body) {
		t.Fatalf("retry: %d %s", again.Status, again.Body)
	}
}

func TestResetWaitsForPaymentsInFlight(t *testing.T) {
	t.Parallel()
	t.Run("a payment at the gateway finishes before the reset erases it", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		release := env.holdGateway()
		done := env.payAsync("reset-live", `{"order_id":"F-2","amount_satang":4200}`)
		env.waitForEvent(live.GatewayCall, "reset-live")
		reset := env.resetWhileBusy()
		release()
		if r := <-done; r.Status != http.StatusCreated {
			t.Fatalf("the payment answered %d %s, want 201", r.Status, r.Body)
		}
		if r := <-reset; r.Status != http.StatusOK {
			t.Fatalf("reset: %d %s", r.Status, r.Body)
		}
		if g, l := env.ledgers(); g != 0 || l != 0 {
			t.Fatalf("after the reset the gateway holds %d charges and the payments file %d, want a clean slate", g, l)
		}
		if started, done, _ := env.DB.KeyCounts(t.Context()); started+done != 0 {
			t.Fatalf("%d started and %d done keys survive the reset", started, done)
		}
	})

	t.Run("a check-then-insert request of the lab finishes before the reset, and the key is new afterwards", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		key := uuid.NewString()
		body := `{"order_id":"F-3","amount_satang":4200}`
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert, CheckGapMS: 100}})
		release := env.holdServerDelay() // the gap between check and insert
		done := env.payAsync(key, body)
		env.waitForEvent(labKind, key)
		reset := env.resetWhileBusy()
		release()
		<-done
		if r := <-reset; r.Status != http.StatusOK {
			t.Fatalf("reset: %d %s", r.Status, r.Body)
		}
		if o := env.outcomes().CheckThenInsert; o.KeyRows != 0 || o.Charges != 0 {
			t.Fatalf("the lab's rows survived the reset: %+v", o)
		}
		env.assertLedgersAgree()
		if env.Server.lab.Settings().Server.Mode != room.LabCorrect {
			t.Fatalf("lab mode after reset: %s", env.Server.lab.Settings().Server.Mode)
		}
		r := env.mustPay(key, body)
		if r.Status != http.StatusCreated || isReplay(r) {
			t.Fatalf("the key after the reset: %d replayed=%v %s", r.Status, isReplay(r), r.Body)
		}
		if g, l := env.ledgers(); g != 1 || l != 1 {
			t.Fatalf("gateway %d, local %d charges, want 1 and 1", g, l)
		}
	})
}

func TestKeyReusedForAnotherOrder(t *testing.T) {
	t.Parallel()
	const first = `{"order_id":"A-1","amount_satang":1000}`
	const second = `{"order_id":"B-2","amount_satang":2000}`

	t.Run("after its key row is pruned, a key used for another order is refused with 422 naming the order and the date", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		paid := env.mustPay("reuse", first)
		env.Clock.Advance(25 * time.Hour)
		if n, err := env.Server.Jobs().Prune(t.Context()); err != nil || n != 1 {
			t.Fatalf("prune: %d %v", n, err)
		}
		r := env.mustPay("reuse", second)
		if r.Status != http.StatusUnprocessableEntity || problemSlug(t, r) != string(pay.EMISMATCH) {
			t.Fatalf("reuse: %d %s", r.Status, r.Body)
		}
		if !strings.Contains(string(r.Body), "A-1") || !strings.Contains(string(r.Body), "2026-11-30") {
			t.Fatalf("the refusal does not say which order and when: %s", r.Body)
		}
		if strings.Contains(string(r.Body), paid.JSON(t)["charge_id"].(string)) && r.Status == http.StatusCreated {
			t.Fatal("answered with the other order's charge")
		}
		if got := env.keyStatus("reuse"); got != "" {
			t.Fatalf("the refused request left the key %s", got)
		}
		if n := env.chargesFor("B-2"); n != 0 {
			t.Fatalf("order B-2 has %d charges", n)
		}
		env.assertLedgersAgree()
		// The same order again is a late retry: it gets its own charge.
		late := env.mustPay("reuse", first)
		if late.Status != http.StatusCreated || late.JSON(t)["charge_id"] != paid.JSON(t)["charge_id"] {
			t.Fatalf("late retry of the first order: %d %s", late.Status, late.Body)
		}
	})

	t.Run("when only the gateway remembers the key, its charge is recorded and the request is refused", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		if _, _, err := env.DB.RecordGatewayCharge(t.Context(), pay.GatewayCharge{Key: gatewayKey(AnonymousScope, "orphan"),
			ID: "gw_orphan", OrderID: "A-1", AmountSatang: 1000, CreatedAt: env.Server.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		r := env.mustPay("orphan", second)
		if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "A-1") {
			t.Fatalf("got %d %s, want 422 naming order A-1", r.Status, r.Body)
		}
		if n := env.chargesFor("A-1"); n != 1 {
			t.Fatalf("the gateway's charge for A-1 is recorded %d times, want once", n)
		}
		env.assertLedgersAgree()
	})

	t.Run("the policy is published", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		var p Policy
		if err := json.Unmarshal(env.must(http.MethodGet, "/v1/idempotency-policy", "").Body, &p); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.KeyReuse, "422") {
			t.Fatalf("policy on key reuse: %q", p.KeyReuse)
		}
	})
}

// TestKeyTableOnlyLabFollowsTheProtocol: the lab's key-table-only mode
// differs from the real protocol only in where it records the charge, so
// every fault answers as it does in the real protocol and nothing it
// saves is answered wrongly once the lab is back to correct.
func TestKeyTableOnlyLabFollowsTheProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, faults string
		first        int  // status of the first answer; 0 = dropped connection
		retry        int  // status of the retry once the lab is back to correct
		replayed     bool // the retry is a replay
	}{
		{"a gateway time-out is not saved: the key stays started for the sweeper", `{"gateway":{"timeout":true}}`, http.StatusGatewayTimeout, http.StatusConflict, false},
		{"a server error is saved and replayed", `{"server":{"server_error":true}}`, http.StatusInternalServerError, http.StatusInternalServerError, true},
		{"a transaction failing halfway leaves the key started", `{"server":{"fail_halfway":true}}`, http.StatusInternalServerError, http.StatusConflict, false},
		{"a crash midway drops the connection and leaves the key started", `{"server":{"crash_midway":true}}`, 0, http.StatusConflict, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []room.LabMode{room.LabCorrect, room.LabKeyTableOnly} {
				env := newFIEnv(t, Config{})
				env.putLab(room.LabSettings{Server: room.LabServer{Mode: mode}})
				env.setFaults(tc.faults)
				body := `{"order_id":"T-1","amount_satang":700}`
				first, err := env.payFI("kto", body)
				if got := first.Status; (err != nil) != (tc.first == 0) || (err == nil && got != tc.first) {
					t.Fatalf("%s: first answer %d %v, want %d", mode, got, err, tc.first)
				}
				env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCorrect}})
				env.setFaults(`{}`)
				r := env.mustPay("kto", body)
				if r.Status != tc.retry || isReplay(r) != tc.replayed {
					t.Fatalf("%s: retry %d replayed=%v %s, want %d replayed=%v", mode, r.Status, isReplay(r), r.Body, tc.retry, tc.replayed)
				}
				// Past the lock timeout the sweeper settles a started key with
				// what the gateway did, under whichever reference it was charged.
				env.pastLockTimeout()
				env.sweepNow()
				env.assertLedgersAgree()
				if st := env.keyStatus("kto"); st == pay.StatusStarted {
					t.Fatalf("%s: the key is still started after the sweep", mode)
				}
			}
		})
	}
}

func TestClaimedWorkIsBoundedByTheGatewayTimeout(t *testing.T) {
	// The work runs under the server's own context, bounded by the gateway
	// time-out: a gateway that never answers is a 504, and the key stays
	// started for the sweeper.
	env := newFIEnv(t, Config{GatewayTimeout: 50 * time.Millisecond})
	release := env.holdGateway()
	defer release()
	r := env.mustPay("bounded", `{"order_id":"F-9","amount_satang":100}`)
	if r.Status != http.StatusGatewayTimeout {
		t.Fatalf("got %d %s, want 504", r.Status, r.Body)
	}
	if st := env.keyStatus("bounded"); st != pay.StatusStarted {
		t.Fatalf("key is %q, want started", st)
	}
}
