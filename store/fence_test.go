package store_test

import (
	"context"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
)

// charge is the gateway's charge "gw" for order A-1, as a completion
// records it.
func charge(db *store.DB) *pay.Charge {
	return &pay.Charge{ID: pay.NewID("ch_"), OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: db.Now()}
}

func TestClaimsAreFenced(t *testing.T) {
	ctx := context.Background()

	t.Run("releasing or completing with another claim's token leaves the key alone", func(t *testing.T) {
		db := MustOpenDB(t, nil)
		token := claim(t, db, "k")
		if released, err := db.Release(ctx, "s", "k", "not-"+token); err != nil || released {
			t.Fatalf("release with a stale token: %v %v", released, err)
		}
		if k, err := db.GetKey(ctx, "s", "k"); err != nil || k.Status != pay.StatusStarted || k.Claim != token {
			t.Fatalf("key after a stale release: %+v %v", k, err)
		}
		if released, err := db.Release(ctx, "s", "k", token); err != nil || !released {
			t.Fatalf("release with its own token: %v %v", released, err)
		}
	})

	t.Run("a completion whose claim was released still records the charge and writes the key again", func(t *testing.T) {
		db := MustOpenDB(t, nil)
		token := claim(t, db, "k")
		if released, err := db.Release(ctx, "s", "k", token); err != nil || !released {
			t.Fatalf("release: %v %v", released, err)
		}
		ch := charge(db)
		done, err := db.Complete(ctx, store.Completion{ClaimRequest: claimReq("k"), Claim: token, Status: 201, Body: ch.ResponseBody(), Charge: ch})
		if err != nil || !done.ClaimLost {
			t.Fatalf("late completion: %+v %v", done, err)
		}
		if n, _ := db.CountCharges(ctx); n != 1 {
			t.Fatalf("%d charges, want the gateway's one", n)
		}
		k, err := db.GetKey(ctx, "s", "k")
		if err != nil || k.Status != pay.StatusDone || string(k.ResponseBody) != string(ch.ResponseBody()) {
			t.Fatalf("key after the late completion: %+v %v", k, err)
		}
		if r, ok := db.CachedResponse("s", "k"); !ok || string(r.Body) != string(k.ResponseBody) {
			t.Fatalf("the replay cache disagrees with the disk: %+v %v", r, ok)
		}
	})

	t.Run("a completion whose key another claim now holds records the charge and leaves that claim its key", func(t *testing.T) {
		db := MustOpenDB(t, nil)
		first := claim(t, db, "k")
		if _, err := db.Release(ctx, "s", "k", first); err != nil {
			t.Fatal(err)
		}
		second := claim(t, db, "k")
		ch := charge(db)
		done, err := db.Complete(ctx, store.Completion{ClaimRequest: claimReq("k"), Claim: first, Status: 201, Body: ch.ResponseBody(), Charge: ch})
		if err != nil || !done.ClaimLost || string(done.Body) != string(ch.ResponseBody()) {
			t.Fatalf("late completion: %+v %v", done, err)
		}
		if k, _ := db.GetKey(ctx, "s", "k"); k.Status != pay.StatusStarted || k.Claim != second {
			t.Fatalf("the second claim lost its key: %+v", k)
		}
		if _, ok := db.CachedResponse("s", "k"); ok {
			t.Fatal("a key still started has a cached response")
		}
		// The second request reaches the same gateway charge and answers it.
		again := charge(db)
		done, err = db.Complete(ctx, store.Completion{ClaimRequest: claimReq("k"), Claim: second, Status: 201, Body: again.ResponseBody(), Charge: again})
		if err != nil || done.ClaimLost || !done.ChargeExisted || string(done.Body) != string(ch.ResponseBody()) {
			t.Fatalf("second completion: %+v %v", done, err)
		}
		if n, _ := db.CountCharges(ctx); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("the sweeper passes over a running claim however old, and closes it once it has stopped", func(t *testing.T) {
		clock := sim.NewManualClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
		db := MustOpenDB(t, clock.Now)
		token := claim(t, db, "k")
		clock.Advance(time.Hour)
		none := func(context.Context, string, string) (pay.GatewayCharge, bool, error) {
			return pay.GatewayCharge{}, false, nil
		}
		out, err := db.Sweep(ctx, time.Second, none, func(c string) bool { return c == token })
		if err != nil || len(out) != 0 {
			t.Fatalf("swept a running claim: %+v %v", out, err)
		}
		out, err = db.Sweep(ctx, time.Second, none, func(string) bool { return false })
		if err != nil || len(out) != 1 || out[0].Charged {
			t.Fatalf("sweep of a stopped claim: %+v %v", out, err)
		}
	})
}

func TestAKeyPaysForOneOrder(t *testing.T) {
	ctx := context.Background()
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	db := MustOpenDB(t, clock.Now)
	complete(t, db, "k", claim(t, db, "k"))
	clock.Advance(48 * time.Hour)
	if _, err := db.Prune(ctx, clock.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	other := claimReq("k")
	other.OrderID, other.Fingerprint = "B-2", "fp2"
	res, err := db.Claim(ctx, other)
	if err != nil || res.Claimed || res.Reused == nil || res.Reused.OrderID != "A-1" {
		t.Fatalf("claim for another order: %+v %v", res, err)
	}
	if _, err := db.GetKey(ctx, "s", "k"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Fatalf("a refused claim wrote the key: %v", err)
	}
	if res, err := db.Claim(ctx, claimReq("k")); err != nil || !res.Claimed {
		t.Fatalf("the same order again is a late retry and may claim: %+v %v", res, err)
	}
}
