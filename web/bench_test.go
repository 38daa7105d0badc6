package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// The payment-path benchmarks run over real HTTP on 127.0.0.1 against a
// real SQLite file with synchronous=FULL: every 201 is durable before it
// is sent. Run them with
//
//	go test ./web -run '^$' -bench 'Payments|Replays|Storm' -benchtime 20000x

// benchClient keeps enough idle connections for the concurrent clients,
// so the benchmark measures the server, not TCP handshakes.
func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
}

func benchPay(c *http.Client, url, key, body string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/payments", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// runClients splits n requests over workers goroutines and returns the
// wall time; do gets the request's index.
func runClients(b *testing.B, workers, n int, do func(i int) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// newBenchEnv runs the server as main does: the gateway's ledger in a
// file of its own, committing in parallel with the payments file.
func newBenchEnv(b *testing.B) *testEnv {
	ledger, err := store.Open(filepath.Join(b.TempDir(), "gateway.db"), store.Options{Schema: pay.SchemaLedger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ledger.Close() })
	return newTestEnvTB(b, Config{Ledger: ledger})
}

// newPostgresBenchEnv runs the server as main does on PostgreSQL
// (PAYTWICE_TEST_POSTGRES, a fresh database): the payments and, in a pool
// of its own, the gateway's ledger in one database, and the relay
// between servers listening on it.
func newPostgresBenchEnv(b *testing.B) *testEnv {
	url := pgtest.NewDatabase(b)
	ctx := context.Background()
	clock := sim.NewClock(nil)
	db, err := postgres.Open(ctx, url, postgres.Options{Now: clock.Now, Schema: pay.SchemaPayments})
	if err != nil {
		b.Fatal(err)
	}
	ledger, err := postgres.Open(ctx, url, postgres.Options{Now: clock.Now, Schema: pay.SchemaLedger})
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(Config{Ledger: ledger, Peers: db, Logger: log.New(io.Discard, "", 0)}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(func() { srv.Close(); hs.Close(); ledger.Close(); db.Close() })
	return &testEnv{tb: b, URL: hs.URL, Server: srv, HTTP: hs}
}

// payNew makes the i-th new payment of a benchmark, with a key and an
// order of its own, and expects its 201.
func payNew(c *http.Client, url string, i int) error {
	status, err := benchPay(c, url, fmt.Sprint("new-", i), fmt.Sprintf(`{"order_id":"B-%d","amount_satang":%d}`, i, 100+i%1000))
	if err == nil && status != http.StatusCreated {
		err = fmt.Errorf("payment %d: status %d", i, status)
	}
	return err
}

func BenchmarkNewPayments(b *testing.B) {
	env := newBenchEnv(b)
	c := benchClient(16)
	b.ResetTimer()
	elapsed := runClients(b, 16, b.N, func(i int) error { return payNew(c, env.URL, i) })
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "payments/s")
	ws := env.DB.WriterStats()
	b.ReportMetric(float64(ws.Ops)/float64(ws.Commits), "writes/commit")
	if n := env.charges(); n != b.N {
		b.Fatalf("%d charges for %d payments", n, b.N)
	}
}

// BenchmarkNewPaymentsPostgres is BenchmarkNewPayments on PostgreSQL:
//
//	PAYTWICE_TEST_POSTGRES=postgres://… go test ./web -run '^$' -bench 'Postgres' -benchtime 20000x
//
// allocs/op counts the whole server's allocations per payment (the
// client's too: it runs in the same process).
func BenchmarkNewPaymentsPostgres(b *testing.B) {
	env := newPostgresBenchEnv(b)
	c := benchClient(16)
	b.ReportAllocs()
	b.ResetTimer()
	elapsed := runClients(b, 16, b.N, func(i int) error { return payNew(c, env.URL, i) })
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "payments/s")
	if n := env.charges(); n != b.N {
		b.Fatalf("%d charges for %d payments", n, b.N)
	}
}

func BenchmarkReplays(b *testing.B) {
	env := newBenchEnv(b)
	c := benchClient(16)
	const keys = 1000
	for i := range keys {
		if _, err := benchPay(c, env.URL, fmt.Sprint("r-", i), fmt.Sprintf(`{"order_id":"R-%d","amount_satang":100}`, i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	elapsed := runClients(b, 16, b.N, func(i int) error {
		k := i % keys
		status, err := benchPay(c, env.URL, fmt.Sprint("r-", k), fmt.Sprintf(`{"order_id":"R-%d","amount_satang":100}`, k))
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("replay %d: status %d", i, status)
		}
		return err
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "replays/s")
	if n := env.charges(); n != keys {
		b.Fatalf("%d charges, want %d", n, keys)
	}
}

// BenchmarkStorm1000 sends 1,000 concurrent requests with one key per
// iteration and reports how long the slowest took to be answered.
func BenchmarkStorm1000(b *testing.B) { benchStorm(b, newBenchEnv(b)) }

// BenchmarkStorm1000Postgres is BenchmarkStorm1000 on PostgreSQL.
func BenchmarkStorm1000Postgres(b *testing.B) { benchStorm(b, newPostgresBenchEnv(b)) }

func benchStorm(b *testing.B, env *testEnv) {
	c := benchClient(1000)
	var worst time.Duration
	for it := range b.N {
		key := fmt.Sprint("storm-", it)
		var wg sync.WaitGroup
		start := make(chan struct{})
		statuses := make([]int, 1000)
		errs := make([]error, 1000)
		for i := range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				statuses[i], errs[i] = benchPay(c, env.URL, key, `{"order_id":"S","amount_satang":100}`)
			}()
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		worst = max(worst, time.Since(t0))
		for i := range statuses {
			if errs[i] != nil || (statuses[i] != 201 && statuses[i] != 409) {
				b.Fatalf("request %d: %d %v", i, statuses[i], errs[i])
			}
		}
		if n := env.charges(); n != it+1 {
			b.Fatalf("%d charges after %d storms", n, it+1)
		}
	}
	b.ReportMetric(worst.Seconds()*1000, "worst-ms")
}
