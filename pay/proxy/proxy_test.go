package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// manualClock is a clock the test moves, so that waits are exact.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// stubAPI answers every POST 201 and counts them; GET /v1/payments
// answers with as many charges as POSTs for the order.
type stubAPI struct {
	mu     sync.Mutex
	posts  map[string]int
	server *httptest.Server
}

func newStubAPI(t *testing.T) *stubAPI {
	s := &stubAPI{posts: map[string]int{}}
	s.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			s.posts[string(b)]++
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"status":"paid"}`)
			return
		}
		io.WriteString(w, `{"charges":[]}`)
	}))
	t.Cleanup(s.server.Close)
	return s
}

// testProxy is a proxy before a stub API, on a manual clock, whose
// requests the test sends straight to its handler.
func testProxy(t *testing.T, schedule ...Fault) (*Proxy, *manualClock) {
	t.Helper()
	return testProxyAttempts(t, 5, schedule...)
}

// testProxyAttempts is testProxy for a client that says it makes at
// most maxAttempts attempts.
func testProxyAttempts(t *testing.T, maxAttempts int, schedule ...Fault) (*Proxy, *manualClock) {
	t.Helper()
	api := newStubAPI(t)
	u, _ := url.Parse(api.server.URL)
	clock := &manualClock{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	if len(schedule) == 0 {
		schedule = []Fault{None}
	}
	p, err := New(Config{Target: u, Schedule: schedule, Now: clock.Now, Budget: time.Minute, MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	return p, clock
}

// post sends one POST through the proxy's handler, as one client. A
// hang-up, which a recorder cannot take, is status 0.
func post(t *testing.T, p *Proxy, key, body string) (status int) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			status = 0
		}
	}()
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
	r.RemoteAddr = "127.0.0.1:5555"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "test")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	return w.Code
}

func grades(t *testing.T, p *Proxy) map[Rule]Grade {
	t.Helper()
	rep := p.Grade(context.Background(), nil)
	if len(rep.Clients) != 1 {
		t.Fatalf("%d clients", len(rep.Clients))
	}
	out := map[Rule]Grade{}
	for _, g := range rep.Clients[0].Grades {
		out[g.Rule] = g
	}
	return out
}

func TestGrouping(t *testing.T) {
	t.Run("the same key and body is one action, whatever the order of the fields and the quotes", func(t *testing.T) {
		p, _ := testProxy(t)
		post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
		post(t, p, `"k1"`, `{ "amount_satang": 1, "order_id": "A" }`)
		rep := p.Snapshot()
		if n := len(rep.Clients[0].Actions); n != 1 {
			t.Fatalf("%d actions, want 1", n)
		}
	})
	t.Run("a new key with the same body is a retry that broke rule 2", func(t *testing.T) {
		p, clock := testProxy(t, Unavailable)
		post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
		clock.Advance(2 * time.Second)
		post(t, p, "k2", `{"order_id":"A","amount_satang":1}`)
		g := grades(t, p)
		if g[RuleSameKey].Verdict != Broken || g[RuleRetryAfter].Verdict != Passed {
			t.Fatalf("%+v", g)
		}
	})
	t.Run("the same key with another body while the action is open breaks rule 3", func(t *testing.T) {
		p, clock := testProxy(t, Unavailable)
		post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
		clock.Advance(2 * time.Second)
		post(t, p, "k1", `{"order_id":"A","amount_satang":2}`)
		if g := grades(t, p); g[RuleSameBody].Verdict != Broken || g[RuleNoKeyReuse].Verdict == Broken {
			t.Fatalf("%+v", g)
		}
	})
	t.Run("a key of an ended action sent with another body is a new action that broke rule 4", func(t *testing.T) {
		p, _ := testProxy(t)
		post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
		post(t, p, "k1", `{"order_id":"B","amount_satang":1}`)
		g := grades(t, p)
		if g[RuleNoKeyReuse].Verdict != Broken || g[RuleSameBody].Verdict == Broken {
			t.Fatalf("%+v", g)
		}
		if n := len(p.Snapshot().Clients[0].Actions); n != 2 {
			t.Fatalf("%d actions, want 2", n)
		}
	})
	t.Run("a retry sooner than Retry-After breaks rule 8; one at the hint keeps it", func(t *testing.T) {
		p, clock := testProxy(t, Conflict)
		post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
		clock.Advance(300 * time.Millisecond)
		post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
		if g := grades(t, p); g[RuleRetryAfter].Verdict != Broken {
			t.Fatalf("%+v", g[RuleRetryAfter])
		}
		post(t, p, "k2", `{"order_id":"B","amount_satang":1}`) // the next action: 409 again
		clock.Advance(time.Second)
		post(t, p, "k2", `{"order_id":"B","amount_satang":1}`)
		if g := grades(t, p); g[RuleRetryAfter].Broken != 1 || g[RuleRetryAfter].Exercised != 2 {
			t.Fatalf("%+v", g[RuleRetryAfter])
		}
	})
	t.Run("past the attempts stated, rule 9 breaks and the action is forwarded untouched", func(t *testing.T) {
		p, clock := testProxy(t, Down)
		var last int
		for range 6 {
			last = post(t, p, "k1", `{"order_id":"A","amount_satang":1}`)
			clock.Advance(100 * time.Millisecond)
		}
		if g := grades(t, p); g[RuleBudget].Verdict != Broken || last != http.StatusCreated {
			t.Fatalf("last answer %d, %+v", last, g[RuleBudget])
		}
	})
}

// backoffClient pays one order per action of a schedule through the
// proxy's handler on its manual clock, retrying what a careful client
// retries (no answer, 408, 409, 425, 429, 5xx) up to retries times,
// waiting what wait says for retry n (from 0), and never less than a
// Retry-After.
func backoffClient(t *testing.T, p *Proxy, clock *manualClock, actions, retries int, wait func(n int) time.Duration) {
	t.Helper()
	for i := range actions {
		key := fmt.Sprintf("k-%d", i)
		body := fmt.Sprintf(`{"order_id":"O-%d","amount_satang":1}`, i)
		for n := 0; ; n++ {
			status, retryAfter := postFull(t, p, key, body)
			if status != 0 && !retryableStatus(status) {
				break
			}
			if n == retries {
				break
			}
			clock.Advance(max(wait(n), retryAfter))
		}
		clock.Advance(time.Second) // the next action starts later
	}
}

// postFull is post that also reads the answer's Retry-After.
func postFull(t *testing.T, p *Proxy, key, body string) (status int, retryAfter time.Duration) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			status, retryAfter = 0, 0
		}
	}()
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
	r.RemoteAddr = "127.0.0.1:5555"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "test")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	secs, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	return w.Code, time.Duration(secs) * time.Second
}

// withoutSlow is the default schedule with its slow action forwarded
// plainly: a slow fault holds a request on the real clock, and the wait
// after it is not judged anyway.
func withoutSlow() []Fault {
	s := slices.Clone(DefaultSchedule)
	for i, f := range s {
		if f == Slow {
			s[i] = None
		}
	}
	return s
}

// jitterGrade runs one backoff client over the default schedule and
// returns its grade on rule 7 and the waits it was judged on.
func jitterGrade(t *testing.T, retries int, wait func(n int) time.Duration) (Grade, []WaitSample) {
	t.Helper()
	schedule := withoutSlow()
	p, clock := testProxyAttempts(t, retries+1, schedule...)
	backoffClient(t, p, clock, len(schedule), retries, wait)
	rep := p.Grade(context.Background(), nil)
	c := rep.Clients[0]
	for _, g := range c.Grades {
		if g.Verdict == Broken && g.Rule != RuleJitter {
			t.Fatalf("rule %d broken too: %s", g.Rule, g.Detail)
		}
	}
	return c.Grades[RuleJitter-1], c.Waits
}

func fullJitter(rnd *rand.Rand, base, cap time.Duration) func(n int) time.Duration {
	return func(n int) time.Duration {
		return time.Duration(rnd.Int64N(int64(min(cap, base<<n)) + 1))
	}
}

// Rule 7 judges the shape of the waits at the client's own scale: full
// jitter passes at any base and cap; waits that do not grow, or that do
// not spread, break it; each seed below is one client's draws.
func TestJitterRule(t *testing.T) {
	// Each case grades clients on proxies and clocks of its own, all
	// processor: they share the cores with TestJitterRuleRates.
	t.Parallel()
	t.Run("the default schedule gives growth enough waits to judge", func(t *testing.T) {
		t.Parallel()
		for retries, want := range map[int][2]int{5: {13, 12}, 4: {13, 10}} {
			_, waits := jitterGrade(t, retries, func(n int) time.Duration { return 10 * time.Millisecond << n })
			first, later := 0, 0
			for _, w := range waits {
				switch {
				case w.Retry == 0:
					first++
				case w.Retry >= growthFrom:
					later++
				}
			}
			if first != want[0] || later != want[1] {
				t.Fatalf("%d retries: %d first waits and %d later ones, want %v", retries, first, later, want)
			}
		}
	})
	t.Run("full jitter passes, whatever its base and cap", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(30) {
			rnd := rand.New(rand.NewPCG(seed, 42))
			for _, scale := range []struct{ base, cap time.Duration }{
				{50 * time.Millisecond, 400 * time.Millisecond},
				{500 * time.Millisecond, 8 * time.Second},
				{20 * time.Millisecond, 2 * time.Second},
			} {
				g, _ := jitterGrade(t, 5, fullJitter(rnd, scale.base, scale.cap))
				if g.Verdict != Passed || g.Detail != "" {
					t.Fatalf("seed %d, base %v cap %v: %s %s", seed, scale.base, scale.cap, g.Verdict, g.Detail)
				}
			}
		}
	})
	t.Run("full jitter capped at twice its base is capped, not judged", func(t *testing.T) {
		t.Parallel()
		// Its waits average twice the first ones at best: a mean alone
		// judged about half of these runs broken. A few whose draws never
		// came near the cap still look like a ceiling that never grew.
		capped, broken := 0, 0
		for seed := range uint64(30) {
			rnd := rand.New(rand.NewPCG(seed, 42))
			g, _ := jitterGrade(t, 5, fullJitter(rnd, 100*time.Millisecond, 200*time.Millisecond))
			if strings.Contains(g.Detail, "the waits do not grow") {
				broken++
			}
			if g.Verdict == Passed && strings.Contains(g.Detail, "growth capped, not judged") {
				capped++
			}
		}
		if capped == 0 || broken > 5 {
			t.Errorf("of 30 runs %d reported capped and %d judged broken; want some capped and at most 5 broken", capped, broken)
		}
	})
	t.Run("jittered waits under a ceiling that never grows break it", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(30) {
			rnd := rand.New(rand.NewPCG(seed, 42))
			for _, ceiling := range []time.Duration{20 * time.Millisecond, 400 * time.Millisecond, 5 * time.Second} {
				g, _ := jitterGrade(t, 5, fullJitter(rnd, ceiling, ceiling))
				if g.Verdict != Broken || g.Broken != 1 || !strings.Contains(g.Detail, "the waits do not grow") {
					t.Fatalf("seed %d, ceiling %v: %s (%d) %s", seed, ceiling, g.Verdict, g.Broken, g.Detail)
				}
			}
		}
	})
	// On a loaded machine a client wakes 100 to 170 ms late, longer than
	// its first waits: the lateness, added to every wait, once pulled a
	// careful client's later waits down to 1.9 times its first ones.
	lateBy := func(rnd *rand.Rand, wait func(n int) time.Duration) func(n int) time.Duration {
		return func(n int) time.Duration {
			return wait(n) + 100*time.Millisecond + time.Duration(rnd.Int64N(int64(70*time.Millisecond)))
		}
	}
	t.Run("full jitter woken 100-170 ms late still grows", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(30) {
			rnd := rand.New(rand.NewPCG(seed, 42))
			for _, cap := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond} {
				g, _ := jitterGrade(t, 5, lateBy(rnd, fullJitter(rnd, 50*time.Millisecond, cap)))
				// Passed, or a growth too noisy to judge said "capped":
				// never "the waits do not grow".
				if g.Verdict != Passed {
					t.Fatalf("seed %d, cap %v: %s %s", seed, cap, g.Verdict, g.Detail)
				}
			}
		}
	})
	t.Run("no backoff at all, woken 100-170 ms late, does not grow", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(30) {
			rnd := rand.New(rand.NewPCG(seed, 42))
			g, _ := jitterGrade(t, 5, lateBy(rnd, func(int) time.Duration { return 0 }))
			if g.Verdict != Broken || !strings.Contains(g.Detail, "the waits do not grow") {
				t.Fatalf("seed %d: %s %s", seed, g.Verdict, g.Detail)
			}
		}
	})
	t.Run("jittered waits under a fixed ceiling, woken 100-170 ms late, do not grow", func(t *testing.T) {
		t.Parallel()
		for seed := range uint64(30) {
			rnd := rand.New(rand.NewPCG(seed, 42))
			g, _ := jitterGrade(t, 5, lateBy(rnd, fullJitter(rnd, 200*time.Millisecond, 200*time.Millisecond)))
			if g.Verdict != Broken || !strings.Contains(g.Detail, "the waits do not grow") {
				t.Fatalf("seed %d: %s %s", seed, g.Verdict, g.Detail)
			}
		}
	})
	t.Run("one fixed wait breaks it twice: a herd, and no growth", func(t *testing.T) {
		t.Parallel()
		g, _ := jitterGrade(t, 5, func(int) time.Duration { return 200 * time.Millisecond })
		if g.Verdict != Broken || !strings.Contains(g.Detail, "no jitter") || g.Broken < 2 {
			t.Fatalf("%s (%d) %s", g.Verdict, g.Broken, g.Detail)
		}
	})
	t.Run("exponential waits without jitter grow, and break it as a herd", func(t *testing.T) {
		t.Parallel()
		g, _ := jitterGrade(t, 5, func(n int) time.Duration { return min(400*time.Millisecond, 50*time.Millisecond<<n) })
		if g.Verdict != Broken || !strings.Contains(g.Detail, "no jitter") {
			t.Fatalf("%s %s", g.Verdict, g.Detail)
		}
		p, clock := testProxyAttempts(t, 6, withoutSlow()...)
		backoffClient(t, p, clock, len(DefaultSchedule), 5, func(n int) time.Duration { return min(400*time.Millisecond, 50*time.Millisecond<<n) })
		for _, v := range p.Grade(context.Background(), nil).Clients[0].Actions {
			for _, vi := range v.Violations {
				if strings.Contains(vi.Detail, "do not grow") {
					t.Fatalf("growth judged broken: %s", vi.Detail)
				}
			}
		}
	})
	t.Run("no wait at all breaks it", func(t *testing.T) {
		t.Parallel()
		g, _ := jitterGrade(t, 5, func(int) time.Duration { return 0 })
		if g.Verdict != Broken || !strings.Contains(g.Detail, "no backoff at all") {
			t.Fatalf("%s %s", g.Verdict, g.Detail)
		}
	})
	t.Run("two retries are too few to see growth: the spread is judged, the growth said not judged", func(t *testing.T) {
		t.Parallel()
		rnd := rand.New(rand.NewPCG(1, 42))
		g, _ := jitterGrade(t, 2, fullJitter(rnd, 50*time.Millisecond, 400*time.Millisecond))
		if g.Verdict != Passed || !strings.Contains(g.Detail, "growth not judged") {
			t.Fatalf("%s %s", g.Verdict, g.Detail)
		}
		g, _ = jitterGrade(t, 2, fullJitter(rnd, 50*time.Millisecond, 50*time.Millisecond))
		if g.Verdict != Passed || !strings.Contains(g.Detail, "growth not judged") {
			t.Fatalf("a fixed ceiling with two retries: %s %s", g.Verdict, g.Detail)
		}
	})
}

func TestParseRequest(t *testing.T) {
	h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	a := parseRequest("POST", "/v1/payments", h, []byte("order_id=A&amount_satang=1"))
	b := parseRequest("POST", "/v1/payments", h, []byte("amount_satang=1&order_id=A"))
	if a.Body != b.Body || a.Order != "A" || a.HasKey {
		t.Fatalf("%+v %+v", a, b)
	}
	c := parseRequest("POST", "/v1/other", h, []byte("order_id=A&amount_satang=1"))
	if c.Body == a.Body {
		t.Fatal("another path has the same digest")
	}
}

// FuzzParseRequest: whatever a client sends, parsing neither panics nor
// tells two orderings of one JSON object apart.
func FuzzParseRequest(f *testing.F) {
	f.Add("k1", "application/json", `{"order_id":"A-1","amount_satang":129900}`)
	f.Add(`"q\"uoted"`, "application/json", `{"amount_satang":1,"order_id":"x"}`)
	f.Add("", "application/x-www-form-urlencoded", "order_id=A&amount_satang=1&order_id=B")
	f.Add("a, b", "text/plain", "\x00\xff{")
	f.Add("k", "application/json", `{"order_id":1e999}`)
	f.Add("k", "application/json", `{"a":1} {"b":2}`)
	f.Fuzz(func(t *testing.T, key, contentType, body string) {
		h := http.Header{"Content-Type": {contentType}}
		if key != "" {
			h.Set("Idempotency-Key", key)
		}
		r := parseRequest("POST", "/v1/payments", h, []byte(body))
		if len(r.Body) != 24 {
			t.Fatalf("digest %q", r.Body)
		}
		if r.HasKey != (key != "") {
			t.Fatalf("HasKey %v for %q", r.HasKey, key)
		}
	})
}

// FuzzGrouping: any sequence of keys, bodies and waits is grouped and
// graded without a panic, every attempt lands in exactly one action, and
// no action is judged on a rule it broke without a violation saying so.
func FuzzGrouping(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 0, 2, 2, 2, 3, 0, 0, 0})
	f.Add([]byte{5, 1, 200, 5, 2, 3, 7, 7, 7})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 300 {
			script = script[:300]
		}
		p, clock := testProxy(t, Refuse, Halfway, Lost, Conflict, Down, Unprocessable, None)
		sent := 0
		for i := 0; i+2 < len(script); i += 3 {
			key := ""
			if script[i]%5 != 0 {
				key = "k" + string(rune('a'+script[i]%7))
			}
			body := `{"order_id":"` + string(rune('A'+script[i+1]%4)) + `","amount_satang":1}`
			post(t, p, key, body)
			sent++
			clock.Advance(time.Duration(script[i+2]) * 10 * time.Millisecond)
		}
		rep := p.Grade(context.Background(), nil)
		attempts := 0
		for _, c := range rep.Clients {
			for _, a := range c.Actions {
				attempts += len(a.Attempts)
			}
			for _, g := range c.Grades {
				if (g.Verdict == Broken) != (g.Broken > 0) {
					t.Fatalf("rule %d: verdict %s with %d breaks", g.Rule, g.Verdict, g.Broken)
				}
			}
		}
		if attempts != sent {
			t.Fatalf("%d attempts recorded, %d sent", attempts, sent)
		}
	})
}

func TestForce(t *testing.T) {
	p, _ := testProxy(t, None)
	if err := p.Force("explode"); err == nil {
		t.Fatal("an unknown fault was taken")
	}
	if err := p.Force(Unprocessable); err != nil {
		t.Fatal(err)
	}
	if code := post(t, p, "k1", `{"order_id":"A","amount_satang":1}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("forced 422: got %d", code)
	}
	p.Force("")
	if code := post(t, p, "k2", `{"order_id":"B","amount_satang":1}`); code != http.StatusCreated {
		t.Fatalf("back to the plan: got %d", code)
	}
}

