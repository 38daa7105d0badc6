package web

import (
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/web/live"
)

// The lab panel's cost as a classroom pays, reported in the README:
//
//	go test ./web -run '^$' -bench 'LabLive' -benchtime 20x
//
// Each operation is what every open page does after a burst: something
// happened (one event), then GET /lab/live asks for the outcomes it has
// not drawn yet. The database holds 10k or 110k charges of earlier
// payments, one in fifty of them the lab's own, one order in a hundred
// charged twice.
func BenchmarkLabLive(b *testing.B) {
	for _, n := range []int{10_000, 110_000} {
		b.Run(fmt.Sprintf("charges=%dk", n/1000), func(b *testing.B) {
			base, srv := labBenchServer(b, n)
			c := &http.Client{}
			seen := uint64(1 << 62) // a version no page has: the first answer draws
			ask := func() {
				res, err := c.Get(base + "/lab/live?o=" + strconv.FormatUint(seen, 10))
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("GET /lab/live: %d %s", res.StatusCode, body)
				}
				seen = srv.hub.LastSeq()
			}
			ask() // the first question may count the tables
			b.ResetTimer()
			for b.Loop() {
				srv.hub.Publish(live.Event{Kind: live.Received, Message: "bench"})
				ask()
			}
		})
	}
}

// labBenchServer starts a server on a file already holding n charges,
// each with its done key row.
func labBenchServer(b *testing.B, n int) (string, *Server) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "paytwice.db")
	mc := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	clock := sim.NewClock(mc.Now)
	db, err := store.Open(path, store.Options{Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	tx, err := raw.Begin()
	if err != nil {
		b.Fatal(err)
	}
	at := mc.Now().Add(-time.Hour).UnixMilli()
	for i := range n {
		// One order in a hundred was paid again under a new key.
		o := i
		if i%100 == 1 {
			o = i - 1
		}
		key, order := fmt.Sprintf("bench-key-%07d", i), fmt.Sprintf("B-%07d", o)
		if i%50 == 0 {
			key = "lab no-key " + key
		} else if _, err := tx.Exec(`INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang,
			status, response_status, response_body, created_at, locked_at, completed_at)
			VALUES ('', ?, 'POST', '/v1/payments', 'f', ?, 100, 'done', 201, '{}', ?, ?, ?)`, key, order, at, at, at); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO charges (id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at)
			VALUES (?, '', ?, ?, 100, ?, ?)`, fmt.Sprintf("ch_bench%07d", i), key, order, fmt.Sprintf("gw_%d", i), at+int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	srv := NewServer(Config{Logger: log.New(io.Discard, "", 0), Ledger: db}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(func() { srv.Close(); hs.Close() })
	return hs.URL, srv
}
