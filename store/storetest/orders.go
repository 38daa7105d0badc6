package storetest

import (
	"testing"
	"time"

	"paytwice/pay"
)

// orderRecord checks what a store keeps about an order for its look-up:
// every state the look-up names can be read back, in one snapshot, and
// nothing of another scope or order leaks in.
func orderRecord(t *testing.T, open Open) {
	clk := newClock()
	db := open(t, clk.Now)
	times := pay.LookupTimes{Now: clk.Now(), Settle: time.Minute, Work: 10 * time.Second, Poll: time.Second}
	look := func() (pay.OrderRecord, pay.OrderLookup) {
		t.Helper()
		rec, err := db.OrderRecord(ctx, "s", "A-1")
		if err != nil {
			t.Fatal(err)
		}
		times.Now = clk.Now()
		return rec, pay.LookUpOrder("A-1", rec, times)
	}
	if rec, l := look(); l.State != pay.OrderNeverSeen || len(rec.Keys)+len(rec.Charges)+len(rec.Released) != 0 {
		t.Fatalf("a fresh store: %+v %+v", rec, l)
	}

	// Another scope's and another order's keys never show.
	other := request("other-scope")
	other.Scope = "t"
	if res, err := db.Claim(ctx, other); err != nil || !res.Claimed {
		t.Fatalf("claim in another scope: %+v %v", res, err)
	}
	elsewhere := request("other-order")
	elsewhere.OrderID = "A-2"
	if res, err := db.Claim(ctx, elsewhere); err != nil || !res.Claimed {
		t.Fatalf("claim for another order: %+v %v", res, err)
	}

	first := claim(t, db, "k1")
	rec, l := look()
	if l.State != pay.OrderPending || len(rec.Keys) != 1 || rec.Keys[0].Key != "k1" || rec.Keys[0].Claim != first ||
		!rec.Keys[0].LockedAt.Equal(clk.Now()) {
		t.Fatalf("a started key: %+v %+v", rec, l)
	}

	clk.Advance(time.Minute)
	if released, err := db.Release(ctx, "s", "k1", first, pay.ReleasedBySweeper); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	rec, l = look()
	if l.State != pay.OrderNotCharged || l.NotCharged.Reason != pay.ReasonReleased || l.NotCharged.Cause != pay.ReleasedBySweeper ||
		len(rec.Keys) != 0 || len(rec.Released) != 1 || !rec.Released[0].ReleasedAt.Equal(clk.Now()) {
		t.Fatalf("a swept key: %+v %+v", rec, l)
	}

	clk.Advance(time.Minute)
	second := claim(t, db, "k2")
	if _, err := db.Complete(ctx, pay.Completion{ClaimRequest: request("k2"), Claim: second, Status: 402, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	rec, l = look()
	if l.State != pay.OrderNotCharged || l.NotCharged.Reason != pay.ReasonDeclined || l.NotCharged.Key != "k2" ||
		len(rec.Keys) != 1 || rec.Keys[0].ResponseStatus != 402 || rec.Keys[0].Status != pay.StatusDone {
		t.Fatalf("a declined key after a swept one: %+v %+v", rec, l)
	}

	// The same key claimed again after its release is pending again.
	clk.Advance(time.Minute)
	again := claim(t, db, "k1")
	if _, l = look(); l.State != pay.OrderPending || len(l.Pending) != 1 || l.Pending[0].Key != "k1" {
		t.Fatalf("a released key claimed again: %+v", l)
	}
	complete(t, db, "k1", again, clk.Now())
	if err := db.LabRecordCharge(ctx, pay.Charge{ID: pay.NewID("ch_"), Scope: "s", Key: pay.LabKeyPrefix + "loose", OrderID: "A-1", AmountSatang: 100,
		GatewayRef: "gw2", CreatedAt: clk.Now().Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	rec, l = look()
	if l.State != pay.OrderPaid || !l.Paid || len(l.Charges) != 2 || !l.Charges[0].Guarded || l.Charges[1].Guarded {
		t.Fatalf("a paid order with an unguarded charge: %+v %+v", rec, l)
	}

	// The trace of a release is pruned like a done key.
	if _, err := db.Prune(ctx, clk.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if rec, _ = look(); len(rec.Released) != 0 {
		t.Fatalf("a release trace survived the prune: %+v", rec.Released)
	}
	third := claim(t, db, "k3")
	if _, err := db.Release(ctx, "s", "k3", third, pay.ReleasedBeforeWork); err != nil {
		t.Fatal(err)
	}
	if err := db.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, l = look(); l.State != pay.OrderNeverSeen || len(rec.Released)+len(rec.Keys)+len(rec.Charges) != 0 {
		t.Fatalf("after a reset: %+v %+v", rec, l)
	}
}
