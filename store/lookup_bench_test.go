package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
)

// BenchmarkOrderLookup measures an order's look-up (OrderRecord: its
// charges, keys and released claims, in one read transaction) on a store
// that holds only that order, and on stores that also hold n other orders
// of the same caller, each with its done key and its charge, with the
// (scope, order_id) indexes and without them. The rounds alternate
// between the stores, so that a busy machine slows them alike, and the
// benchmark reports each one's time per look-up and their ratio to the
// empty store's. Run it with
//
//	go test ./store -run '^$' -bench OrderLookup -benchtime 2000x
func BenchmarkOrderLookup(b *testing.B) {
	const n = 200_000
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	ctx := context.Background()
	stores := []struct {
		name string
		db   *store.DB
		took time.Duration
	}{
		{name: "empty", db: openForLookup(b, 0, true, now)},
		{name: "indexed", db: openForLookup(b, n, true, now)},
		{name: "unindexed", db: openForLookup(b, n, false, now)},
	}
	// A scan of every row per look-up takes long: it has fewer rounds.
	const scanEvery = 20
	scans := 0
	b.ResetTimer()
	for i := range b.N {
		for j := range stores {
			if stores[j].name == "unindexed" && i%scanEvery != 0 {
				continue
			}
			t0 := time.Now()
			rec, err := stores[j].db.OrderRecord(ctx, "s", "LOOKED-UP")
			stores[j].took += time.Since(t0)
			if err != nil || len(rec.Charges) != 1 || len(rec.Keys) != 1 {
				b.Fatalf("%s: %d charges and %d keys (%v), want 1 and 1", stores[j].name, len(rec.Charges), len(rec.Keys), err)
			}
		}
		if i%scanEvery == 0 {
			scans++
		}
	}
	b.StopTimer()
	empty := float64(stores[0].took) / float64(b.N)
	indexed := float64(stores[1].took) / float64(b.N)
	unindexed := float64(stores[2].took) / float64(scans)
	b.ReportMetric(empty, "ns/lookup-empty")
	b.ReportMetric(indexed, "ns/lookup-200k")
	b.ReportMetric(unindexed, "ns/lookup-200k-no-index")
	b.ReportMetric(indexed/empty, "ratio-200k/empty")
	b.ReportMetric(unindexed/empty, "ratio-no-index/empty")
}

// openForLookup opens a store on a fresh file with the looked-up order
// (one done key, one charge) and n other orders of the same scope, each
// with its done key and charge; indexed false drops the (scope, order_id)
// indexes the look-up uses.
func openForLookup(b *testing.B, n int, indexed bool, now time.Time) *store.DB {
	b.Helper()
	path := filepath.Join(b.TempDir(), "lookup.db")
	db, err := store.Open(path, store.Options{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	ctx := context.Background()
	req := pay.ClaimRequest{Scope: "s", Key: "looked-up", Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "LOOKED-UP", AmountSatang: 100}
	res, err := db.Claim(ctx, req)
	if err != nil || !res.Claimed {
		b.Fatalf("claim: %+v %v", res, err)
	}
	ch := &pay.Charge{ID: "ch_looked_up", Scope: "s", Key: "looked-up", OrderID: "LOOKED-UP", AmountSatang: 100, GatewayRef: "gw_looked_up", CreatedAt: now}
	if _, err := db.Complete(ctx, pay.Completion{ClaimRequest: req, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
		b.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	ms := now.UnixMilli()
	for _, q := range []string{
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			response_status, response_body, created_at, locked_at, completed_at, claim, charge_key)
		SELECT 's', 'key-' || i, 'POST', '/v1/payments', 'fp', 'O-' || i, 100, 'done', 201, '{}', ? + i, ? + i, ? + i, 'c', '' FROM n`,
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO charges (id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at)
		SELECT 'ch_' || i, 's', 'key-' || i, 'O-' || i, 100, 'gw_' || i, ? + i + 0 * ? + 0 * ? FROM n`,
	} {
		if n == 0 {
			break
		}
		if _, err := raw.Exec(q, n, ms, ms, ms); err != nil {
			b.Fatal(err)
		}
	}
	if !indexed {
		for _, idx := range []string{"idempotency_keys_scope_order", "charges_scope_order"} {
			if _, err := raw.Exec(`DROP INDEX ` + idx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := raw.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return db
}
