package web

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// pgServerConfig starts one server with cfg on the database at url, in
// this process, behind its own listener on 127.0.0.1 and on the real
// clock, and waits until it follows the room.
func pgServerConfig(t *testing.T, url string, cfg Config) (*testEnv, *postgres.DB) {
	t.Helper()
	clock := sim.NewClock(nil)
	db, err := postgres.Open(context.Background(), url, postgres.Options{Now: clock.Now, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = log.New(io.Discard, "", 0)
	}
	srv := NewServer(cfg, db, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close(); db.Close() })
	return &testEnv{t: t, tb: t, URL: hs.URL, Server: srv, HTTP: hs}, db
}

// heldOn turns step mode on for env, with holds that end only when the
// test lets them go (no time limit), and returns a view of its events for
// waitHeld.
func heldOn(t *testing.T, env *testEnv) *stepEnv {
	t.Helper()
	st := env.Server.steps
	st.after = func(time.Duration) <-chan time.Time { return nil }
	e := &stepEnv{testEnv: env, sub: env.Server.hub.Subscribe(env.Server.hub.LastSeq())}
	st.turn(true, "test")
	return e
}

// holdAt lets env's held request go on from checkpoint to checkpoint
// until it is held at cp.
func (e *stepEnv) holdAt(cp Checkpoint) {
	e.t.Helper()
	for c := CheckReceived; c < cp; c++ {
		e.waitHeld(c.String())
		if _, err := e.Server.steps.next("", false); err != nil {
			e.t.Fatal(err)
		}
	}
	e.waitHeld(cp.String())
}

// books counts the local charges and the gateway's.
func books(t *testing.T, db *postgres.DB) (local, gateway int) {
	t.Helper()
	ctx := context.Background()
	local, err := db.CountCharges(ctx)
	if err == nil {
		gateway, err = db.CountGatewayCharges(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return local, gateway
}

// heldFor reports whether key has been held for longer than d on the
// database's clock.
func heldFor(t *testing.T, db *postgres.DB, key string, d time.Duration) bool {
	t.Helper()
	var past bool
	if err := db.Pool().QueryRow(context.Background(), `SELECT clock_timestamp() - claimed_at > $2 * interval '1 millisecond'
		FROM idempotency_keys WHERE key = $1`, key, d.Milliseconds()).Scan(&past); err != nil {
		t.Fatal(err)
	}
	return past
}

// keyStatus is the status of key's row, "" when there is none.
func keyStatus(t *testing.T, db *postgres.DB, key string) string {
	t.Helper()
	var status string
	_ = db.Pool().QueryRow(context.Background(), `SELECT status FROM idempotency_keys WHERE key = $1`, key).Scan(&status)
	return status
}

// Step mode may hold a request for minutes, far past the lock timeout.
// The claim records the request's work deadline, and another server's
// sweeper leaves the key alone until that deadline has passed, so a
// retry still gets its 409 rather than running afresh.
func TestAnotherServersSweeperLeavesAKeyHeldInStepModeUntilItsDeadline(t *testing.T) {
	url := pgtest.NewDatabase(t)
	// Work may take the gateway time-out plus step mode's allowance (four
	// step limits): 300 ms + 2 s, far past the lock timeout of 600 ms.
	cfg := Config{LockTimeout: 600 * time.Millisecond, GatewayTimeout: 300 * time.Millisecond, StepLimit: 500 * time.Millisecond}
	cfg.Name = "s1"
	a, db := pgServerConfig(t, url, cfg)
	cfg.Name = "s2"
	b, _ := pgServerConfig(t, url, cfg)
	held := heldOn(t, b)
	ans := held.payAsync("held-key", "A-1")
	held.holdAt(CheckClaimed)

	waitUntil(t, "the key to be held past the lock timeout", func() bool { return heldFor(t, db, "held-key", cfg.LockTimeout+50*time.Millisecond) })
	out, err := a.Server.Sweep(context.Background())
	if err != nil || len(out) != 0 {
		t.Fatalf("s1's sweep closed %+v (%v) while s2 still holds the request", out, err)
	}
	if st := keyStatus(t, db, "held-key"); st != "started" {
		t.Fatalf("the held key is %q, want started", st)
	}
	if r := a.pay("held-key", `{"order_id":"A-1","amount_satang":129900}`); r.Status != 409 {
		t.Fatalf("a retry on s1 got %d %s, want 409", r.Status, r.Body)
	}

	// Past the request's work deadline, the key is any server's to close.
	waitUntil(t, "s1's sweeper to close the key past its work deadline", func() bool {
		out, err := a.Server.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(out) == 1 && out[0].Row.Key == "held-key"
	})
	b.Server.steps.play()
	select {
	case <-ans:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request never answered")
	}
	if local, gateway := books(t, db); local != gateway {
		t.Fatalf("%d local charges, %d at the gateway", local, gateway)
	}
}
