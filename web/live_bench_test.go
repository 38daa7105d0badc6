package web

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"paytwice/static"
	"paytwice/web/live"
)

// The live page's performance, reported in the README:
//
//	go test ./web -run '^$' -bench 'FirstLoad|SSEFanout|PaymentsWithViewers' -benchtime 2000x
//	go test ./web -run '^$' -bench 'EventCost' -benchtime 400x
//
// FirstLoad is the compressed size of everything a first visit to /
// downloads. SSEFanout is publish-to-delivery latency with 200 open event
// streams. PaymentsWithViewers is the payment path's throughput with no
// viewer and with 200. EventCost is the CPU the live pages cost per
// payment, with the projector off, running unwatched, and with 1 and 200
// viewers.

const firstLoadLimit = 100 << 10

var assetRef = regexp.MustCompile(`(?:src|href)="(/static/[^"]+)"`)

// firstLoad fetches / and every script and style sheet it references, as a
// browser with an empty cache would, and returns the bytes on the wire
// (gzip-compressed where the server compresses) per URL.
func firstLoad(tb testing.TB, base string) map[string]int {
	tb.Helper()
	// A transport that does not decompress, so the body is what crossed
	// the wire.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(path string) ([]byte, int) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Set("Accept", "text/html,*/*")
		res, err := c.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		defer res.Body.Close()
		wire, err := io.ReadAll(res.Body)
		if err != nil {
			tb.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			tb.Fatalf("GET %s: %d", path, res.StatusCode)
		}
		body := wire
		if res.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(strings.NewReader(string(wire)))
			if err != nil {
				tb.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				tb.Fatal(err)
			}
		}
		return body, len(wire)
	}
	sizes := map[string]int{}
	page, n := get("/")
	sizes["/"] = n
	for _, m := range assetRef.FindAllStringSubmatch(string(page), -1) {
		if _, done := sizes[m[1]]; !done {
			_, sizes[m[1]] = get(m[1])
		}
	}
	return sizes
}

func sum(sizes map[string]int) int {
	total := 0
	for _, n := range sizes {
		total += n
	}
	return total
}

func TestFirstLoadUnder100KB(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	sizes := firstLoad(t, env.URL)
	for _, want := range []string{"/", static.Path("app.css"), static.Path("live.css"), static.Path("pay.js"), static.Path("htmx-2.0.11.min.js"), static.Path("htmx-ext-sse-2.2.4.min.js")} {
		if _, ok := sizes[want]; !ok {
			t.Errorf("the first load does not fetch %s (got %v)", want, sizes)
		}
	}
	if total := sum(sizes); total >= firstLoadLimit {
		t.Fatalf("first load is %d bytes compressed, over %d: %v", total, firstLoadLimit, sizes)
	} else {
		t.Logf("first load: %d bytes compressed %v", total, sizes)
	}
}

func BenchmarkFirstLoad(b *testing.B) {
	env := newTestEnvTB(b, Config{})
	var total int
	for b.Loop() {
		total = sum(firstLoad(b, env.URL))
	}
	b.ReportMetric(float64(total), "bytes-compressed")
	b.ReportMetric(float64(total)/1024, "KiB-compressed")
}

// viewer is one open event stream in a benchmark: it reads frames and
// records when each id arrived.
type viewer struct {
	res  *http.Response
	seen atomic.Uint64
}

// openViewers opens n event streams and starts draining them; onFrame
// is called with each frame's id as it arrives and the id of the frame
// before it on that stream (a frame may carry several events: every event
// after prev up to id arrived with it).
func openViewers(tb testing.TB, env *testEnv, n int, onFrame func(prev, id uint64)) func() {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n + 64}}
	since := env.Server.live().Snapshot().Seq
	var wg sync.WaitGroup
	viewers := make([]*viewer, n)
	for i := range viewers {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.URL+"/events?since="+live.EventID(env.Server.hub.Epoch(), since), nil)
		res, err := client.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		v := &viewer{res: res}
		viewers[i] = v
		wg.Add(1)
		go func() {
			defer wg.Done()
			if onFrame == nil {
				// Only draining, as a browser on another machine would: the
				// benchmark should not charge parsing to the server.
				_, _ = io.Copy(io.Discard, res.Body)
				return
			}
			r := bufio.NewReaderSize(res.Body, 64<<10)
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(line) > 4 && string(line[:4]) == "id: " {
					_, id, _ := live.ParseEventID(strings.TrimSpace(string(line[4:])))
					prev := v.seen.Swap(id)
					onFrame(prev, id)
				}
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for int64(env.Server.live().Viewers()) < int64(n) {
		if time.Now().After(deadline) {
			tb.Fatalf("only %d of %d viewers connected", int64(env.Server.live().Viewers()), n)
		}
		time.Sleep(time.Millisecond)
	}
	return func() {
		cancel()
		for _, v := range viewers {
			v.res.Body.Close()
		}
		wg.Wait()
	}
}

