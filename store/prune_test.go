package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/storetest"
)

// fillDoneKeys writes n done keys created at createdAt straight into the
// file, in one statement: a million through the API would take minutes.
func fillDoneKeys(tb testing.TB, path string, n int, createdAt time.Time) {
	tb.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		tb.Fatal(err)
	}
	defer raw.Close()
	ms := createdAt.UnixMilli()
	if _, err := raw.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			response_status, response_body, created_at, locked_at, completed_at, claim, charge_key)
		SELECT 'old', 'key-' || i, 'POST', '/v1/payments', 'fp', 'O-' || i, 100, 'done', 201, '{}', ? + i, ? + i, ? + i, 'c', ''
		FROM n`, n, ms, ms, ms); err != nil {
		tb.Fatal(err)
	}
}

// openWithKeys opens a store on a fresh file holding n old done keys.
func openWithKeys(tb testing.TB, n int, now func() time.Time) *store.DB {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "prune.db")
	db, err := store.Open(path, store.Options{Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	fillDoneKeys(tb, path, n, now().Add(-48*time.Hour))
	return db
}

func TestPruneDeletesEveryOldKeyInBatches(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	db := openWithKeys(t, 1234, func() time.Time { return now })
	ctx := context.Background()
	// A key of today and a started one stay.
	if res, err := db.Claim(ctx, claimOf("new")); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	pruned, err := db.Prune(ctx, now.Add(-24*time.Hour))
	if err != nil || pruned.Keys != 1234 {
		t.Fatalf("pruned %d keys (%v), want 1234", pruned.Keys, err)
	}
	started, done, err := db.KeyCounts(ctx)
	if err != nil || started != 1 || done != 0 {
		t.Fatalf("after the prune: %d started, %d done (%v)", started, done, err)
	}
	if again, err := db.Prune(ctx, now.Add(-24*time.Hour)); err != nil || again.Keys != 0 {
		t.Fatalf("a second prune: %d keys (%v)", again.Keys, err)
	}
}

func TestPruneStopsWhenItsContextEnds(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	db := openWithKeys(t, 20_000, func() time.Time { return now })
	storetest.PruneStopsWhenCtxEnds(t, db, now.Add(-24*time.Hour), 20_000)
}

func claimOf(key string) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp-" + key, OrderID: "O-" + key, AmountSatang: 100}
}

// BenchmarkPaymentsDuringPrune prunes 110,000 and 1,000,000 old done keys
// while four clients pay without pause (claim, then save with a charge),
// and reports how long the slowest payment took and the p99, with the
// prune's own duration, next to the same clients' payments in a window as
// long as the prune right after it, with no prune: on a busy machine the
// slowest of thousands of payments is slow whatever the prune does, and
// the difference between the two windows is the prune's. Run it with
//
//	go test ./store -run '^$' -bench PaymentsDuringPrune -benchtime 1x
func BenchmarkPaymentsDuringPrune(b *testing.B) {
	for _, n := range []int{110_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for range b.N {
				now := time.Now()
				db := openWithKeys(b, n, func() time.Time { return time.Now() })
				ctx, stop := context.WithCancel(context.Background())
				var mu sync.Mutex
				var waits []time.Duration
				var wg sync.WaitGroup
				for c := range 4 {
					wg.Go(func() {
						for i := 0; ctx.Err() == nil; i++ {
							key := fmt.Sprintf("c%d-%d", c, i)
							t0 := time.Now()
							res, err := db.Claim(context.Background(), claimOf(key))
							if err != nil || !res.Claimed {
								b.Errorf("claim %s: %+v %v", key, res, err)
								return
							}
							ch := &pay.Charge{ID: "ch_" + key, Scope: "s", Key: key, OrderID: "O-" + key, AmountSatang: 100, GatewayRef: "gw_" + key, CreatedAt: now}
							if _, err := db.Complete(context.Background(), pay.Completion{ClaimRequest: claimOf(key), Claim: res.Claim, Status: 201, Body: []byte("{}"), Charge: ch}); err != nil {
								b.Errorf("save %s: %v", key, err)
								return
							}
							mu.Lock()
							waits = append(waits, time.Since(t0))
							mu.Unlock()
						}
					})
				}
				time.Sleep(time.Second) // the clients under way
				mu.Lock()
				waits = waits[:0]
				mu.Unlock()
				b.ResetTimer()
				t0 := time.Now()
				pruned, err := db.Prune(context.Background(), now.Add(-24*time.Hour))
				took := time.Since(t0)
				b.StopTimer()
				// The same clients for as long again, with no prune.
				mu.Lock()
				during := slices.Clone(waits)
				waits = waits[:0]
				mu.Unlock()
				time.Sleep(took)
				stop()
				wg.Wait()
				after := slices.Clone(waits)
				if err != nil || pruned.Keys != n {
					b.Fatalf("pruned %d of %d (%v)", pruned.Keys, n, err)
				}
				storetest.ReportPruneWaits(b, took, during, after)
			}
		})
	}
}
