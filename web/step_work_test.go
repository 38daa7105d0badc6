package web

import (
	"context"
	"net/http"
	"paytwice/web/room/step"
	"testing"
	"time"
)

// TestStepModeTurnedOnAfterTheClaim: a payment claimed while step mode was
// off, then held by it for longer than its work may take, is not a slow
// request: it is answered as a healthy one is, charged once, and no
// sweeper, on its server or another, takes its key while it is held.
func TestStepModeTurnedOnAfterTheClaim(t *testing.T) {
	waitsOnRealClocks(t)
	// The work's time-out runs from the claim while the request is not
	// held: through the delay, the turning on of step mode, and (held
	// after the gateway) the call to the gateway. It is generous, so that
	// on a loaded machine the request reaches its hold before it; the
	// request is then held past it, and past the lock timeout.
	const lockTimeout, gatewayTimeout = 6 * time.Second, 5 * time.Second
	path := []string{"before the gateway", "gateway answered"}
	for i, at := range path {
		t.Run("held at "+at, func(t *testing.T) {
			waitsOnRealClocks(t)
			c := newClass(t)
			var envs []*testEnv
			for _, name := range []string{"s1", "s2"} {
				envs = append(envs, c.server(Config{Name: name, LockTimeout: lockTimeout, GatewayTimeout: gatewayTimeout}, nil))
			}
			for _, e := range envs {
				e.Server.live()
				waitUntil(t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
			}
			s1 := envs[0]
			env := &stepEnv{testEnv: s1, sub: s1.Server.hub.Subscribe(s1.Server.hub.LastSeq())}

			// The delay fault pauses the request right after its claim,
			// until the test has turned step mode on.
			reached, release := holdGap(s1.Server)
			if r := s1.must(http.MethodPut, "/api/faults", `{"server":{"delay_ms":1}}`); r.Status != http.StatusOK {
				t.Fatalf("the delay fault: %d %s", r.Status, r.Body)
			}
			ans := env.payAsync("late-step", "L-1")
			select {
			case <-reached:
			case <-time.After(waitUntilBound):
				t.Fatal("the request never reached its delay")
			}
			claimed := time.Now() // the key was claimed before this
			if err := s1.Server.payments.steps.Turn(true, "test"); err != nil {
				t.Fatal(err)
			}
			close(release)
			id := ""
			for _, cp := range path[:i+1] {
				if id != "" {
					if r := env.api(http.MethodPost, "/api/step/next", `{"request":"`+id+`"}`); r.Status != http.StatusOK {
						t.Fatalf("Next: %d %s", r.Status, r.Body)
					}
				}
				id = env.waitHeld(cp)
			}

			// Held past its work time-out and past the lock timeout.
			waitUntil(t, "the lock timeout to pass since the claim", func() bool {
				return time.Since(claimed) > lockTimeout+100*time.Millisecond
			})
			for _, s := range envs {
				if out, err := s.Server.Jobs().Sweep(t.Context()); err != nil || len(out) != 0 {
					t.Fatalf("%s's sweeper while the request is held: %+v %v, want nothing taken", s.Server.cfg.Name, out, err)
				}
			}
			if started, _, err := c.KeyCounts(t.Context()); err != nil || started != 1 {
				t.Fatalf("started keys while held: %d %v, want 1", started, err)
			}

			if r := env.api(http.MethodPost, "/api/step/finish", `{"request":"`+id+`"}`); r.Status != http.StatusOK {
				t.Fatalf("Finish: %d %s", r.Status, r.Body)
			}
			wantStatus(t, ans, http.StatusCreated)
			if local, gateway := c.books(); local != 1 || gateway != 1 {
				t.Fatalf("local charges %d, gateway charges %d; want 1 and 1", local, gateway)
			}
		})
	}
}

// A request held in step mode keeps its key from every sweeper by a lease
// its server renews while it holds it; a server that stops renewing (it
// was killed) leaves the key to the others' sweepers once the lock
// timeout has passed since its last renewal, not minutes later. On SQLite
// the renewals and the lock timeout run on the file's injectable clock; on
// PostgreSQL the lease runs on the database's own clock.
func TestAHeldKeyIsFreeALockTimeoutAfterItsServerStopsRenewing(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	// The file's clock is the real one moved on by the offsets pass adds,
	// so real time passes between a renewal and the sweep after it too:
	// on a loaded machine under the race detector, hundreds of
	// milliseconds. The lock timeout leaves room for that; on SQLite a
	// long one costs nothing (pass moves the offset), on PostgreSQL the
	// test waits it out on the database's clock.
	lockTimeout := 10 * time.Second
	if c.url != "" {
		lockTimeout = 4 * time.Second
	}
	cfg := Config{LockTimeout: lockTimeout, GatewayTimeout: lockTimeout / 2}
	cfg.Name = "s1"
	a := c.server(cfg, nil)
	cfg.Name = "s2"
	b := c.server(cfg, nil)
	fileClock := a.Server.clock // SQLite: the file's clock is the first server's
	ticks := make(chan time.Time)
	b.Server.payments.steps.Every = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }
	held := heldOn(t, b)
	ans := held.payAsync("held-key", "A-1")
	held.holdAt(step.CheckClaimed)

	// renew makes the holder renew its lease, and returns once it has: the
	// tick after it is only taken when the renewal is done.
	renew := func() {
		t.Helper()
		for range 2 {
			select {
			case ticks <- time.Now():
			case <-time.After(waitUntilBound):
				t.Fatal("the held request no longer renews its lease")
			}
		}
	}
	sweptByA := func() bool {
		t.Helper()
		out, err := a.Server.Jobs().Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(out) == 1 && out[0].Row.Key == "held-key"
	}
	// pass lets d go by for the sweepers.
	pass := func(d time.Duration) {
		t.Helper()
		if c.url == "" {
			fileClock.SetOffset(fileClock.Offset() + d)
			return
		}
		until := time.Now().Add(d)
		waitUntil(t, "time to pass on the database", func() bool { return time.Now().After(until) })
	}

	// Held for several lock timeouts, renewed every third of one.
	for range 7 {
		pass(lockTimeout / 3)
		renew()
		if sweptByA() {
			t.Fatal("s1's sweeper took a key whose held request renews its lease")
		}
	}
	if started, _, err := c.KeyCounts(t.Context()); err != nil || started != 1 {
		t.Fatalf("started keys while held: %d %v, want 1", started, err)
	}

	// s2 renews no more, as a killed server: the key is s1's to close once
	// the lock timeout has passed since the last renewal.
	pass(lockTimeout + time.Millisecond)
	if c.url == "" {
		if !sweptByA() {
			t.Fatal("s1's sweeper did not take the key a lock timeout after its last renewal")
		}
	} else {
		waitUntil(t, "s1's sweeper to take the key after its lease", sweptByA)
	}

	b.Server.payments.steps.Play()
	select {
	case <-ans:
	case <-time.After(waitUntilBound):
		t.Fatal("the held request never answered")
	}
	if local, gateway := c.books(); local != gateway {
		t.Fatalf("%d local charges, %d at the gateway", local, gateway)
	}
}
