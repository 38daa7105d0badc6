package web

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"testing"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
)

// BenchmarkHeapPastWindows asks whether the server's live heap stays flat
// once the memory it keeps by design is full: the replay cache (its newest
// ReplayCacheSize done keys) and the lab tally's window of orders charged
// once (labGuardedWindow). Both are 100,000 in a server, which takes
// 200,000 payments and more to pass; here both are windows payments, so
// the same question takes a tenth of the time. It pays rounds of windows
// new payments (sixteen at once, a key and an order each, the tally live)
// and reads the live heap after a collection at the end of each: the slope
// before the windows are full is what they keep per payment; the slope
// from two windows on is what nothing bounds:
//
//	go test ./web -run '^$' -bench HeapPastWindows -benchtime 1x
func BenchmarkHeapPastWindows(b *testing.B) {
	const (
		windows = 10_000
		rounds  = 8
		clients = 16
	)
	for range b.N {
		clock := sim.NewClock(nil)
		dir := b.TempDir()
		db, err := store.Open(filepath.Join(dir, "paytwice.db"), store.Options{Now: clock.Now, ReplayCacheSize: windows})
		if err != nil {
			b.Fatal(err)
		}
		ledger, err := store.Open(filepath.Join(dir, "gateway.db"), store.Options{Schema: pay.SchemaLedger})
		if err != nil {
			b.Fatal(err)
		}
		srv := NewServer(Config{Logger: log.New(io.Discard, "", 0), Ledger: ledger}, db, clock)
		tl := srv.lab.tally
		tl.mu.Lock()
		tl.window = windows
		tl.mu.Unlock()
		srv.lab.tablesChanged()
		hs := httptest.NewServer(srv.Handler())
		if res, err := http.Get(hs.URL + "/api/lab/outcomes"); err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET /api/lab/outcomes: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		c := benchClient(clients)
		live := func() float64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return float64(m.HeapAlloc)
		}
		heap := []float64{live()}
		for r := range rounds {
			runClients(b, clients, windows, func(i int) error {
				i += r * windows
				status, err := benchPay(c, hs.URL, fmt.Sprint("heap-", i), fmt.Sprintf(`{"order_id":"H-%d","amount_satang":100}`, i))
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("payment %d: status %d", i, status)
				}
				return err
			})
			heap = append(heap, live())
			b.Logf("%6d payments: live heap %.1f MB", (r+1)*windows, heap[r+1]/1e6)
		}
		if !tl.fresh() {
			b.Fatal("the tally was dropped during the rounds: the payments were not counted as a live tally counts them")
		}
		perPayment := func(from, to int) float64 { return (heap[to] - heap[from]) / float64((to-from)*windows) }
		b.ReportMetric(perPayment(0, 1), "B/payment-first-window")
		b.ReportMetric(perPayment(2, rounds), "B/payment-past-two-windows")
		b.ReportMetric(heap[rounds]/1e6, "MB-live-heap-end")
		c.CloseIdleConnections()
		hs.Close()
		srv.Close()
		ledger.Close()
		db.Close()
	}
}
