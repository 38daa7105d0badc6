package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/web/live"
)

// A mischievous class: students on other loopback addresses open hundreds
// of live views, loop on the delivery reports, the backoff and the herd,
// flood payments, send long and odd order ids and try the simulated
// gateway's switches, reset and charges, while the presenter (127.0.0.1,
// with the token) runs a chapter, pays and runs the lab's checker. The
// presenter's board and stream are never refused, its stream shows every
// one of its payments, never one before an earlier one, the timeline keeps every payment that
// was answered 201, the checker's table is the one it gives with nobody
// else about, and the gateway's switches are the presenter's. The
// presenter's median payment latency with and without the students is
// logged, not asserted: BenchmarkPresenterPaysDuringFlood measures it.
// Then a class of sixty behind one address reconnects all its phones at
// once, three times over, and every phone gets its stream.
func TestMischievousClass(t *testing.T) {
	if testing.Short() {
		t.Skip("a class's worth of load")
	}
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter := fromAddress("127.0.0.1")
	// The presenter's payments are waited for as long as a hang takes to
	// tell, not a client's patience: at a load of 18 to 24 under -race,
	// with the 640 students' streams read in this process, one waited
	// 15 to 21 s at the head of the store's writer (docs/testing.md).
	presenter.Transport.(*http.Transport).ResponseHeaderTimeout = presenterPaymentBound
	var refusedPresenter atomic.Int32

	// The presenter starts a chapter and opens the board's stream.
	if r := sendFrom(t, presenter, http.MethodPut, env.URL+"/api/lessons/current", `{"slug":"retry-every-4xx"}`, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("starting the chapter: %d %s%s", r.Status, r.Body, noAnswer(r))
	}
	board := watchStream(t, presenter, env.URL, PresenterHeader, token)

	// presenterPays sends the presenter's payments one after the other
	// and returns their latencies. The board's stream is read throughout;
	// what it showed is checked at the end: every payment, in order.
	payments := 0
	var presenterOrders []string
	presenterPays := func(round string, n int) []time.Duration {
		var took []time.Duration
		for i := range n {
			payments++
			order := fmt.Sprintf("PR%04dX", payments)
			presenterOrders = append(presenterOrders, order)
			start := time.Now()
			watch, hung := watchStacks(presenterPaymentWatch), watchStacks(presenterPaymentBound-presenterPaymentWatch)
			r := payFrom(t, presenter, env.URL, "presenter-"+order, order, "Bearer presenter", PresenterHeader, token)
			took = append(took, time.Since(start))
			taken, last := watch.stop(), hung.stop()
			if r.Status != http.StatusCreated {
				if last != nil {
					taken = last
				}
				t.Fatalf("%s: the presenter's payment %d (%s, after %v): %d %s%s\n%s", round, i, order, took[len(took)-1].Round(time.Millisecond), r.Status, r.Body, noAnswer(r),
					serverStacks(taken, presenterPaymentWork...))
			}
			if taken != nil {
				t.Logf("%s: the presenter's payment %d (%s) was answered after %v; while it waited:\n%s", round, i, order, took[len(took)-1].Round(time.Millisecond),
					stacksSummary(taken))
			}
		}
		return took
	}

	quiet := presenterPays("quiet", 25)
	// The checker's table with nobody else about, and the simulated
	// gateway's switches as the presenter set them.
	checkerAlone, err := runChecker(env.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	if r := sendFrom(t, presenter, http.MethodPut, env.URL+"/sim/gateway/switches", `{"latency_ms":5,"hold_answer_ms":0}`, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("the presenter setting the gateway's switches: %d %s", r.Status, r.Body)
	}
	switchesBefore := getFrom(t, presenter, env.URL+"/sim/gateway/switches").Body

	// The class: a few students paying as they should, and the others.
	ctx, stopStudents := context.WithCancel(context.Background())
	var students sync.WaitGroup
	var held []*heldStream
	var heldMu sync.Mutex
	student := func(f func()) {
		students.Add(1)
		go func() { defer students.Done(); f() }()
	}
	// Hundreds of live views from three addresses.
	streamAnswers := map[string]map[int]int{}
	var answersMu sync.Mutex
	for _, s := range []struct {
		ip string
		n  int
	}{{"127.0.0.2", 260}, {"127.0.0.6", 260}, {"127.0.0.7", 120}} {
		client := fromAddress(s.ip)
		answersMu.Lock()
		streamAnswers[s.ip] = map[int]int{}
		answersMu.Unlock()
		for range s.n {
			h, status := openHeld(ctx, client, env.URL)
			answersMu.Lock()
			streamAnswers[s.ip][status]++
			answersMu.Unlock()
			if h != nil {
				heldMu.Lock()
				held = append(held, h)
				heldMu.Unlock()
			}
		}
	}
	// The presenter's board, and a second stream, still open.
	if r := getFrom(t, presenter, env.URL+"/board", PresenterHeader, token, "Accept", "text/html"); r.Status != http.StatusOK {
		t.Fatalf("the presenter's board with every student stream open: %d", r.Status)
	}
	second := watchStream(t, presenter, env.URL, PresenterHeader, token)
	_ = second
	// Loops on delivery reports, the backoff and the herd; looped counts
	// their requests, to tell that the checker ran while they went on.
	var looped atomic.Int64
	for _, ip := range []string{"127.0.0.3", "127.0.0.4"} {
		client := fromAddress(ip)
		student(func() {
			for i := 0; i < 3000 && ctx.Err() == nil; i++ {
				looped.Add(1)
				switch i % 3 {
				case 0:
					sendFrom(t, client, http.MethodPost, env.URL+"/api/delivery",
						fmt.Sprintf(`{"attempt":%q,"received":false,"why":"noise %d"}`, uuid.NewString(), i))
				case 1:
					sendFrom(t, client, http.MethodGet, env.URL+fmt.Sprintf("/api/backoff?base=500ms&cap=8s&retries=5&seed=%d", i), "")
				default:
					sendFrom(t, client, http.MethodGet, env.URL+fmt.Sprintf("/api/herd?seed=%d", i), "")
				}
			}
		})
	}
	// A flood of payments, sixteen at a time, as fast as the server
	// answers: it takes turns with everyone's, and is slowed to its share.
	var flooded, floodRefused atomic.Int32
	var floodOrders sync.Map
	flooder := fromAddress("127.0.0.5")
	for w := range 16 {
		student(func() {
			for i := 0; i < 200 && ctx.Err() == nil; i++ {
				order := fmt.Sprintf("F-%d-%d", w, i)
				switch floodPay(ctx, flooder, env.URL, order, "Bearer flood") {
				case http.StatusCreated:
					flooded.Add(1)
					floodOrders.Store(order, true)
				case http.StatusTooManyRequests:
					floodRefused.Add(1)
				}
			}
		})
	}
	// Long and odd order ids.
	odd := fromAddress("127.0.0.8")
	student(func() {
		for i := 0; i < 200 && ctx.Err() == nil; i++ {
			order := fmt.Sprintf("<b>%d</b>&%s", i, strings.Repeat("W", 64))[:64]
			payFrom(t, odd, env.URL, fmt.Sprintf("odd-%d", i), order, "Bearer odd")
		}
	})
	// A class paying as it should.
	var class []string
	var classMu sync.Mutex
	for s := range 6 {
		client := fromAddress(fmt.Sprintf("127.0.1.%d", s+1))
		student(func() {
			for i := 0; i < 5 && ctx.Err() == nil; i++ {
				order := fmt.Sprintf("C%d-%d", s, i)
				if r := payFrom(t, client, env.URL, "class-"+order, order, fmt.Sprintf("Bearer student-%d", s)); r.Status == http.StatusCreated {
					classMu.Lock()
					class = append(class, order)
					classMu.Unlock()
				}
			}
		})
	}
	// Students at the simulated gateway: its switches, its reset, its
	// charges. Each is refused and changes nothing.
	var gatewayAnswers sync.Map
	for _, ip := range []string{"127.0.0.10", "127.0.0.11"} {
		client := fromAddress(ip)
		student(func() {
			for i := 0; i < 100 && ctx.Err() == nil; i++ {
				var r response
				switch i % 3 {
				case 0:
					r = sendFrom(t, client, http.MethodPut, env.URL+"/sim/gateway/switches", `{"refuse":true,"latency_ms":9000}`)
				case 1:
					r = sendFrom(t, client, http.MethodPost, env.URL+"/sim/gateway/reset", "")
				default:
					r = sendFrom(t, client, http.MethodPost, env.URL+"/sim/gateway/charges", fmt.Sprintf(`{"key":"g-%d","order_id":"G-%d","amount_satang":100}`, i, i),
						"Authorization", "Bearer sk_sim_guess")
				}
				if r.Status != 0 {
					n, _ := gatewayAnswers.LoadOrStore(r.Status, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
				}
			}
		})
	}
	// The presenter runs the lab's checker while the students are at it.
	type checked struct {
		rows []string
		err  error
		// loopedDuring is how many of the students' loop requests were
		// sent while the checker ran.
		loopedDuring int64
	}
	checkerNoisy := make(chan checked, 1)
	go func() {
		before := looped.Load()
		rows, err := runChecker(env.URL, token)
		checkerNoisy <- checked{rows, err, looped.Load() - before}
	}()
	// The presenter watches its board the whole time.
	student(func() {
		for i := 0; i < 200 && ctx.Err() == nil; i++ {
			for _, path := range []string{"/board", "/api/faults"} {
				r := sendFrom(t, presenter, http.MethodGet, env.URL+path, "", PresenterHeader, token, "Accept", "text/html")
				if r.Status == http.StatusServiceUnavailable || r.Status == http.StatusTooManyRequests {
					refusedPresenter.Add(1)
				}
			}
		}
	})

	noisy := presenterPays("noisy", 25)
	during := <-checkerNoisy
	stopStudents()
	students.Wait()
	quiet = append(quiet, presenterPays("quiet again", 25)...)
	heldMu.Lock()
	for _, h := range held {
		h.close()
	}
	heldMu.Unlock()

	t.Run("the presenter's stream showed every one of its payments, in the order they were paid", func(t *testing.T) {
		// Waiting for the last one is a guard against a hang, not a
		// measure of speed: how long the stream takes is measured by
		// BenchmarkPresenterPaysDuringMischief.
		last := presenterOrders[len(presenterOrders)-1]
		select {
		case <-board.expect(last):
		case <-time.After(time.Minute):
		}
		// Two payments may reach the page in one write (the board draws
		// at most once per fan-out interval), never a later one before
		// an earlier one.
		at := board.firstShown(presenterPattern)
		for i, order := range presenterOrders {
			line, ok := at[order]
			switch {
			case !ok:
				t.Errorf("the presenter's stream never showed its payment %s", order)
			case i > 0 && line < at[presenterOrders[i-1]]:
				t.Errorf("the presenter's stream showed %s (line %d) before %s (line %d), paid before it", order, line, presenterOrders[i-1], at[presenterOrders[i-1]])
			}
		}
	})
	t.Run("one address holds at most its share of the streams, and the class at most its own", func(t *testing.T) {
		for ip, answers := range streamAnswers {
			if answers[http.StatusOK] > DefaultLimits.StreamsPerAddress {
				t.Errorf("%s holds %d streams, more than its share of %d", ip, answers[http.StatusOK], DefaultLimits.StreamsPerAddress)
			}
			t.Logf("%s: %v", ip, answers)
		}
		total := 0
		for _, answers := range streamAnswers {
			total += answers[http.StatusOK]
		}
		if want := DefaultLimits.MaxStreams - DefaultLimits.PresenterStreams; total != want {
			t.Errorf("the students hold %d streams, want every one they may: %d", total, want)
		}
	})
	t.Run("the presenter's board was never refused", func(t *testing.T) {
		if n := refusedPresenter.Load(); n > 0 {
			t.Errorf("the presenter's pages got 503 or 429 %d times", n)
		}
	})
	t.Run("the checker's table is the one it gives with nobody else about", func(t *testing.T) {
		if during.err != nil {
			t.Fatalf("with the students at it: %v", during.err)
		}
		if during.loopedDuring == 0 {
			t.Error("the students sent nothing while the checker ran: its table was not taken under attack")
		}
		t.Logf("the students sent %d requests from their loops while the checker ran", during.loopedDuring)
		if !slices.Equal(checkerAlone, during.rows) {
			t.Errorf("with the students at it the checker said\n%s\nalone it said\n%s\nwhat differed:\n%s", strings.Join(during.rows, "\n"), strings.Join(checkerAlone, "\n"), rowsDiffer(checkerAlone, during.rows))
		}
	})
	t.Run("the students changed nothing at the simulated gateway", func(t *testing.T) {
		if after := getFrom(t, presenter, env.URL+"/sim/gateway/switches").Body; string(after) != string(switchesBefore) {
			t.Errorf("the gateway's switches were %s, and are %s", switchesBefore, after)
		}
		gatewayAnswers.Range(func(status, n any) bool {
			if status.(int) != http.StatusForbidden {
				t.Errorf("a student at the gateway was answered %d (%d times), not 403", status, n.(*atomic.Int32).Load())
			}
			return true
		})
		if n, ok := gatewayAnswers.Load(http.StatusForbidden); !ok || n.(*atomic.Int32).Load() == 0 {
			t.Error("no student request reached the gateway")
		}
		ledger := getFrom(t, presenter, env.URL+"/sim/gateway/charges").Body
		if strings.Contains(string(ledger), `"G-`) {
			t.Errorf("a student's charge is in the gateway's ledger: %s", ledger)
		}
	})
	t.Run("the timeline holds every payment of the class", func(t *testing.T) {
		r := getFrom(t, presenter, env.URL+"/api/timeline.json", PresenterHeader, token)
		var export TimelineExport
		if err := json.Unmarshal(r.Body, &export); err != nil {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		charged := map[string]bool{}
		for _, e := range export.Events {
			if e.Kind == "charged" {
				charged[e.OrderID] = true
			}
		}
		want := slices.Clone(class)
		floodOrders.Range(func(order, _ any) bool {
			want = append(want, order.(string))
			return true
		})
		for i := 1; i <= payments; i++ {
			want = append(want, fmt.Sprintf("PR%04dX", i))
		}
		for _, order := range want {
			if !charged[order] {
				t.Errorf("the timeline lost the charge of %s", order)
			}
		}
		if len(class) != 30 {
			t.Errorf("%d of the class's 30 payments were charged", len(class))
		}
		t.Logf("the flood: %d charged, %d refused", flooded.Load(), floodRefused.Load())
		t.Logf("%d events exported, the hub's ring holds %d", len(export.Events), live.DefaultSize)
	})
	// How much the students slow the presenter's payments is measured
	// here, quiet and noisy rounds in one run, and reported; speed is
	// not asserted in tests (docs/classroom.md gives the numbers).
	q, n := median(quiet), median(noisy)
	t.Logf("the presenter's median payment: %v quiet, %v with the students at it (%.1fx)", q, n, float64(n)/float64(q))
	t.Run("a class of sixty behind one address reconnects all its phones at once, three times over", func(t *testing.T) {
		waitUntil(t, "the students' streams to close", func() bool {
			env.Server.admission.streams.mu.Lock()
			defer env.Server.admission.streams.mu.Unlock()
			return env.Server.admission.streams.held == 0
		})
		nat := fromAddress("127.0.0.9")
		phones := make([]string, 60)
		for i := range phones {
			phones[i] = uuid.NewString()
		}
		for round := range 3 {
			var got []*heldStream
			refused := 0
			for _, session := range phones {
				for range 2 { // the page and a second tab
					h, _ := openHeld(context.Background(), nat, env.URL, "Cookie", sessionCookie+"="+session)
					if h == nil {
						refused++
						continue
					}
					got = append(got, h)
				}
			}
			if refused > 0 {
				t.Fatalf("round %d: %d of the class's 120 streams were refused", round+1, refused)
			}
			for _, h := range got {
				h.close()
			}
			waitUntil(t, "the class's streams to close", func() bool {
				env.Server.admission.streams.mu.Lock()
				defer env.Server.admission.streams.mu.Unlock()
				return env.Server.admission.streams.held == 0
			})
		}
	})
}

// runChecker presses the lab's "Run the checker" as the presenter and
// returns its table: each case, what it tries and its verdict (the
// details name the run's own keys and times). It may run on a goroutine
// of its own: it reports what went wrong rather than ending the test.
func runChecker(base, token string) ([]string, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/lab/check", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(PresenterHeader, token)
	req.Header.Set("HX-Request", "true")
	// A run takes as long as it takes (labCheckLimit bounds it).
	res, err := (&http.Client{Timeout: labCheckLimit + 10*time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("running the checker: %d %v %s", res.StatusCode, err, body)
	}
	var rows []string
	for _, m := range checkerRow.FindAllStringSubmatch(string(body), -1) {
		rows = append(rows, m[1]+" | "+m[2]+" | "+m[3])
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("the checker's answer has no table: %s", body)
	}
	return rows, nil
}

var checkerRow = regexp.MustCompile(`<td class="num">(\d+)</td>\s*<td>([^<]*)</td>\s*<td><span class="badge[^"]*">([^<]*)</span>`)

// sendFrom sends a request with a JSON body and reads the answer.
func sendFrom(t testing.TB, client *http.Client, method, url, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		// A student's request cut short by the end of the test, or a
		// request that got no answer: the caller says which matters.
		return response{Err: err}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func payFrom(t testing.TB, client *http.Client, base, key, order, auth string, header ...string) response {
	return sendFrom(t, client, http.MethodPost, base+paymentsPath, fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order),
		append([]string{"Idempotency-Key", key, "Authorization", auth}, header...)...)
}

// heldStream is a student's open stream, read and thrown away.
type heldStream struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *heldStream) close() { h.cancel(); <-h.done }

// openHeld opens a stream and keeps reading it until closed; nil and the
// status when it was refused.
func openHeld(ctx context.Context, client *http.Client, base string, header ...string) (*heldStream, int) {
	ctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, 0
	}
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		cancel()
		return nil, res.StatusCode
	}
	h := &heldStream{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer res.Body.Close()
		io.Copy(io.Discard, res.Body)
	}()
	return h, res.StatusCode
}

// watchedStream is the presenter's stream, searched for what it awaits.
type watchedStream struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
	lines   []string
}

