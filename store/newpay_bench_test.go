//go:build unix

package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
)

// BenchmarkNewPayments times what a new payment costs the store: its claim
// (with whatever the store reads before it) and the save of its 201 with a
// charge, sixteen clients at once on a fresh file, b.N payments in all. It
// is the path every first attempt of a key takes, so a read added before
// the claim shows here, in the payments/s and in the process's CPU time
// per payment (cpu-us/payment, less noisy on a busy machine). Compare builds in alternating runs:
//
//	go test ./store -run '^$' -bench NewPayments -benchtime 20000x -count 1
func BenchmarkNewPayments(b *testing.B) {
	const clients = 16
	db, err := store.Open(filepath.Join(b.TempDir(), "new.db"), store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				c := claimOf(fmt.Sprintf("new-%d-%d", now.UnixNano(), i))
				res, err := db.Claim(context.Background(), c)
				if err != nil || !res.Claimed {
					b.Errorf("claim %s: %+v %v", c.Key, res, err)
					return
				}
				ch := &pay.Charge{ID: "ch_" + c.Key, Scope: c.Scope, Key: c.Key, OrderID: c.OrderID, AmountSatang: c.AmountSatang, GatewayRef: "gw_" + c.Key, CreatedAt: now}
				if _, err := db.Complete(context.Background(), pay.Completion{ClaimRequest: c, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
					b.Errorf("save %s: %v", c.Key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(syscall.TimevalToNsec(after.Utime) + syscall.TimevalToNsec(after.Stime) -
		syscall.TimevalToNsec(before.Utime) - syscall.TimevalToNsec(before.Stime))
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/payment")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "payments/s")
}