// paymentEvents are the events of one ordinary payment, in order.
func paymentEvents(i int) []live.Event {
	rq := fmt.Sprintf("rq_b%07d", i)
	key := fmt.Sprintf("bench-key-%d", i)
	base := live.Event{Request: rq, Scope: "session:benchbenchbench", Key: key, OrderID: fmt.Sprintf("B-%d", i), Amount: 129900}
	steps := []struct {
		kind   live.Kind
		status int
		msg    string
	}{
		{live.Received, 0, "POST /v1/payments"},
		{live.Claimed, 0, "key row inserted as started"},
		{live.GatewayCall, 0, "charging the gateway with the key"},
		{live.GatewayReply, 200, "charged gw_0123456789abcdef01234567"},
		{live.Charged, 0, fmt.Sprintf("charge ch_%024x recorded", i)},
		{live.Completed, 201, "response saved on the key"},
	}
	out := make([]live.Event, len(steps))
	for j, s := range steps {
		e := base
		e.Kind, e.Status, e.Message = s.kind, s.status, s.msg
		out[j] = e
	}
	return out
}

// BenchmarkSSEFanout publishes the events of b.N payments, one payment
// every 40 ms (a classroom of thirty all paying at once: 25 payments and
// 150 events a second, each drawn), to 200 open event streams, and
// reports how long each event took from Publish to each viewer's reader
// (in the frame that carried it: a wake joins the events since the last
// one into one frame): p50, p99 and the worst.
func BenchmarkSSEFanout(b *testing.B) {
	const viewers, perPayment = 200, 6
	env := newTestEnvTB(b, Config{})
	hub := env.Server.hub
	// published[seq-base] is when event seq was published (unix ns).
	base := hub.LastSeq()
	published := make([]atomic.Int64, b.N*perPayment+1)
	var mu sync.Mutex
	var all []time.Duration
	var delivered atomic.Int64
	stop := openViewers(b, env, viewers, func(prev, id uint64) {
		now := time.Now().UnixNano()
		for seq := max(prev, base) + 1; seq <= id; seq++ {
			i := seq - base
			if i >= uint64(len(published)) {
				return
			}
			t := published[i].Load()
			if t == 0 {
				continue
			}
			mu.Lock()
			all = append(all, time.Duration(now-t))
			mu.Unlock()
			delivered.Add(1)
		}
	})
	defer stop()

	b.ResetTimer()
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for i := range b.N {
		<-tick.C
		for _, e := range paymentEvents(i) {
			seq := hub.LastSeq() + 1 // only this goroutine publishes
			published[seq-base].Store(time.Now().UnixNano())
			hub.Publish(e)
		}
	}
	want := int64(viewers * perPayment * b.N)
	deadline := time.Now().Add(10 * time.Second)
	for delivered.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if int64(len(all)) < want {
		b.Fatalf("%d deliveries of %d", len(all), want)
	}
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
	b.ReportMetric(float64(viewers), "viewers")
}

