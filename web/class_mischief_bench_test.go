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

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/store"
)

// BenchmarkPresenterPaysDuringMischief measures how much a whole
// mischievous class slows the presenter's payments, where
// BenchmarkPresenterPaysDuringFlood measures one flood of payments. Each
// iteration is two rounds, one quiet and one noisy, in alternating order;
// in each the presenter (127.0.0.1, with the token and its board's stream
// open) makes presenterRound payments one after the other. In the noisy
// round the students, each on loopback addresses of their own, hold
// hundreds of live views, loop on the thundering herd, the backoff
// schedule and the delivery reports (a new bearer token for every
// request from one of them), and flood payments sixteen at a time. The
// reported ratio is the presenter's median payment in the noisy rounds
// over its median in the quiet ones, measured in the same run. Run it with
//
//	go test ./web -run '^$' -bench PresenterPaysDuringMischief -benchtime 4x
//
// with PAYTWICE_LIMITS to try other shares.
func BenchmarkPresenterPaysDuringMischief(b *testing.B) {
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
	presenter := fromAddress("127.0.0.1")
	board, status := openHeld(context.Background(), presenter, env.URL, PresenterHeader, token)
	if board == nil {
		b.Fatalf("the presenter's stream: %d", status)
	}
	defer board.close()

	const presenterRound = 40
	paid := 0
	var noise noiseCounts
	round := func(noisy bool) (took []time.Duration) {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var held []*heldStream
		if noisy {
			held = mischief(ctx, &wg, env.URL, paid, &noise)
		}
		for range presenterRound {
			paid++
			order := fmt.Sprintf("PM%05d", paid)
			start := time.Now()
			r := payFrom(b, presenter, env.URL, "presenter-"+order, order, "Bearer presenter", PresenterHeader, token)
			took = append(took, time.Since(start))
			if r.Status != http.StatusCreated {
				b.Fatalf("the presenter's payment %s: %d %s", order, r.Status, r.Body)
			}
		}
		stop()
		wg.Wait()
		for _, h := range held {
			h.close()
		}
		return took
	}

	var quiet, noisy []time.Duration
	b.ResetTimer()
	for i := range b.N {
		for _, n := range []bool{i%2 == 1, i%2 == 0} {
			if took := round(n); n {
				noisy = append(noisy, took...)
			} else {
				quiet = append(quiet, took...)
			}
		}
	}
	b.StopTimer()
	q, n := median(quiet), median(noisy)
	b.ReportMetric(float64(q.Microseconds())/1000, "quiet-ms")
	b.ReportMetric(float64(n.Microseconds())/1000, "noisy-ms")
	b.ReportMetric(float64(n)/float64(q), "ratio")
	b.ReportMetric(float64(noise.answered.Load())/float64(b.N), "noise-answered/round")
	b.ReportMetric(float64(noise.refused.Load())/float64(b.N), "noise-429/round")
}

// noiseCounts are the students' requests answered and refused with 429.
type noiseCounts struct{ answered, refused atomic.Int64 }

func (n *noiseCounts) count(status int) {
	switch {
	case status == http.StatusTooManyRequests:
		n.refused.Add(1)
	case status != 0:
		n.answered.Add(1)
	}
}

// mischief sets a class of students on the server until ctx ends: it
// returns once their live views are open, the loops running on wg.
// Every loop is bounded in count as well.
func mischief(ctx context.Context, wg *sync.WaitGroup, base string, round int, noise *noiseCounts) []*heldStream {
	var held []*heldStream
	for _, ip := range []string{"127.0.0.2", "127.0.0.6"} {
		client := fromAddress(ip)
		for range 200 {
			if h, status := openHeld(ctx, client, base); h != nil {
				held = append(held, h)
			} else {
				noise.count(status)
			}
		}
	}
	get := func(client *http.Client, url, auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return statusOf(client.Do(req))
	}
	post := func(client *http.Client, url, body, auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, stringsReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return statusOf(client.Do(req))
	}
	for a, ip := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.8"} {
		client := fromAddress(ip)
		for w := range 2 {
			wg.Go(func() {
				for i := 0; i < 5000 && ctx.Err() == nil; i++ {
					auth := ""
					if a == 2 { // a new token for every request
						auth = "Bearer mint-" + uuid.NewString()
					}
					var status int
					switch i % 3 {
					case 0:
						status = post(client, base+"/api/delivery", fmt.Sprintf(`{"attempt":%q,"received":false,"why":"noise %d"}`, uuid.NewString(), i), auth)
					case 1:
						status = get(client, base+fmt.Sprintf("/api/backoff?base=500ms&cap=8s&retries=5&seed=%d", i), auth)
					default:
						status = get(client, base+fmt.Sprintf("/api/herd?seed=%d%d%d%d", round, a, w, i), auth)
					}
					noise.count(status)
				}
			})
		}
	}
	flooder := fromAddress("127.0.0.5")
	for w := range 16 {
		wg.Go(func() {
			for i := 0; i < 2000 && ctx.Err() == nil; i++ {
				noise.count(floodPay(ctx, flooder, base, fmt.Sprintf("M%d-%d-%d", round, w, i), "Bearer flood"))
			}
		})
	}
	return held
}

// statusOf reads an answer to its end and returns its status, 0 when
// there was none.
func statusOf(res *http.Response, err error) int {
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
