package web

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"paytwice/pay"
	"paytwice/web/live"
)

// stillBooked asks the books whether a charge made before a reset is in
// them after it once per charge and reset generation, however many
// events name it and however many batches they come in, and answers as
// it did when it asked each time. (Without the cache, each event naming
// a charge the books do not hold looked it up again: eight look-ups here
// where there are two.)
func TestStillBookedLooksEachChargeUpOncePerResetGeneration(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, Config{})
	if r := e.pay("booked-1", `{"order_id":"B-1","amount_satang":100}`); r.Status != 201 {
		t.Fatalf("payment: %d %s", r.Status, r.Body)
	}
	// The real payment's events, and three of a charge the books never
	// held, as another server's batch would bring them.
	var paid []live.Entry
	for _, ev := range e.Server.hub.Recent(live.DefaultSize) {
		if ev.Key == "booked-1" {
			paid = append(paid, live.Entry{Event: ev.Event})
		}
	}
	charged := slices.IndexFunc(paid, func(en live.Entry) bool { return en.Charge != "" })
	if charged < 0 {
		t.Fatalf("no event of the payment names its charge: %+v", paid)
	}
	scope := paid[charged].Scope
	var gone []live.Entry
	for _, kind := range []live.Kind{live.Received, live.Charged, live.Completed} {
		gone = append(gone, live.Entry{Event: live.Event{Kind: kind, Request: "r-gone", Scope: scope, OrderID: "B-gone", Charge: "ch_gone", Key: "gone-1"}})
	}
	entries := func() []live.Entry { return append(slices.Clone(paid), gone...) }

	var lookups atomic.Int64
	booked := newBookedCharges(func(ctx context.Context, scope, orderID string) ([]pay.Charge, error) {
		lookups.Add(1)
		return e.DB.ChargesByOrder(ctx, scope, orderID)
	})
	for batch := range 2 { // the same charges again, in a later batch
		kept := e.Server.stillBooked(booked, entries())
		if len(kept) != len(paid) || slices.ContainsFunc(kept, func(en live.Entry) bool { return en.Key != "booked-1" }) {
			t.Fatalf("batch %d: kept %d events, want the %d of the charge the books hold", batch, len(kept), len(paid))
		}
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d look-ups for two batches naming two charges, want 2: one per charge", n)
	}

	// A reset starts the next generation: the charges are looked up again,
	// and the books hold neither now.
	if err := e.Server.demoReset().run(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if kept := e.Server.stillBooked(booked, entries()); len(kept) != 0 {
		t.Errorf("after the reset, kept %d events of charges it emptied", len(kept))
	}
	if n := lookups.Load(); n != 4 {
		t.Errorf("%d look-ups after the reset, want 4: each charge once more in the new generation", n)
	}
}