// watchStream opens the stream, which must be let in, and reads it.
func watchStream(t *testing.T, client *http.Client, base string, header ...string) *watchedStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("the presenter's stream: %d", res.StatusCode)
	}
	w := &watchedStream{waiting: map[string]chan struct{}{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer res.Body.Close()
		r := bufio.NewReaderSize(res.Body, 1<<16)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if ctx.Err() == nil {
					t.Logf("the presenter's stream ended: %v", err)
				}
				return
			}
			w.mu.Lock()
			w.lines = append(w.lines, line)
			for s, ch := range w.waiting {
				if strings.Contains(line, s) {
					close(ch)
					delete(w.waiting, s)
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// expect returns a channel closed once the stream carries s.
func (w *watchedStream) expect(s string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	for _, line := range w.lines {
		if strings.Contains(line, s) {
			close(ch)
			return ch
		}
	}
	w.waiting[s] = ch
	return ch
}

// firstShown is, for what the stream carried that matches re, the line
// it first appeared on.
func (w *watchedStream) firstShown(re *regexp.Regexp) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := map[string]int{}
	for i, line := range w.lines {
		for _, m := range re.FindAllString(line, -1) {
			if _, ok := at[m]; !ok {
				at[m] = i
			}
		}
	}
	return at
}

// presenterPaymentBound is how long the test waits for an answer to a
// presenter's payment: one with none by then is a hang.
const presenterPaymentBound = 2 * time.Minute

// presenterPaymentWatch is how long a presenter's payment goes
// unanswered before the test takes every goroutine's stack, and again
// as long before its client gives up: should it get no answer, the
// failure shows where the server stood while the payment was still
// under way, rather than after its client hung up; should it get one
// late, the log says where the goroutines stood.
const presenterPaymentWatch = 10 * time.Second

// presenterPaymentWork names the stacks a presenter's payment with no
// answer lists in full: the payments' handlers and what they wait on,
// and the board's writes to the pages.
var presenterPaymentWork = []string{"paymentHandlers", "pay.(*Service)", "board.(*fanWriter)", "board.(*sendRing)", "board.(*Board).run"}

// presenterPattern matches the presenter's order ids in the mischievous
// class.
var presenterPattern = regexp.MustCompile(`PR\d{4}X`)

// noAnswer says why a request got no answer, "" when it got one.
func noAnswer(r response) string {
	if r.Err == nil {
		return ""
	}
	return fmt.Sprintf(" (no answer: %v)", r.Err)
}

// rowsDiffer lists the rows of two tables that differ, one line each:
// "row n: alone | noisy", a row missing from one of them as "(none)".
func rowsDiffer(alone, noisy []string) string {
	var b strings.Builder
	for i := range max(len(alone), len(noisy)) {
		a, n := "(none)", "(none)"
		if i < len(alone) {
			a = alone[i]
		}
		if i < len(noisy) {
			n = noisy[i]
		}
		if a != n {
			fmt.Fprintf(&b, "row %d: alone %q, with the students %q\n", i+1, a, n)
		}
	}
	return b.String()
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
