package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store/postgres"
	"paytwice/store/storetest"
)

// The benchmark in this file runs on a database written by bench/bigdb,
// named by PAYTWICE_BIG_POSTGRES, and is skipped without it:
//
//	go run ./bench/bigdb -db postgres://…/bigdb -keys 10000000
//	PAYTWICE_BIG_POSTGRES=postgres://…/bigdb go test ./store/postgres -run '^$' -bench BigDatabasePrune -benchtime 1x -timeout 3h -v
//
// It deletes nearly every key of that database: run it last.

// payers are clients paying without pause on one store (a claim, then the
// save of a 201 with its charge), each payment's time from its claim to
// its save kept, so that a benchmark can read the waits of a window (take)
// while the clients go on.
type payers struct {
	mu    sync.Mutex
	waits []time.Duration
	paid  int
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// startPayers starts clients paying on db with keys of their own: prefix
// makes them unique in a database that outlives one run.
func startPayers(b *testing.B, db *postgres.DB, clients int, prefix string) *payers {
	run, stop := context.WithCancel(context.Background())
	p := &payers{stop: stop}
	for c := range clients {
		p.wg.Go(func() {
			for i := 0; run.Err() == nil; i++ {
				key := fmt.Sprintf("%s-c%d-%d", prefix, c, i)
				t0 := time.Now()
				res, err := db.Claim(ctx, claimOf(key))
				if err != nil || !res.Claimed {
					b.Errorf("claim %s: %+v %v", key, res, err)
					return
				}
				ch := &pay.Charge{ID: "ch_" + key, Scope: "s", Key: key, OrderID: "O-" + key, AmountSatang: 100, GatewayRef: "gw_" + key, CreatedAt: t0}
				if _, err := db.Complete(ctx, pay.Completion{ClaimRequest: claimOf(key), Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
					b.Errorf("save %s: %v", key, err)
					return
				}
				p.mu.Lock()
				p.waits = append(p.waits, time.Since(t0))
				p.paid++
				p.mu.Unlock()
			}
		})
	}
	return p
}

// take returns the waits of the payments made since the last take, and
// how many payments were made in all so far.
func (p *payers) take() ([]time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := slices.Clone(p.waits)
	p.waits = p.waits[:0]
	return w, p.paid
}

// end stops the clients and returns the waits since the last take.
func (p *payers) end() []time.Duration {
	p.stop()
	p.wg.Wait()
	w, _ := p.take()
	return w
}

// keyTable is what PostgreSQL says of the keys' table: its heap, the heap
// with its indexes and TOAST, its live and dead rows, and how many times
// autovacuum has been through it.
type keyTable struct {
	heap, total, database int64
	live, dead            int64
	autovacuums           int64
}

func readKeyTable(b *testing.B, db *postgres.DB) keyTable {
	var k keyTable
	// pg_stat_user_tables lags its table by up to a stats interval; it is
	// read for the rows and the vacuums, the sizes come from the files.
	if err := db.Pool().QueryRow(context.Background(), `SELECT pg_relation_size('idempotency_keys'),
			pg_total_relation_size('idempotency_keys'), pg_database_size(current_database()),
			n_live_tup, n_dead_tup, autovacuum_count
		FROM pg_stat_user_tables WHERE relname = 'idempotency_keys' AND schemaname = 'public'`).
		Scan(&k.heap, &k.total, &k.database, &k.live, &k.dead, &k.autovacuums); err != nil {
		b.Fatal(err)
	}
	return k
}

func (k keyTable) String() string {
	return fmt.Sprintf("keys' heap %d bytes, with indexes %d bytes, database %d bytes; %d live rows, %d dead; autovacuumed %d times",
		k.heap, k.total, k.database, k.live, k.dead, k.autovacuums)
}

// BenchmarkBigDatabasePrune prunes every key of the big database older
// than a day (bench/bigdb spreads them over a year: all but a 365th) while
// four clients pay without pause, and reports the payments' waits during
// the prune beside the same clients' for as long again right after it (a
// minute at most), as BenchmarkPaymentsDuringPrune does. Then it waits
// (15 minutes at most) for autovacuum to go through the keys' table after
// the prune, the server's only vacuum, and has the clients pay as many
// payments again as they made during the prune: the keys' table is read
// before the prune, after it, after the vacuum and after those payments,
// to show that the new rows go into the room the prune freed rather than
// growing the table (paytwice never runs VACUUM FULL, which would lock the
// table for as long as it rewrites it).
func BenchmarkBigDatabasePrune(b *testing.B) {
	url := os.Getenv("PAYTWICE_BIG_POSTGRES")
	if url == "" {
		b.Skip("PAYTWICE_BIG_POSTGRES names no database written by bench/bigdb")
	}
	for range b.N {
		db, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		before := readKeyTable(b, db)
		b.Logf("before the prune: %v", before)
		now := time.Now()
		prefix := fmt.Sprintf("prune-%d", now.UnixNano())
		p := startPayers(b, db, 4, prefix)
		// The clients under way before the prune starts: bounded, a
		// payment takes milliseconds.
		for i := 0; i < 6000; i++ {
			if _, paid := p.take(); paid >= 100 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.take()
		t0 := time.Now()
		pruned, err := db.Prune(context.Background(), now.Add(-24*time.Hour))
		took := time.Since(t0)
		during, _ := p.take()
		if err != nil {
			p.end()
			b.Fatalf("prune: %d keys, %v", pruned.Keys, err)
		}
		afterPrune := readKeyTable(b, db)
		time.Sleep(min(took, time.Minute)) // the same clients, no prune
		after := p.end()
		b.Logf("pruned %d keys in %v (%.0f keys/s), %d payments during it", pruned.Keys, took.Round(time.Second),
			float64(pruned.Keys)/took.Seconds(), len(during))
		storetest.ReportPruneWaits(b, took, during, after)
		b.Logf("after the prune: %v", afterPrune)

		// autovacuum, as a server has it: a pass over the table that ends
		// after the prune did with nearly no dead row left (one under way
		// when the prune ended leaves the last batches' rows to the next).
		vacuumed := afterPrune
		for w0 := time.Now(); ; {
			if vacuumed.autovacuums > afterPrune.autovacuums && vacuumed.dead < int64(pruned.Keys)/100 {
				b.Logf("after autovacuum (%v after the prune): %v", time.Since(w0).Round(time.Second), vacuumed)
				break
			}
			if time.Since(w0) > 15*time.Minute {
				b.Logf("autovacuum did not go through the table within 15 minutes of the prune: %v", vacuumed)
				break
			}
			time.Sleep(5 * time.Second)
			vacuumed = readKeyTable(b, db)
		}

		// As many payments again as during the prune (bounded: ten
		// minutes of polls).
		p = startPayers(b, db, 4, prefix+"-again")
		for i := 0; i < 60_000; i++ {
			if _, paid := p.take(); paid >= len(during) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.end()
		_, paidAgain := p.take()
		grown := readKeyTable(b, db)
		b.Logf("after %d payments more: %v", paidAgain, grown)
		b.ReportMetric(float64(grown.heap-vacuumed.heap)/float64(max(1, paidAgain)), "heap-growth-bytes/payment")
	}
}
