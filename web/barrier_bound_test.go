package web

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/views"
	"paytwice/web/room"
)

// pausedEmptying is a reset's tables that, once emptied, wait until goOn
// is closed before the reset goes on: a reset slowed between emptying
// the tables and ending its barrier, long enough for another server's
// hold to reach its bound.
type pausedEmptying struct {
	inner interface {
		Reset(ctx context.Context) error
		LabReset(ctx context.Context) error
	}
	emptied chan struct{}
	goOn    chan struct{}
}

func (p pausedEmptying) Reset(ctx context.Context) error {
	err := p.inner.Reset(ctx)
	close(p.emptied)
	<-p.goOn
	return err
}

func (p pausedEmptying) LabReset(ctx context.Context) error { return p.inner.LabReset(ctx) }

// A server holds its payments for another server's reset only until the
// barrier's bound. A payment it admits after that, charged once the
// tables were emptied, is in the books after the reset: no screen drops
// it, even when its events reach the room's order after the reset's and
// were stamped with the generation before it. (Without the books'
// check, the relay dropped them as made before the reset: the charge was
// in the books and on no page.)
func TestRelayKeepsAChargeMadeAfterABarrierBoundOnEveryScreen(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	held := heldBatch{hold: "bound-late", held: make(chan struct{}), release: make(chan struct{}), once: new(sync.Once)}
	a := c.server(Config{Name: "s1"}, nil)
	clock := sim.NewManualClock(time.Now())
	b := c.server(Config{Name: "s2", BarrierClock: clock.Now}, func(p room.Peers) room.Peers {
		held.Peers = p
		return held
	})
	envs := []*testEnv{a, b}
	for _, e := range envs {
		e.Server.live() // the projector draws from its start on
		waitUntil(t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
	}

	// s1's reset, slowed once it emptied the tables.
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
	bar := a.Server.room.Load().Barrier
	if bar == nil || !slices.Contains(bar.Acks, b.Server.room.ID()) {
		t.Fatalf("the tables were emptied with the barrier %+v: s2 did not hold its payments", bar)
	}
	// s2's bound passes (on its barrier clock) while the barrier is still
	// under way: it admits payments again, and this one is charged after
	// the tables were emptied.
	clock.Advance(time.Hour)
	if r := b.pay("bound-late", `{"order_id":"A-9","amount_satang":900}`); r.Status != http.StatusCreated {
		t.Fatalf("payment on s2 after its bound: %d %s", r.Status, r.Body)
	}
	select {
	case <-held.held:
	case <-time.After(waitUntilBound):
		t.Fatalf("s2's batch of bound-late was not held within %s", waitUntilBound)
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
	// s1's reset is in the room's order before s2's batch is sent.
	waitUntil(t, "s1's timeline to hold only its reset", func() bool {
		rows := rowsOf(t, a)
		return len(rows) == 1 && rows[0].Title == "Reset"
	})
	close(held.release)
	// A payment after the reset comes after the held batch on s2's relay:
	// once every server draws it, each has placed the held batch.
	b.pay("bound-after", `{"order_id":"A-10","amount_satang":900}`)
	if local, gateway := c.books(); local != 2 || gateway != 2 {
		t.Fatalf("the books hold %d local and %d gateway charges, want 2 and 2", local, gateway)
	}
	for _, env := range envs {
		name := env.Server.cfg.Name
		waitRow(t, env, "s2's payment after the reset on "+name, keyed("bound-after", "s2", "201 paid"))
		var got []string
		for _, r := range rowsOf(t, env) {
			got = append(got, r.Title+" "+r.Key+" "+r.Outcome.Text)
		}
		if !slices.ContainsFunc(rowsOf(t, env), keyed("bound-late", "s2", "201 paid")) {
			t.Errorf("%s's timeline %q has no row of bound-late, whose charge the books hold", name, got)
		}
		if n := waitProjector(t, env).Snapshot().Counters.Charges; n != 2 {
			t.Errorf("%s's board counts %d charges; the books hold 2", name, n)
		}
		if orders := ordersOf(waitProjector(t, env).Snapshot().Counters.Orders); !strings.Contains(orders, "A-9") {
			t.Errorf("%s's charges per order %s do not list A-9, which the books hold", name, orders)
		}
	}
}

// ordersOf lists the orders of the board's charges per order.
func ordersOf(orders []views.OrderCount) string {
	var out []string
	for _, o := range orders {
		out = append(out, o.OrderID)
	}
	return strings.Join(out, ",")
}
