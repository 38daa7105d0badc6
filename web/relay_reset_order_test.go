package web

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/views"
)

// A payment another server admits once its hold for a reset reached its
// bound is charged after the tables were emptied: the books hold it after
// the reset. When its batch reaches the room's order before the reset's
// (the reset had not published yet), every board drew its rows, then the
// reset, which empties the board's tables: the charge the books hold must
// stay in them, and in the count. (The boards emptied their tables and
// counted 0 charges until a reload.)
func TestAChargeSavedAfterTheTablesWereEmptiedStaysOnTheBoardsWhenItsBatchComesFirst(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	a := c.server(Config{Name: "s1"}, nil)
	clock := sim.NewManualClock(time.Now())
	b := c.server(Config{Name: "s2", BarrierClock: clock.Now}, nil)
	envs := []*testEnv{a, b}
	for _, e := range envs {
		e.Server.live() // the projector draws from its start on
		waitUntil(t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
	}

	reset := a.Server.demoReset()
	paused := pausedEmptying{inner: reset.tables.payments, emptied: make(chan struct{}), goOn: make(chan struct{})}
	reset.tables.payments = paused
	done := make(chan error, 1)
	go func() { done <- reset.run(context.Background(), "test") }()
	select {
	case <-paused.emptied:
	case <-time.After(waitUntilBound):
		t.Fatal("s1's reset did not empty the tables")
	}
	clock.Advance(time.Hour) // s2's hold reaches its bound
	if r := b.pay("bound-first", `{"order_id":"A-9","amount_satang":900}`); r.Status != http.StatusCreated {
		t.Fatalf("payment on s2 after its bound: %d %s", r.Status, r.Body)
	}
	// Its batch is in the room's order, before the reset's.
	for _, env := range envs {
		waitRow(t, env, "s2's payment on "+env.Server.cfg.Name, keyed("bound-first", "s2", "201 paid"))
	}
	close(paused.goOn)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the reset: %v", err)
		}
	case <-time.After(waitUntilBound):
		t.Fatal("s1's reset did not end")
	}
	if local, gateway := c.books(); local != 1 || gateway != 1 {
		t.Fatalf("the books hold %d local and %d gateway charges, want 1 and 1", local, gateway)
	}
	for _, env := range envs {
		name := env.Server.cfg.Name
		waitUntil(t, name+"'s board to draw the reset", func() bool {
			return slices.ContainsFunc(rowsOf(t, env), func(r views.TimelineRow) bool { return r.Title == "Reset" })
		})
		live := waitProjector(t, env).Snapshot()
		if !slices.ContainsFunc(live.Charges, func(ch views.ChargeRow) bool { return ch.Key == "bound-first" }) {
			t.Errorf("%s's charges table %v hides bound-first's charge, which the books hold", name, live.Charges)
		}
		if !slices.ContainsFunc(live.Keys, func(k views.KeyRow) bool { return k.Key == "bound-first" }) {
			t.Errorf("%s's keys table hides bound-first, which the books hold", name)
		}
		if live.Counters.Charges != 1 {
			t.Errorf("%s's board counts %d charges; the books hold 1", name, live.Counters.Charges)
		}
		if orders := ordersOf(live.Counters.Orders); !strings.Contains(orders, "A-9") {
			t.Errorf("%s's charges per order %q do not list A-9, which the books hold", name, orders)
		}
	}
}
