package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/storetest"
)

// The benchmarks in this file run on a file written by bench/bigdb, named
// by PAYTWICE_BIG_DB, and are skipped without it:
//
//	go run ./bench/bigdb -db /tmp/big.db -keys 10000000
//	PAYTWICE_BIG_DB=/tmp/big.db PAYTWICE_BIG_KEYS=10000000 go test ./store -run '^$' -bench BigFile -benchtime 1x
//
// BenchmarkBigFilePrune deletes nearly every key of that file: run it last.

// bigFile is the file and how many keys bench/bigdb wrote into it.
func bigFile(b *testing.B) (string, int) {
	path := os.Getenv("PAYTWICE_BIG_DB")
	if path == "" {
		b.Skip("PAYTWICE_BIG_DB names no file written by bench/bigdb")
	}
	var n int
	if _, err := fmt.Sscan(os.Getenv("PAYTWICE_BIG_KEYS"), &n); err != nil || n <= 0 {
		b.Fatal("PAYTWICE_BIG_KEYS must say how many keys bench/bigdb wrote into PAYTWICE_BIG_DB")
	}
	return path, n
}

// bigdbKey is the claim of bench/bigdb's key number i, as it wrote it.
func bigdbKey(i int) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: fmt.Sprintf("token:%032x", i/10000), Key: fmt.Sprintf("%08x-0000-4000-8000-%012x", i/10000, i),
		Method: "POST", Path: "/v1/payments", Fingerprint: fmt.Sprintf("%064x", i), OrderID: fmt.Sprintf("A-%09d", i), AmountSatang: 129900}
}

