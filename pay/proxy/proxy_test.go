package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	api := newStubAPI(t)
	u, _ := url.Parse(api.server.URL)
	clock := &manualClock{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	if len(schedule) == 0 {
		schedule = []Fault{None}
	}
	p, err := New(Config{Target: u, Schedule: schedule, Now: clock.Now, Budget: time.Minute, MaxAttempts: 5})
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
	t.Run("six waits all alike are a herd: rule 7", func(t *testing.T) {
		p, clock := testProxy(t, Halfway)
		for i := range 6 {
			body := `{"order_id":"O` + string(rune('a'+i)) + `","amount_satang":1}`
			post(t, p, "k"+string(rune('a'+i)), body)
			clock.Advance(200 * time.Millisecond)
			post(t, p, "k"+string(rune('a'+i)), body)
		}
		if g := grades(t, p); g[RuleJitter].Verdict != Broken || g[RuleAfter500].Verdict != Passed {
			t.Fatalf("%+v", g)
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
