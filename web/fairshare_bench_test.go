package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
)

// BenchmarkPresenterPaysDuringFlood measures how much one student's flood
// of payments slows the presenter's: each iteration is two rounds, one
// quiet and one while a student at 127.0.0.2 pays sixteen at a time
// without pause, in alternating order, and in each the presenter
// (127.0.0.1, with the token) makes presenterRound payments one after
// the other with its board's stream open. The reported ratio is the
// presenter's median payment in the flooded rounds over its median in the
// quiet ones, measured in the same run. Run it with
//
//	go test ./web -run '^$' -bench PresenterPaysDuringFlood -benchtime 6x
//
// with PAYTWICE_LIMITS to try other shares (payments-per-address=16 is
// the server as it was before payments took turns).
func BenchmarkPresenterPaysDuringFlood(b *testing.B) {
	b.Run("one token", func(b *testing.B) { benchPresenterDuringFlood(b, false) })
	b.Run("a new token per payment", func(b *testing.B) { benchPresenterDuringFlood(b, true) })
}

func benchPresenterDuringFlood(b *testing.B, mint bool) {
	const token = "front-of-the-room"
	ledger, err := store.Open(filepath.Join(b.TempDir(), "gateway.db"), store.Options{Schema: pay.SchemaLedger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ledger.Close() })
	limits, err := ParseLimits(os.Getenv("PAYTWICE_LIMITS"))
	if err != nil {
		b.Fatal(err)
	}
	env := newTestEnvTB(b, Config{Ledger: ledger, PresenterToken: token, Limits: limits})
	presenter, student := fromAddress("127.0.0.1"), fromAddress("127.0.0.2")
	board, status := openHeld(context.Background(), presenter, env.URL, PresenterHeader, token)
	if board == nil {
		b.Fatalf("the presenter's stream: %d", status)
	}
	defer board.close()

	const presenterRound, floodWorkers, floodMax = 40, 16, 20000
	paid := 0
	round := func(flooded bool) (took []time.Duration, flood, refused int64) {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var floodPaid, floodRefused, floodAsked atomic.Int64
		if flooded {
			for w := range floodWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						n := floodAsked.Add(1)
						if n > floodMax {
							return
						}
						order := fmt.Sprintf("F%d-%d-%d", paid, w, n)
						auth := "Bearer flood"
						if mint {
							auth = "Bearer flood-" + order
						}
						switch floodPay(ctx, student, env.URL, order, auth) {
						case http.StatusCreated:
							floodPaid.Add(1)
						case http.StatusTooManyRequests:
							floodRefused.Add(1)
						}
					}
				}()
			}
			// Let the flood get going before the presenter starts.
			for i := 0; i < 100 && floodAsked.Load() < 4*floodWorkers; i++ {
				time.Sleep(5 * time.Millisecond)
			}
		}
		for range presenterRound {
			paid++
			order := fmt.Sprintf("PR%05d", paid)
			start := time.Now()
			r := payFrom(b, presenter, env.URL, "presenter-"+order, order, "Bearer presenter", PresenterHeader, token)
			took = append(took, time.Since(start))
			if r.Status != http.StatusCreated {
				b.Fatalf("the presenter's payment %s: %d %s", order, r.Status, r.Body)
			}
		}
		stop()
		wg.Wait()
		return took, floodPaid.Load(), floodRefused.Load()
	}

	var quiet, flooded []time.Duration
	var floodPaid, floodRefused int64
	b.ResetTimer()
	for i := range b.N {
		for _, f := range []bool{i%2 == 1, i%2 == 0} {
			took, n, no := round(f)
			if f {
				flooded, floodPaid, floodRefused = append(flooded, took...), floodPaid+n, floodRefused+no
			} else {
				quiet = append(quiet, took...)
			}
		}
	}
	b.StopTimer()
	q, f := median(quiet), median(flooded)
	b.ReportMetric(float64(q.Microseconds())/1000, "quiet-ms")
	b.ReportMetric(float64(f.Microseconds())/1000, "flooded-ms")
	b.ReportMetric(float64(f)/float64(q), "ratio")
	b.ReportMetric(float64(floodPaid)/float64(b.N), "flood-paid/round")
	b.ReportMetric(float64(floodRefused)/float64(b.N), "flood-429/round")
}

// floodPay is one payment of the flood, given up when ctx ends; its
// status, 0 when it had none.
func floodPay(ctx context.Context, client *http.Client, base, order, auth string) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+paymentsPath,
		strings.NewReader(fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "flood-"+order)
	req.Header.Set("Authorization", auth)
	res, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}