// A hostile API behind the proxy: headers past MaxResponseHeader, a body
// past MaxResponseBody, an answer that never comes. Each is cut at its
// bound and answered 502 naming the bound, with nothing of it forwarded;
// an answer within the bounds passes.
func TestProxyBoundsTheAPIsAnswer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/headers":
			for i := range 100 {
				w.Header().Set("X-Filler-"+strings.Repeat("h", 4)+string(rune('a'+i%26))+strings.Repeat("x", i), strings.Repeat("v", 1024))
			}
		case "/body":
			w.Write(make([]byte, MaxResponseBody+1))
			return
		case "/silence":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer api.Close()
	target, _ := url.Parse(api.URL)
	// The size bounds are met long before a minute passes, however busy
	// the machine; only the silent API is given a short time.
	patient, err := New(Config{Target: target, ForwardTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hurried, err := New(Config{Target: target, ForwardTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
		p          *Proxy
	}{
		{"/headers", "headers are larger than the proxy reads (64 KiB)", patient},
		{"/body", "body is larger than the proxy reads (4 MiB)", patient},
		{"/silence", "did not answer within 300ms", hurried},
		{"/fine", "", patient},
	} {
		p := tc.p
		t.Run(tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, tc.path, nil))
			body := rec.Body.String()
			if tc.want == "" {
				if rec.Code != http.StatusOK || body != `{"ok":true}` {
					t.Fatalf("%d %s", rec.Code, body)
				}
				return
			}
			if rec.Code != http.StatusBadGateway || !strings.Contains(body, tc.want) || rec.Header().Get("X-Filler-hhhha") != "" || len(body) > 4096 {
				t.Fatalf("%d %.300s; want 502 saying %q", rec.Code, body, tc.want)
			}
		})
	}
}
