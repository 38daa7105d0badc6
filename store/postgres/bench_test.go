package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// BenchmarkPaymentPath is the store's side of a new payment on
// PostgreSQL, 16 at a time: the claim, then the save of the charge and
// the answer through the claim's fencing token (the gateway's insert is
// the ledger's, not timed here); and a replay's claim of a done key. Run
// it with
//
//	PAYTWICE_TEST_POSTGRES=postgres://… go test ./store/postgres -run '^$' -bench PaymentPath
func BenchmarkPaymentPath(b *testing.B) {
	db, err := postgres.Open(context.Background(), pgtest.NewDatabase(b), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	var n atomic.Int64
	pay1 := func(b *testing.B, key string) {
		c := pay.ClaimRequest{Scope: "bench", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp-" + key, OrderID: "O-" + key, AmountSatang: 100}
		res, err := db.Claim(ctx, c)
		if err != nil || !res.Claimed {
			b.Fatalf("claim %s: %+v %v", key, res, err)
		}
		ch := &pay.Charge{ID: "ch_" + key, Scope: "bench", Key: key, OrderID: c.OrderID, AmountSatang: 100, GatewayRef: "gw_" + key, CreatedAt: time.Now()}
		if _, err := db.Complete(ctx, pay.Completion{ClaimRequest: c, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
			b.Fatalf("save %s: %v", key, err)
		}
	}
	b.Run("new", func(b *testing.B) {
		b.SetParallelism(8) // 16 on two cores
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				pay1(b, fmt.Sprint("new-", n.Add(1)))
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "payments/s")
	})
	const keys = 200
	for i := range keys {
		pay1(b, fmt.Sprint("replay-", i))
	}
	b.Run("replay", func(b *testing.B) {
		var next atomic.Int64
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := fmt.Sprint("replay-", next.Add(1)%keys)
				c := pay.ClaimRequest{Scope: "bench", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp-" + key, OrderID: "O-" + key, AmountSatang: 100}
				if res, err := db.Claim(ctx, c); err != nil || res.Claimed || res.Existing.Status != pay.StatusDone {
					b.Fatalf("replay %s: %+v %v", key, res, err)
				}
			}
		})
	})
}

// BenchmarkNotifyRoundTrip is how long a batch of events takes from its
// server to that server's own listener, numbered (NotifyNumbered: the
// counter row, the kept batch) against as before (Notify), in four
// alternating rounds: what a server's own events would wait if it drew
// them only in the class's order, as every other server does; and the
// sending and listening process's CPU for each (cpu-µs/op: encoding the
// batch, reading its answer and the notification). Run it with
//
//	PAYTWICE_TEST_POSTGRES=postgres://… go test ./store/postgres -run '^$' -bench NotifyRoundTrip -benchtime 300x
func BenchmarkNotifyRoundTrip(b *testing.B) {
	db, err := postgres.Open(context.Background(), pgtest.NewDatabase(b), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	lctx, cancel := context.WithCancel(context.Background())
	got, listening := make(chan string, 1), make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = db.Listen(lctx, "bench", func() { listening <- struct{}{} }, func(p string) { got <- p })
	}()
	b.Cleanup(func() { cancel(); <-done })
	<-listening
	payload := strings.Repeat("e", 2000) // a batch of about five payments' events
	for round := range 8 {
		numbered := round%2 == 0
		name := map[bool]string{true: "numbered", false: "plain"}[numbered]
		b.Run(name, func(b *testing.B) {
			cpu := processCPU()
			for i := 0; b.Loop(); i++ {
				p := fmt.Sprint(i, " ", payload)
				if numbered {
					_, err = db.NotifyNumbered(ctx, "bench", p)
				} else {
					err = db.Notify(ctx, "bench", p)
				}
				if err != nil {
					b.Fatal(err)
				}
				<-got
			}
			b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