// BenchmarkPaymentsWithViewers measures new payments per second over
// loopback HTTP (16 concurrent clients, synchronous=FULL) with no live
// viewer and with 200 open event streams receiving every step.
func BenchmarkPaymentsWithViewers(b *testing.B) {
	for _, viewers := range []int{0, 200} {
		b.Run(fmt.Sprintf("viewers=%d", viewers), func(b *testing.B) {
			env := newTestEnvTB(b, Config{})
			if viewers > 0 {
				defer openViewers(b, env, viewers, nil)()
			}
			c := benchClient(16)
			b.ResetTimer()
			elapsed := runClients(b, 16, b.N, func(i int) error {
				status, err := benchPay(c, env.URL, fmt.Sprint("v-", i), fmt.Sprintf(`{"order_id":"V-%d","amount_satang":%d}`, i, 100+i%1000))
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("payment %d: status %d", i, status)
				}
				return err
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "payments/s")
		})
	}
}

// BenchmarkViewerCost compares the payment path with and without 200
// viewers in one run, alternating blocks of payments between two servers
// (one with 200 open event streams), so that whatever else the machine is
// doing hits both alike. It reports both rates and the reduction.
func BenchmarkViewerCost(b *testing.B) {
	const block = 2500
	plain := newTestEnvTB(b, Config{})
	watched := newTestEnvTB(b, Config{})
	defer openViewers(b, watched, 200, nil)()
	c := benchClient(16)
	var n [2]int
	var took, cpu [2]time.Duration
	b.ResetTimer()
	for round := 0; n[0]+n[1] < 2*b.N; round++ {
		for side, env := range []*testEnv{plain, watched} {
			count := min(block, b.N-n[side])
			if count <= 0 {
				continue
			}
			start := n[side]
			cpu0 := processCPU()
			took[side] += runClients(b, 16, count, func(i int) error {
				k := start + i
				status, err := benchPay(c, env.URL, fmt.Sprint("vc-", k), fmt.Sprintf(`{"order_id":"VC-%d","amount_satang":100}`, k))
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("payment %d: status %d", k, status)
				}
				return err
			})
			cpu[side] += processCPU() - cpu0
			n[side] += count
		}
	}
	b.StopTimer()
	rate := func(side int) float64 { return float64(n[side]) / took[side].Seconds() }
	perPayment := func(side int) float64 { return float64(cpu[side].Microseconds()) / float64(n[side]) }
	b.ReportMetric(rate(0), "payments/s-no-viewers")
	b.ReportMetric(rate(1), "payments/s-200-viewers")
	b.ReportMetric(100*(1-rate(1)/rate(0)), "%-reduction")
	// CPU time per payment (server, clients and viewers all run in this
	// process) varies far less than wall time on a shared machine.
	b.ReportMetric(perPayment(0), "cpu-µs/payment-no-viewers")
	b.ReportMetric(perPayment(1), "cpu-µs/payment-200-viewers")
	b.ReportMetric(100*(perPayment(1)/perPayment(0)-1), "%-more-cpu")
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEventCost is what the live pages cost per payment, in CPU time
// of the whole process: the events of b.N payments are published at a
// classroom's pace (one payment every 12.5 ms: 480 events a second, below
// busy mode, so every event is drawn for whoever watches), with
//   - projector=off: no page was ever opened (nothing but the hub);
//   - viewers=0: a page was opened and closed (the projector runs, nobody
//     watches);
//   - viewers=1 and viewers=200: that many open event streams reading
//     every frame.
//
// The cost per payment is process CPU ÷ payments: server, viewers and
// the publishing loop all run in this process.
func BenchmarkEventCost(b *testing.B) {
	for _, tc := range []struct {
		name    string
		start   bool
		viewers int
	}{{"projector=off", false, 0}, {"viewers=0", true, 0}, {"viewers=1", true, 1}, {"viewers=200", true, 200}} {
		b.Run(tc.name, func(b *testing.B) {
			env := newTestEnvTB(b, Config{})
			if tc.start {
				env.Server.live()
			}
			if tc.viewers > 0 {
				defer openViewers(b, env, tc.viewers, nil)()
			}
			hub := env.Server.hub
			tick := time.NewTicker(12500 * time.Microsecond)
			defer tick.Stop()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := range b.N {
				<-tick.C
				for _, e := range paymentEvents(i) {
					hub.Publish(e)
				}
			}
			// Let the projector and the viewers finish the last events.
			if tc.start {
				waitProjector(b, env)
				time.Sleep(150 * time.Millisecond) // one fan-out interval and the writes
			}
			cpu := processCPU() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/payment")
		})
	}
}
