package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
)

// MustOpenDB opens a store on a fresh file, closed when the test ends.
func MustOpenDB(tb testing.TB, now func() time.Time) *store.DB {
	tb.Helper()
	db, err := store.Open(filepath.Join(tb.TempDir(), "test.db"), store.Options{Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func claimReq(key string) store.ClaimRequest {
	return store.ClaimRequest{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
}

// claim claims key and returns the claim's fencing token.
func claim(t *testing.T, db *store.DB, key string) string {
	t.Helper()
	res, err := db.Claim(context.Background(), claimReq(key))
	if err != nil || !res.Claimed || res.Claim == "" {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
	return res.Claim
}

func complete(t *testing.T, db *store.DB, key, token string) {
	t.Helper()
	ch := &pay.Charge{ID: pay.NewID("ch_"), OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: db.Now()}
	if _, err := db.Complete(context.Background(), store.Completion{ClaimRequest: claimReq(key), Claim: token, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
		t.Fatal(err)
	}
}

func TestClaimRaceHasOneWinner(t *testing.T) {
	db := MustOpenDB(t, nil)
	const n = 100
	var wg sync.WaitGroup
	wins := make(chan int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := db.Claim(context.Background(), claimReq("k"))
			if err != nil {
				t.Error(err)
				return
			}
			if res.Claimed {
				wins <- i
			} else if res.Existing.Status != pay.StatusStarted || res.Existing.Fingerprint != "fp" {
				t.Errorf("loser saw %+v", res.Existing)
			}
		}()
	}
	wg.Wait()
	close(wins)
	if len(wins) != 1 {
		t.Fatalf("%d claims won, want 1", len(wins))
	}
}

func TestSecondChargeForAKeyIsRefusedByTheConstraint(t *testing.T) {
	db := MustOpenDB(t, nil)
	ctx := context.Background()
	complete(t, db, "k", claim(t, db, "k"))
	// Even bypassing the key protocol, a second charge row for the same
	// (scope, key) cannot exist.
	_, err := db.Complete(ctx, store.Completion{ClaimRequest: claimReq("k"), Status: 201, Charge: &pay.Charge{ID: "ch_2", AmountSatang: 1, CreatedAt: db.Now()}})
	if err == nil {
		t.Fatal("a second completion of a done key succeeded")
	}
	if n, _ := db.CountCharges(ctx); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func TestFailHalfwayRollsBackOnlyThatRequest(t *testing.T) {
	db := MustOpenDB(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		key := fmt.Sprint("k", i)
		token := claim(t, db, key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := &pay.Charge{ID: pay.NewID("ch_"), OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: db.Now()}
			_, err := db.Complete(ctx, store.Completion{ClaimRequest: claimReq(key), Claim: token, Status: 201, Body: []byte("{}"), Charge: ch, FailHalfway: i%2 == 0})
			if (err != nil) != (i%2 == 0) {
				t.Errorf("key %s: err %v", key, err)
			}
		}()
	}
	wg.Wait()
	started, done, _ := db.KeyCounts(ctx)
	charges, _ := db.CountCharges(ctx)
	if started != 10 || done != 10 || charges != 10 {
		t.Fatalf("started %d done %d charges %d, want 10/10/10", started, done, charges)
	}
}

func TestPruneRemovesOnlyOldDoneKeys(t *testing.T) {
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	db := MustOpenDB(t, clock.Now)
	ctx := context.Background()
	oldDone := claim(t, db, "old-done")
	claim(t, db, "old-started")
	complete(t, db, "old-done", oldDone)
	clock.Advance(25 * time.Hour)
	complete(t, db, "new-done", claim(t, db, "new-done"))

	pruned, err := db.Prune(ctx, clock.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(pruned) != 1 || pruned[0].Key != "old-done" {
		t.Fatalf("pruned %v, want only old-done", pruned)
	}
	for key, want := range map[string]string{"old-started": pay.StatusStarted, "new-done": pay.StatusDone} {
		if k, err := db.GetKey(ctx, "s", key); err != nil || k.Status != want {
			t.Errorf("%s: %+v %v, want %s", key, k, err, want)
		}
	}
	if _, err := db.GetKey(ctx, "s", "old-done"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Errorf("old-done still there: %v", err)
	}
	if _, ok := db.CachedResponse("s", "old-done"); ok {
		t.Error("a pruned key is still in the replay cache")
	}
	// A pruned key is a new request: it can be claimed again.
	if res, err := db.Claim(ctx, claimReq("old-done")); err != nil || !res.Claimed {
		t.Fatalf("reclaiming a pruned key: %+v %v", res, err)
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	complete(t, db, "k", claim(t, db, "k"))
	db.Close()
	if _, err := db.Claim(ctx, claimReq("x")); err != store.ErrClosed {
		t.Fatalf("write after close: %v", err)
	}
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := db.GetKey(ctx, "s", "k")
	if err != nil || k.Status != pay.StatusDone || k.ResponseStatus != 201 {
		t.Fatalf("after reopen: %+v %v", k, err)
	}
}

func TestSchemasKeepTheirOwnTables(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func(name string, schema store.Schema) *store.DB {
		db, err := store.Open(filepath.Join(dir, name), store.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	payments, ledger := open("payments.db", store.SchemaPayments), open("ledger.db", store.SchemaLedger)
	if _, err := payments.Claim(ctx, claimReq("k")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ledger.RecordGatewayCharge(ctx, pay.GatewayCharge{Key: "s|k", ID: "gw_1", OrderID: "A-1", AmountSatang: 100, CreatedAt: ledger.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := payments.RecordGatewayCharge(ctx, pay.GatewayCharge{Key: "x", ID: "gw_2"}); err == nil {
		t.Error("the payments file accepted a gateway record")
	}
	if _, err := ledger.Claim(ctx, claimReq("k")); err == nil {
		t.Error("the ledger file accepted a claim")
	}
	if err := errors.Join(payments.Reset(ctx), ledger.Reset(ctx)); err != nil {
		t.Fatalf("reset: %v", err)
	}
	payments.Close()
	ledger.Close()
	// Reopening applies nothing twice.
	again := open("ledger.db", store.SchemaLedger)
	defer again.Close()
	if n, err := again.CountGatewayCharges(ctx); err != nil || n != 0 {
		t.Fatalf("after reset and reopen: %d, %v", n, err)
	}
}