// BenchmarkBigFileOldKeyReplays times what a replay of a key older than
// the replay cache costs the store (the claim refused, the key's row read
// from the file), sixteen at a time, on the big file and on a file of
// 200,000 keys of the same shape, in alternating rounds of 20,000 keys
// each never asked for before, and reports both and their ratio.
func BenchmarkBigFileOldKeyReplays(b *testing.B) {
	path, n := bigFile(b)
	const small, perRound, rounds, clients = 200_000, 20_000, 4, 16
	smallPath := filepath.Join(b.TempDir(), "small.db")
	sdb, err := store.Open(smallPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		b.Fatal(err)
	}
	sdb.Close()
	fillLikeBigdb(b, smallPath, small)
	open := func(p string) *store.DB {
		db, err := store.Open(p, store.Options{Schema: pay.SchemaPayments})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return db
	}
	big, little := open(path), open(smallPath)
	rng := rand.New(rand.NewPCG(1, 2))
	// Keys from the file's newer part: a server kept with a year's
	// retention prunes its oldest as they pass the year.
	bigOrder := rng.Perm(n / 2)[:rounds*perRound]
	for j := range bigOrder {
		bigOrder[j] += n / 2
	}
	replay := func(db *store.DB, keys []int) time.Duration {
		var wg sync.WaitGroup
		t0 := time.Now()
		for c := range clients {
			wg.Go(func() {
				for j := c; j < len(keys); j += clients {
					res, err := db.Claim(context.Background(), bigdbKey(keys[j]))
					if err != nil || res.Claimed || res.Existing.Status != pay.StatusDone {
						b.Errorf("replay of key %d: %+v %v, want its done row", keys[j], res, err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(t0) / time.Duration(len(keys))
	}
	var ratios []float64
	for range b.N {
		for r := range rounds {
			smallKeys := make([]int, perRound)
			for j := range smallKeys {
				smallKeys[j] = r + j*rounds // each key once over the rounds
			}
			bigKeys := bigOrder[r*perRound : (r+1)*perRound]
			var onBig, onSmall time.Duration
			if r%2 == 0 {
				onBig, onSmall = replay(big, bigKeys), replay(little, smallKeys)
			} else {
				onSmall, onBig = replay(little, smallKeys), replay(big, bigKeys)
			}
			ratios = append(ratios, float64(onBig)/float64(onSmall))
			b.Logf("round %d: %v a replay on %d keys, %v on %d: %.2f×", r+1, onBig, n, onSmall, small, float64(onBig)/float64(onSmall))
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-time-ratio")
}

// fillLikeBigdb writes n done keys as bench/bigdb does, into a fresh file.
func fillLikeBigdb(b *testing.B, path string, n int) {
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(OFF)")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
		INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			response_status, response_body, created_at, locked_at, completed_at, claim, charge_key)
		SELECT 'token:' || printf('%032x', i / 10000), printf('%08x-0000-4000-8000-%012x', i / 10000, i), 'POST', '/v1/payments',
			printf('%064x', i), printf('A-%09d', i), 129900, 'done', 201, '{"charge_id":"ch_' || printf('%024x', i) || '"}',
			? + i, ? + i, ? + i, printf('%032x', i), ''
		FROM n`, n, time.Now().Add(-time.Hour).UnixMilli(), time.Now().Add(-time.Hour).UnixMilli(), time.Now().Add(-time.Hour).UnixMilli()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBigFilePrune prunes every key of the big file older than a day
// (bench/bigdb spreads them over a year: all but a 365th) while four
// clients pay without pause, and reports the payments' waits during the
// prune beside the same clients' for as long again right after it (a
// minute at most), as BenchmarkPaymentsDuringPrune does; then the file's size and free pages
// before the prune, after it, and after as many payments again as the
// clients made during it: the prune frees pages inside the file, which
// later rows reuse, and the file does not shrink (paytwice never runs
// VACUUM on a live file).
func BenchmarkBigFilePrune(b *testing.B) {
	path, _ := bigFile(b)
	for range b.N {
		db, err := store.Open(path, store.Options{Schema: pay.SchemaPayments})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		size := func(when string) {
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			var free, pageSize int64
			raw, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
			if err != nil {
				b.Fatal(err)
			}
			raw.QueryRow(`PRAGMA freelist_count`).Scan(&free)
			raw.QueryRow(`PRAGMA page_size`).Scan(&pageSize)
			raw.Close()
			b.Logf("%s: file %d bytes, %d free pages (%d bytes)", when, st.Size(), free, free*pageSize)
		}
		size("before the prune")
		now := time.Now()
		ctx, stop := context.WithCancel(context.Background())
		var mu sync.Mutex
		var waits []time.Duration
		paid := 0
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					key := fmt.Sprintf("prune-c%d-%d-%d", c, now.UnixNano(), i)
					t0 := time.Now()
					res, err := db.Claim(context.Background(), claimOf(key))
					if err != nil || !res.Claimed {
						b.Errorf("claim %s: %+v %v", key, res, err)
						return
					}
					ch := &pay.Charge{ID: "ch_" + key, Scope: "s", Key: key, OrderID: "O-" + key, AmountSatang: 100, GatewayRef: "gw_" + key, CreatedAt: now}
					if _, err := db.Complete(context.Background(), pay.Completion{ClaimRequest: claimOf(key), Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
						b.Errorf("save %s: %v", key, err)
						return
					}
					mu.Lock()
					waits = append(waits, time.Since(t0))
					paid++
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Second) // the clients under way
		mu.Lock()
		waits = waits[:0]
		mu.Unlock()
		t0 := time.Now()
		pruned, err := db.Prune(context.Background(), now.Add(-24*time.Hour))
		took := time.Since(t0)
		mu.Lock()
		during := slices.Clone(waits)
		waits = waits[:0]
		paidDuring := paid
		mu.Unlock()
		time.Sleep(min(took, time.Minute)) // bounded: the prune itself takes most of an hour
		stop()
		wg.Wait()
		after := slices.Clone(waits)
		if err != nil {
			b.Fatalf("prune: %d keys, %v", pruned.Keys, err)
		}
		b.Logf("pruned %d keys in %v, %d payments during it", pruned.Keys, took, paidDuring)
		storetest.ReportPruneWaits(b, took, during, after)
		size("after the prune and as long again of payments")
	}
}
