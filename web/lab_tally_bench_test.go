package web

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkNewPaymentsPastTallyWindow is what the lab's bounded tally
// costs a new payment once its window of orders charged once
// (labGuardedWindow) is full: an order that may have fallen out of it is
// read back from the store before the 201 is sent (talliedStorage); the
// filter of dropped orders (droppedOrders) tells the orders that never
// were, whose charges need no read. Two servers on
// two files holding the same 110,000 charges (labBenchServer), the tally
// live on both: one with a window of 1,000, full since the rebuild, the
// other with a window larger than every order it will see, never full.
// Each operation is one pair of rounds, payments per round new payments
// sixteen at once on each server, which goes first alternating; the
// process's CPU time per payment (the clients' too: they are in this
// process, the same on both sides) and payments/s are reported per side,
// with the median of the rounds' ratios. With the same window on both
// servers the ratio came out 1.09x (the server made first costs more in
// this process): read a ratio against that floor.
//
//	go test ./web -run '^$' -bench NewPaymentsPastTallyWindow -benchtime 4x
func BenchmarkNewPaymentsPastTallyWindow(b *testing.B) {
	const (
		stored   = 110_000
		perRound = 2_000
		clients  = 16
	)
	type side struct {
		url    string
		srv    *Server
		next   int
		cpu    time.Duration
		wall   time.Duration
		paid   int
		builds int64
	}
	open := func(window int) *side {
		url, srv := labBenchServer(b, stored)
		tl := srv.lab.tally
		tl.mu.Lock()
		tl.window = window
		tl.mu.Unlock()
		srv.lab.tablesChanged()
		if res, err := http.Get(url + "/api/lab/outcomes"); err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("GET /api/lab/outcomes: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		return &side{url: url, srv: srv, builds: tl.builds.Load()}
	}
	full, notFull := open(1_000), open(10*stored)
	forgot := func(s *side) bool {
		tl := s.srv.lab.tally
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if tl.counts == nil {
			b.Fatal("the tally was dropped during the rounds: the payments were not counted as a live tally counts them")
		}
		return tl.counts.dropped.any()
	}
	if !forgot(full) || forgot(notFull) {
		b.Fatal("want the small window full (an order dropped) and the large one not")
	}
	c := benchClient(clients)
	round := func(s *side) (cpu, wall time.Duration) {
		first := s.next
		s.next += perRound
		cpu0 := processCPU()
		wall = runClients(b, clients, perRound, func(i int) error {
			i += first
			status, err := benchPay(c, s.url, fmt.Sprint("tally-", i), fmt.Sprintf(`{"order_id":"T-%d","amount_satang":100}`, i))
			if err == nil && status != http.StatusCreated {
				err = fmt.Errorf("payment %d: status %d", i, status)
			}
			return err
		})
		cpu = processCPU() - cpu0
		s.cpu, s.wall, s.paid = s.cpu+cpu, s.wall+wall, s.paid+perRound
		return cpu, wall
	}
	var cpuRatios, rateRatios []float64
	b.ResetTimer()
	for i := range b.N {
		order := []*side{full, notFull}
		if i%2 == 1 {
			order = []*side{notFull, full}
		}
		var cpu [2]time.Duration
		var wall [2]time.Duration
		for _, s := range order {
			k := 0
			if s == notFull {
				k = 1
			}
			cpu[k], wall[k] = round(s)
		}
		cpuRatios = append(cpuRatios, float64(cpu[0])/float64(cpu[1]))
		rateRatios = append(rateRatios, float64(wall[1])/float64(wall[0]))
		b.Logf("round %d: CPU per payment %.0f µs full, %.0f µs not full (%.2fx); payments/s %.0f and %.0f (%.2fx)",
			i+1, float64(cpu[0].Microseconds())/perRound, float64(cpu[1].Microseconds())/perRound, cpuRatios[i],
			perRound/wall[0].Seconds(), perRound/wall[1].Seconds(), rateRatios[i])
	}
	b.StopTimer()
	for _, s := range []*side{full, notFull} {
		if n := s.srv.lab.tally.builds.Load(); n != s.builds {
			b.Fatalf("the tables were read %d more times during the rounds, want none", n-s.builds)
		}
	}
	if !forgot(full) || forgot(notFull) {
		b.Fatal("after the rounds: want the small window full and the large one not")
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		n := len(s)
		return (s[(n-1)/2] + s[n/2]) / 2
	}
	perPayment := func(s *side) float64 { return float64(s.cpu.Microseconds()) / float64(s.paid) }
	b.ReportMetric(perPayment(full), "cpu-µs/payment-full")
	b.ReportMetric(perPayment(notFull), "cpu-µs/payment-not-full")
	b.ReportMetric(median(cpuRatios), "cpu-ratio-median")
	b.ReportMetric(float64(full.paid)/full.wall.Seconds(), "payments/s-full")
	b.ReportMetric(float64(notFull.paid)/notFull.wall.Seconds(), "payments/s-not-full")
	b.ReportMetric(median(rateRatios), "payments/s-ratio-median")
}
