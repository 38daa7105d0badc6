package web

import (
	"context"
	"testing"

	"paytwice/pay"
)

// TestBoardLoadedAgainCountsTheLabsUnguardedCharges: the lock in memory's
// payments charge into the lab's unguarded table. A board that starts on
// books holding such charges (after a restart, or loading again after a
// gap) counts them with the others: its charge counter and its list of
// orders state what the books hold, an order charged once by the
// protocol and once without it included.
func TestBoardLoadedAgainCountsTheLabsUnguardedCharges(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	ctx := context.Background()
	if r := env.pay("books-1", `{"order_id":"A-8001","amount_satang":1000}`); r.Status != 201 {
		t.Fatalf("pay: %d %s", r.Status, r.Body)
	}
	db := env.Server.db
	first, err := db.RecentCharges(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("the paid charge: %v %v", first, err)
	}
	scope := first[0].Scope // the same caller's order
	for i, key := range []string{"loose-1", "loose-2"} {
		row, _, err := db.LabLooseInsertKey(ctx, pay.ClaimRequest{Scope: scope, Key: key, Method: "POST", Path: "/v1/payments",
			Fingerprint: "fp", OrderID: "A-8001", AmountSatang: 1000}, "req-"+key)
		if err != nil {
			t.Fatal(err)
		}
		ch := pay.Charge{ID: pay.NewID("ch_"), Scope: scope, Key: key, OrderID: "A-8001", AmountSatang: 1000,
			GatewayRef: "gw-" + key, CreatedAt: env.Clock.Now()}
		if _, err := db.LabLooseComplete(ctx, row, 201, []byte(`{}`), &ch, "req-"+key); err != nil {
			t.Fatalf("charge %d: %v", i+1, err)
		}
	}
	guarded, _ := db.CountCharges(ctx)
	loose, _ := db.LabLooseCharges(ctx)
	if guarded != 1 || len(loose) != 2 {
		t.Fatalf("the books hold %d charges and %d unguarded, want 1 and 2", guarded, len(loose))
	}

	// The board starts now, from the books: nothing of it saw the events.
	c := env.Server.live().Snapshot().Counters
	if c.Charges != 3 {
		t.Errorf("the board counts %d charges; the books hold 3 (1 and 2 unguarded)", c.Charges)
	}
	found := false
	for _, o := range c.Orders {
		if o.OrderID == "A-8001" {
			found = true
			if o.Charges != 3 {
				t.Errorf("the board lists A-8001 with %d charges, the books 3", o.Charges)
			}
		}
	}
	if !found || c.Twice != 1 {
		t.Errorf("the board's orders %+v, %d charged twice: want A-8001, charged more than once", c.Orders, c.Twice)
	}
}
