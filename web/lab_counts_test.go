package web

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"paytwice/pay"
)

// TestLabCountsReadBackOnlyDroppedOrders: once the window of orders
// charged once has dropped some, a charge of an order it dropped needs its
// order read back from the store, and a charge of an order never seen does
// not: a new payment past the window costs no read.
func TestLabCountsReadBackOnlyDroppedOrders(t *testing.T) {
	t.Parallel()
	const window, orders = 8, 100
	seed := maphash.MakeSeed()
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	charge := func(i int, order string) pay.LabRow {
		return pay.LabRow{Table: pay.LabCharges, ID: fmt.Sprintf("ch_%d", i), Scope: "s", Key: fmt.Sprintf("key-%d", i),
			OrderID: order, CreatedAt: at.Add(time.Duration(i) * time.Millisecond)}
	}
	c := newLabCounts()
	c.bound(window)
	for i := range orders {
		if !c.add(seed, charge(i, fmt.Sprintf("O-%d", i))) {
			t.Fatalf("order O-%d, charged for the first time, was not counted", i)
		}
	}
	if len(c.singles) != window {
		t.Fatalf("%d orders charged once kept, want the window's %d", len(c.singles), window)
	}
	for i := range orders - window {
		if r := charge(orders+i, fmt.Sprintf("O-%d", i)); !c.mayBeForgotten(seed, r) {
			t.Fatalf("O-%d was dropped from the window, but a new charge of it would be counted without its order read back", i)
		}
	}
	for i := range orders {
		if r := charge(2*orders+i, fmt.Sprintf("NEW-%d", i)); c.mayBeForgotten(seed, r) {
			t.Fatalf("NEW-%d was never charged, but its first charge would read its order back", i)
		}
	}
	// A dropped order charged again without its order read back cannot be
	// counted; with it, it is counted twice, and a new order needs no read.
	if c.add(seed, charge(3*orders, "O-0")) {
		t.Fatal("a dropped order's second charge was counted without its first")
	}
	if !c.addLooked(seed, charge(3*orders, "O-0"), []pay.LabRow{charge(0, "O-0"), charge(3*orders, "O-0")}, true) {
		t.Fatal("a dropped order's second charge, its order read back, was not counted")
	}
	if got := c.outcomes().NewKeyPerRetry; got.ChargedTwice != 1 || got.Charges != 2 || got.ExtraCharges != 1 {
		t.Fatalf("counted %+v, want O-0 charged twice", got)
	}
	if !c.add(seed, charge(3*orders+1, "NEW-0")) {
		t.Fatal("a new order's first charge past the window was not counted without a read")
	}
}
