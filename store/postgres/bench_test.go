package postgres_test

import (
	"context"
	"fmt"
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
