package web

import (
	"context"
	"net/http"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

// TestSweeper drives the lock-timeout sweeper with the manual clock: no
// test here waits for real time to pass.
func TestSweeper(t *testing.T) {
	t.Parallel()
	const body = `{"order_id":"W-1","amount_satang":1500}`

	t.Run("a started key the gateway charged becomes done with the 201 a live request would have sent", func(t *testing.T) {
		env := newFIEnv(t, Config{LockTimeout: 30 * time.Second})
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("sw-charged", body)
		env.pastLockTimeout()
		rep := env.sweepNow()
		if len(rep.Closed) != 1 || rep.Closed[0].Outcome != "charged" || rep.Closed[0].ChargeID == "" {
			t.Fatalf("sweep: %+v", rep)
		}
		k, err := env.DB.GetKey(t.Context(), AnonymousScope, "sw-charged")
		if err != nil || k.Status != pay.StatusDone || k.ResponseStatus != http.StatusCreated {
			t.Fatalf("key after the sweep: %+v %v", k, err)
		}
		cs, _ := env.DB.ChargesByOrder(t.Context(), AnonymousScope, "W-1")
		if len(cs) != 1 || string(k.ResponseBody) != string(cs[0].ResponseBody()) {
			t.Fatalf("saved body %s does not describe the recorded charges %+v", k.ResponseBody, cs)
		}
		gw, _, _ := env.DB.LookupGatewayCharge(t.Context(), gatewayKey(AnonymousScope, "sw-charged"))
		if cs[0].GatewayRef != gw.ID {
			t.Fatalf("local charge refers to %s, the gateway's is %s", cs[0].GatewayRef, gw.ID)
		}
		if r := env.mustPay("sw-charged", body); r.Status != http.StatusCreated || !isReplay(r) || string(r.Body) != string(k.ResponseBody) {
			t.Fatalf("retry: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a started key the gateway never charged is released and a retry runs afresh", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"server":{"crash_midway":true},"gateway":{"error":true}}`)
		env.mustDrop("sw-free", body)
		if env.gatewayCharged("sw-free") {
			t.Fatal("the gateway charged although it failed")
		}
		env.pastLockTimeout()
		rep := env.sweepNow()
		if len(rep.Closed) != 1 || rep.Closed[0].Outcome != "released" {
			t.Fatalf("sweep: %+v", rep)
		}
		if got := env.keyStatus("sw-free"); got != "" {
			t.Fatalf("the key is %q after the sweep, want it gone", got)
		}
		env.setFaults(`{}`)
		r := env.mustPay("sw-free", body)
		if r.Status != http.StatusCreated || isReplay(r) {
			t.Fatalf("retry: got %d replayed=%v, want a fresh 201", r.Status, isReplay(r))
		}
		if n := env.chargesFor("W-1"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("a started key exactly as old as the lock timeout is left alone, one millisecond older it is closed", func(t *testing.T) {
		env := newFIEnv(t, Config{LockTimeout: 10 * time.Second})
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("sw-young", body)
		env.Clock.Advance(10 * time.Second)
		if rep := env.sweepNow(); len(rep.Closed) != 0 {
			t.Fatalf("the sweep closed a key that may still be running: %+v", rep.Closed)
		}
		if got := env.keyStatus("sw-young"); got != pay.StatusStarted {
			t.Fatalf("key is %q, want started", got)
		}
		env.Clock.Advance(time.Millisecond)
		if rep := env.sweepNow(); len(rep.Closed) != 1 {
			t.Fatalf("the sweep did not close the stuck key: %+v", rep.Closed)
		}
	})

	t.Run("a key whose request is still at the gateway is not swept before the lock timeout", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		release := env.holdGateway()
		done := make(chan response, 1)
		go func() {
			r, _ := env.payFI("sw-live", body)
			done <- r
		}()
		env.waitForEvent(live.GatewayCall, "sw-live")
		env.Clock.Advance(env.Server.cfg.LockTimeout / 2)
		if rep := env.sweepNow(); len(rep.Closed) != 0 {
			t.Fatalf("swept a live request: %+v", rep.Closed)
		}
		release()
		if r := <-done; r.Status != http.StatusCreated {
			t.Fatalf("the live request got %d %s, want 201", r.Status, r.Body)
		}
		if n := env.chargesFor("W-1"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("the start-up sweep closes every started key whatever its age", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("sw-orphan", body)
		out, err := env.Server.Jobs().SweepOrphans(t.Context())
		if err != nil || len(out) != 1 || !out[0].Charged {
			t.Fatalf("start-up sweep: %+v %v", out, err)
		}
		if got := env.keyStatus("sw-orphan"); got != pay.StatusDone {
			t.Fatalf("key is %q, want done", got)
		}
	})

	t.Run("keys found started at start-up are closed later through the claim they were found with", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("sw-found", body)
		env.mustDrop("sw-claimed-since", `{"order_id":"W-2","amount_satang":1500}`)
		found, err := env.Server.Jobs().Orphans(t.Context())
		if err != nil || len(found) != 2 {
			t.Fatalf("found %+v %v, want the two keys", found, err)
		}
		// Before the sweep comes round, one key is released and claimed
		// afresh: that claim is a request of this life, not an orphan.
		var old pay.KeyRow
		for _, k := range found {
			if k.Key == "sw-claimed-since" {
				old = k
			}
		}
		if ok, err := env.DB.Release(t.Context(), old.Scope, old.Key, old.Claim, pay.ReleasedBySweeper); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		again, err := env.DB.Claim(t.Context(), pay.ClaimRequestOf(old))
		if err != nil || !again.Claimed {
			t.Fatalf("claim afresh: %+v %v", again, err)
		}
		out, err := env.Server.Jobs().SweepFound(t.Context(), found)
		if err != nil || len(out) != 1 || out[0].Row.Key != "sw-found" || !out[0].Charged {
			t.Fatalf("sweep of the keys found: %+v %v, want sw-found charged alone", out, err)
		}
		if got := env.keyStatus("sw-found"); got != pay.StatusDone {
			t.Fatalf("sw-found is %q, want done", got)
		}
		k, err := env.DB.GetKey(t.Context(), old.Scope, old.Key)
		if err != nil || k.Status != pay.StatusStarted || k.Claim != again.Claim {
			t.Fatalf("the key claimed afresh: %+v %v, want it started under its new claim", k, err)
		}
	})

	t.Run("the periodic job sweeps on its own", func(t *testing.T) {
		env := newFIEnv(t, Config{SweepEvery: time.Millisecond, PruneEvery: time.Hour})
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("sw-periodic", body)
		env.pastLockTimeout()
		ctx, cancel := context.WithCancel(t.Context())
		jobsDone := make(chan struct{})
		go func() { defer close(jobsDone); env.Server.Jobs().Run(ctx) }()
		env.waitForEvent(live.Swept, "sw-periodic")
		cancel()
		<-jobsDone
		if got := env.keyStatus("sw-periodic"); got != pay.StatusDone {
			t.Fatalf("key is %q, want done", got)
		}
	})
}

// TestSweepReportCountsEveryKeyTheRoomsSweepsClosed: the periodic sweeper
// closes a stuck key before the presenter's button sweeps; the button's
// report says it closed none itself and that the room's sweeps closed
// one, and after a reset the count starts again.
func TestSweepReportCountsEveryKeyTheRoomsSweepsClosed(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{LockTimeout: 10 * time.Second})
	env.setFaults(`{"server":{"crash_midway":true}}`)
	env.mustDrop("room-1", `{"order_id":"R-1","amount_satang":100}`)
	env.mustDrop("room-2", `{"order_id":"R-2","amount_satang":100}`)
	env.Clock.Advance(11 * time.Second)
	// What the periodic job does (RunJobs calls Sweep).
	if out, err := env.Server.Jobs().Sweep(t.Context()); err != nil || len(out) != 2 {
		t.Fatalf("periodic sweep: %v, %v", out, err)
	}
	rep := env.sweepNow()
	if len(rep.Closed) != 0 || rep.ClosedInRoom != 2 {
		t.Fatalf("the button's sweep after the periodic one: closed %+v, in the room %d; want 0 and 2", rep.Closed, rep.ClosedInRoom)
	}
	env.mustDrop("room-3", `{"order_id":"R-3","amount_satang":100}`)
	env.Clock.Advance(11 * time.Second)
	if rep := env.sweepNow(); len(rep.Closed) != 1 || rep.ClosedInRoom != 3 {
		t.Fatalf("a sweep that closes one more: closed %+v, in the room %d; want 1 and 3", rep.Closed, rep.ClosedInRoom)
	}
	if r := env.must(http.MethodPost, "/api/reset", ""); r.Status != http.StatusOK {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	if rep := env.sweepNow(); len(rep.Closed) != 0 || rep.ClosedInRoom != 0 {
		t.Fatalf("after a reset: closed %+v, in the room %d; want 0 and 0", rep.Closed, rep.ClosedInRoom)
	}
}
