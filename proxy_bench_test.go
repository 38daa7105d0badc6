package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/proxy"
)

// BenchmarkProxyAddedLatency measures what the proxy adds to a payment's
// latency at a steady 500 requests a second: rounds of requests sent
// straight to paytwice and rounds sent through the proxy (no fault), in
// turn, on the same server, each request on a schedule of its own (open
// loop: a slow answer does not slow the sender). b.N is the number of
// requests on each side.
//
//	go test -run '^$' -bench ProxyAddedLatency -benchtime 3000x -cpu 2 .
func BenchmarkProxyAddedLatency(b *testing.B) {
	b.Run("before paytwice on SQLite", func(b *testing.B) {
		benchProxyAddedLatency(b, newPayTarget(b).url)
	})
	// A target that answers at once shows the proxy's own cost, apart
	// from how a busy database's latency varies between rounds.
	b.Run("before a target that answers at once", func(b *testing.B) {
		stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"status":"paid"}`))
		}))
		b.Cleanup(stub.Close)
		benchProxyAddedLatency(b, stub.URL)
	})
}

func benchProxyAddedLatency(b *testing.B, targetURL string) {
	u, _ := url.Parse(targetURL)
	p, err := proxy.New(proxy.Config{Target: u, Schedule: []proxy.Fault{proxy.None}})
	if err != nil {
		b.Fatal(err)
	}
	ps := httptest.NewServer(p)
	b.Cleanup(ps.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: 10 * time.Second}

	rate := benchRate()
	perRound := rate / 2 // half a second per round
	interval := time.Second / time.Duration(rate)
	var direct, proxied []time.Duration
	var failed int
	var firstFailure string
	n := 0
	send := func(base string, out *[]time.Duration, count int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for i := range count {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
			n++
			body := fmt.Sprintf(`{"order_id":"B-%d","amount_satang":100}`, n)
			key := fmt.Sprintf("bench-%d", n)
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				t0 := time.Now()
				res, err := client.Do(req)
				ok := err == nil && res.StatusCode == http.StatusCreated
				if err == nil {
					// Read to the end, as a client does, so that
					// the connection is kept for the next request.
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				d := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				if !ok {
					if failed++; failed == 1 {
						firstFailure = fmt.Sprint(err)
						if err == nil {
							firstFailure = res.Status
						}
					}
					return
				}
				*out = append(*out, d)
			})
		}
		wg.Wait()
	}
	// One round of each to warm connections and caches, not counted.
	var warm []time.Duration
	send(targetURL, &warm, 50)
	send(ps.URL, &warm, 50)
	b.ResetTimer()
	// Which side goes first alternates, so that neither always meets
	// what the round before left behind (a checkpoint, a busy queue).
	for round, left := 0, b.N; left > 0; round, left = round+1, left-perRound {
		k := min(left, perRound)
		if round%2 == 0 {
			send(targetURL, &direct, k)
			send(ps.URL, &proxied, k)
		} else {
			send(ps.URL, &proxied, k)
			send(targetURL, &direct, k)
		}
	}
	b.StopTimer()
	if failed > 0 {
		b.Fatalf("%d requests failed; the first: %s", failed, firstFailure)
	}
	q := func(d []time.Duration, f float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[int(f*float64(len(s)-1))]) / float64(time.Millisecond)
	}
	mean := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(sum) / float64(len(d)) / float64(time.Millisecond)
	}
	b.ReportMetric(q(direct, .5), "direct-p50-ms")
	b.ReportMetric(q(proxied, .5), "proxied-p50-ms")
	b.ReportMetric(q(proxied, .5)-q(direct, .5), "added-p50-ms")
	b.ReportMetric(mean(proxied)-mean(direct), "added-mean-ms")
	b.ReportMetric(q(proxied, .99)-q(direct, .99), "added-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// benchRate is the steady rate, 500 a second unless PROXY_BENCH_RATE says
// otherwise.
func benchRate() int {
	var r int
	if _, err := fmt.Sscan(os.Getenv("PROXY_BENCH_RATE"), &r); err == nil && r > 0 {
		return r
	}
	return 500
}
