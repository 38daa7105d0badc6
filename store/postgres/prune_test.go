package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/store/storetest"
)

// fillDoneKeys writes n done keys created before createdAt straight into
// the database, in one statement: a million through the API would take
// minutes.
func fillDoneKeys(tb testing.TB, db *postgres.DB, n int, createdAt time.Time) {
	tb.Helper()
	if _, err := db.Pool().Exec(context.Background(), `INSERT INTO idempotency_keys
		(scope, key, method, path, fingerprint, order_id, amount_satang, status,
		 response_status, response_body, created_at, locked_at, completed_at, claim, charge_key)
		SELECT 'old', 'key-' || i, 'POST', '/v1/payments', 'fp', 'O-' || i, 100, 'done', 201, '{}',
		 $2::timestamptz + i * interval '1 millisecond', $2::timestamptz + i * interval '1 millisecond',
		 $2::timestamptz + i * interval '1 millisecond', 'c', ''
		FROM generate_series(1, $1::int) AS i`, n, createdAt); err != nil {
		tb.Fatal(err)
	}
}

func claimOf(key string) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp-" + key, OrderID: "O-" + key, AmountSatang: 100}
}

func TestPruneDeletesEveryOldKeyInBatches(t *testing.T) {
	ownDatabase(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	db := open(t, func() time.Time { return now })
	fillDoneKeys(t, db, 1234, now.Add(-48*time.Hour))
	// A key of today and a started one stay.
	if res, err := db.Claim(ctx, claimOf("new")); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	pruned, err := db.Prune(ctx, now.Add(-24*time.Hour))
	if err != nil || pruned.Keys != 1234 || pruned.First.Scope != "old" {
		t.Fatalf("pruned %+v (%v), want 1234 keys of scope old", pruned, err)
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
	ownDatabase(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	db := open(t, func() time.Time { return now })
	fillDoneKeys(t, db, 20_000, now.Add(-48*time.Hour))
	storetest.PruneStopsWhenCtxEnds(t, db, now.Add(-24*time.Hour), 20_000)
}

// Servers pruning the same keys at once share them: every key is pruned
// by exactly one of them. A row is deleted once, so the prunes' counts
// add up to the keys there were only if none counted a key another one
// deleted, and none was left behind.
func TestPruneBySeveralServersAtOnce(t *testing.T) {
	ownDatabase(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	dbs := servers(t, 3, postgres.Options{Now: func() time.Time { return now }})
	fillDoneKeys(t, dbs[0], 3000, now.Add(-48*time.Hour))
	results := make([]pay.Pruned, len(dbs))
	errs := make([]error, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Go(func() { results[i], errs[i] = db.Prune(ctx, now.Add(-24*time.Hour)) })
	}
	wg.Wait()
	pruned := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("server %d: %v", i, errs[i])
		}
		pruned += r.Keys
	}
	if _, done, err := dbs[0].KeyCounts(ctx); err != nil || done != 0 || pruned != 3000 {
		t.Fatalf("%d keys pruned, %d done left (%v); want 3000 and 0", pruned, done, err)
	}
}

// BenchmarkPaymentsDuringPrune prunes 110,000 and 1,000,000 old done keys
// while four clients pay without pause (claim, then save with a charge),
// and reports how long the slowest payment took and the p99, with the
// prune's own duration, next to the same clients' payments in a window as
// long as the prune right after it, with no prune: on a busy machine the
// slowest of thousands of payments is slow whatever the prune does, and
// the difference between the two windows is the prune's. Run it with
//
//	PAYTWICE_TEST_POSTGRES=postgres://… go test ./store/postgres -run '^$' -bench PaymentsDuringPrune -benchtime 1x
func BenchmarkPaymentsDuringPrune(b *testing.B) {
	for _, n := range []int{110_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for range b.N {
				now := time.Now()
				db, err := postgres.Open(context.Background(), pgtest.NewDatabase(b), postgres.Options{})
				if err != nil {
					b.Fatal(err)
				}
				fillDoneKeys(b, db, n, now.Add(-48*time.Hour))
				p := startPayers(b, db, 4, "c")
				time.Sleep(time.Second) // the clients under way
				p.take()
				b.ResetTimer()
				t0 := time.Now()
				pruned, err := db.Prune(ctx, now.Add(-24*time.Hour))
				took := time.Since(t0)
				b.StopTimer()
				// The same clients for as long again, with no prune.
				during, _ := p.take()
				time.Sleep(took)
				after := p.end()
				db.Close()
				if err != nil || pruned.Keys != n {
					b.Fatalf("pruned %d of %d (%v)", pruned.Keys, n, err)
				}
				storetest.ReportPruneWaits(b, took, during, after)
			}
		})
	}
}
