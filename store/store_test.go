package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/storetest"
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

// TestContract runs the storage contract on SQLite.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) storetest.Backend { return MustOpenDB(t, now) })
}

func claimReq(key string) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
}

func claim(t *testing.T, db *store.DB, key string) string {
	t.Helper()
	res, err := db.Claim(context.Background(), claimReq(key))
	if err != nil || !res.Claimed {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
	return res.Claim
}

func complete(t *testing.T, db *store.DB, key, token string) {
	t.Helper()
	ch := &pay.Charge{ID: pay.NewID("ch_"), OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: db.Now()}
	if _, err := db.Complete(context.Background(), pay.Completion{ClaimRequest: claimReq(key), Claim: token, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
		t.Fatal(err)
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
	open := func(name string, schema pay.Schema) *store.DB {
		db, err := store.Open(filepath.Join(dir, name), store.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	payments, ledger := open("payments.db", pay.SchemaPayments), open("ledger.db", pay.SchemaLedger)
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
	again := open("ledger.db", pay.SchemaLedger)
	defer again.Close()
	if n, err := again.CountGatewayCharges(ctx); err != nil || n != 0 {
		t.Fatalf("after reset and reopen: %d, %v", n, err)
	}
}

// A request repeated while this process works on its key (a double click,
// a storm) is answered from memory, the key's started row, without a
// write; once the key is saved or released, the file answers again.
func TestARepeatedClaimOfAHeldKeyNeedsNoWrite(t *testing.T) {
	db := MustOpenDB(t, time.Now)
	ctx := context.Background()
	c := pay.ClaimRequest{Scope: "s", Key: "k", Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
	first, err := db.Claim(ctx, c)
	if err != nil || !first.Claimed {
		t.Fatalf("claim: %+v %v", first, err)
	}
	writes := db.WriterStats().Ops
	again, err := db.Claim(ctx, c)
	if err != nil || again.Claimed || again.Existing.Status != pay.StatusStarted || again.Existing.Claim != first.Claim {
		t.Fatalf("the repeat: %+v %v, want the started row", again, err)
	}
	if n := db.WriterStats().Ops; n != writes {
		t.Fatalf("the repeat took %d writes", n-writes)
	}
	// Another request with the key (another fingerprint) still goes to
	// the file, which tells it apart.
	other := c
	other.Fingerprint = "fp2"
	if res, err := db.Claim(ctx, other); err != nil || res.Claimed || res.Existing.Fingerprint != "fp" {
		t.Fatalf("another request: %+v %v", res, err)
	}
	if _, err := db.Complete(ctx, pay.Completion{ClaimRequest: c, Claim: first.Claim, Status: 201, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if res, err := db.Claim(ctx, c); err != nil || res.Existing.Status != pay.StatusDone {
		t.Fatalf("after the save: %+v %v, want the done row", res, err)
	}
}

// A renewal makes a paused work's key as fresh as a new lock: the
// sweepers, which judge a key by its lock time, leave it for the lock
// timeout from the renewal, and take it once that timeout has passed with
// no renewal since (its server died), on the file's clock.
func TestARenewedKeyIsSweptOnlyALockTimeoutAfterTheLastRenewal(t *testing.T) {
	const lockTimeout = 30 * time.Second
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	db := MustOpenDB(t, func() time.Time { return now })
	ctx := context.Background()
	c := pay.ClaimRequest{Scope: "s", Key: "k", Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
	claimed, err := db.Claim(ctx, c)
	if err != nil || !claimed.Claimed {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	sweepable := func() bool {
		rows, err := db.StartedBefore(ctx, now.Add(-lockTimeout))
		if err != nil {
			t.Fatal(err)
		}
		return len(rows) == 1
	}
	// Held for minutes, renewed every third of the lock timeout.
	for range 12 {
		now = now.Add(lockTimeout / 3)
		if sweepable() {
			t.Fatalf("swept at %v while its work renews its lease", now)
		}
		if err := db.RenewWork(ctx, "s", "k", claimed.Claim, lockTimeout); err != nil {
			t.Fatal(err)
		}
	}
	// The server stops renewing: the key is the sweepers' once the lock
	// timeout has passed since its last renewal, not before.
	now = now.Add(lockTimeout)
	if sweepable() {
		t.Fatal("swept exactly a lock timeout after the last renewal")
	}
	now = now.Add(time.Millisecond)
	if !sweepable() {
		t.Fatal("not swept a lock timeout after the last renewal")
	}
}
