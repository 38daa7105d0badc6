package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// payServer is a scripted /v1/payments endpoint on 127.0.0.1. Each request
// takes the next step of the script (the last step repeats) and is recorded.
type payServer struct {
	*httptest.Server
	mu      sync.Mutex
	script  []func(w http.ResponseWriter, r *http.Request)
	calls   int
	keys    []string
	auth    []string
	bodies  []PaymentRequest
	ctypes  []string
	badPath bool
}

func newPayServer(t *testing.T, script ...func(w http.ResponseWriter, r *http.Request)) *payServer {
	t.Helper()
	s := &payServer{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if r.Method != http.MethodPost || r.URL.Path != PaymentsPath {
			s.badPath = true
		}
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.ctypes = append(s.ctypes, r.Header.Get("Content-Type"))
		var body PaymentRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		s.bodies = append(s.bodies, body)
		step := s.script[min(s.calls, len(s.script)-1)]
		s.calls++
		s.mu.Unlock()
		step(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// payLog is a copy of what the server has seen so far, taken under its lock
// (the race detector cannot see the ordering that the network provides).
type payLog struct {
	calls   int
	keys    []string
	auth    []string
	bodies  []PaymentRequest
	ctypes  []string
	badPath bool
}

func (s *payServer) log() payLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return payLog{s.calls, append([]string(nil), s.keys...), append([]string(nil), s.auth...),
		append([]PaymentRequest(nil), s.bodies...), append([]string(nil), s.ctypes...), s.badPath}
}

// restart makes the script start over at step i.
func (s *payServer) restart(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = i
}

func status(code int, headers ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"status":`+strconv.Itoa(code)+`}`)
	}
}

// hangUp closes the connection without any response: a network failure as
// the client sees it (the "response lost" case).
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// recorder is a fake sleep that records the waits and never sleeps.
type recorder struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sleeps = append(r.sleeps, d)
	return ctx.Err()
}

func testClient(srv *payServer, rec *recorder) *RetryClient {
	return &RetryClient{
		BaseURL: srv.URL,
		Rand:    rand.New(rand.NewPCG(1, 2)),
		Sleep:   rec.sleep,
	}
}

var order = PaymentRequest{OrderID: "A-1001", AmountSatang: 129900}

func TestRetryClientRetriesUntilSuccessWithOneKey(t *testing.T) {
	srv := newPayServer(t, status(503), status(503), status(201, "Idempotent-Replayed", "true"))
	rec := &recorder{}
	c := testClient(srv, rec)
	c.Token = "class-3"
	res, err := c.Pay(context.Background(), order)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("it makes exactly three attempts", func(t *testing.T) {
		if srv.log().calls != 3 || len(res.Attempts) != 3 {
			t.Fatalf("server saw %d calls, client recorded %d attempts", srv.log().calls, len(res.Attempts))
		}
	})
	t.Run("every attempt carries the same key, quoted as a structured field string", func(t *testing.T) {
		want := `"` + res.Key + `"`
		for i, k := range srv.log().keys {
			if k != want {
				t.Errorf("attempt %d sent key %s, want %s", i+1, k, want)
			}
		}
		for _, a := range res.Attempts {
			if a.Key != res.Key {
				t.Errorf("attempt %d recorded key %s", a.Number, a.Key)
			}
		}
	})
	t.Run("the key is a version 4 uuid", func(t *testing.T) {
		u, err := uuid.Parse(res.Key)
		if err != nil || u.Version() != 4 {
			t.Errorf("key %q: %v, version %v", res.Key, err, u.Version())
		}
	})
	t.Run("the body, content type and bearer token go out on every attempt", func(t *testing.T) {
		log := srv.log()
		for i := range log.calls {
			if log.bodies[i] != order || log.ctypes[i] != "application/json" || log.auth[i] != "Bearer class-3" {
				t.Errorf("attempt %d: body %+v, content type %q, auth %q", i+1, log.bodies[i], log.ctypes[i], log.auth[i])
			}
		}
		if log.badPath {
			t.Error("a request was not POST " + PaymentsPath)
		}
	})
	t.Run("the attempts record statuses, waits and the replay header", func(t *testing.T) {
		wantStatus := []int{503, 503, 201}
		for i, a := range res.Attempts {
			if a.Number != i+1 || a.Status != wantStatus[i] || a.Error != "" {
				t.Errorf("attempt %+v", a)
			}
		}
		if !res.Attempts[2].Replayed || res.Attempts[0].Replayed || !res.Replayed {
			t.Error("Idempotent-Replayed not reported on the right attempt")
		}
		if res.Attempts[2].Wait != 0 {
			t.Errorf("the last attempt has a wait %v", res.Attempts[2].Wait)
		}
		if len(rec.sleeps) != 2 || rec.sleeps[0] != res.Attempts[0].Wait || rec.sleeps[1] != res.Attempts[1].Wait {
			t.Errorf("slept %v, attempts say %v and %v", rec.sleeps, res.Attempts[0].Wait, res.Attempts[1].Wait)
		}
	})
	t.Run("the waits use full jitter below each ceiling", func(t *testing.T) {
		p := DefaultPolicy()
		for i, d := range rec.sleeps {
			if d < 0 || d > p.Ceiling(i) {
				t.Errorf("wait %d = %v, ceiling %v", i+1, d, p.Ceiling(i))
			}
		}
	})
	t.Run("the final status and body are returned", func(t *testing.T) {
		if res.Status != 201 || res.Body != `{"status":201}` || res.GaveUp {
			t.Errorf("status %d, body %s, gave up %v", res.Status, res.Body, res.GaveUp)
		}
	})
}

func TestRetryClientNeverRetriesClientErrors(t *testing.T) {
	for _, code := range []int{400, 401, 402, 404, 422} {
		t.Run("a "+strconv.Itoa(code)+" is final after one attempt", func(t *testing.T) {
			srv := newPayServer(t, status(code), status(201))
			rec := &recorder{}
			res, err := testClient(srv, rec).Pay(context.Background(), order)
			if err != nil {
				t.Fatal(err)
			}
			if srv.log().calls != 1 || len(res.Attempts) != 1 || len(rec.sleeps) != 0 {
				t.Errorf("%d calls, %d attempts, %d sleeps", srv.log().calls, len(res.Attempts), len(rec.sleeps))
			}
			if res.Status != code || res.GaveUp {
				t.Errorf("status %d, gave up %v", res.Status, res.GaveUp)
			}
		})
	}
	t.Run("409, 429 and every 5xx are retried", func(t *testing.T) {
		for _, code := range []int{409, 429, 500, 502, 503, 504, 599} {
			if !Retryable(code) {
				t.Errorf("%d not retryable", code)
			}
		}
		for _, code := range []int{200, 201, 302, 400, 408, 410, 422, 600} {
			if Retryable(code) {
				t.Errorf("%d retryable", code)
			}
		}
	})
}

func TestRetryClientRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		retryAfter string
		want       time.Duration
	}{
		{"a delta in seconds raises the wait to at least that", "3", 3 * time.Second},
		{"an HTTP date raises the wait to the time until then", now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
		{"a hint beyond the cap is held to the cap", "3600", 8 * time.Second},
		{"a zero hint leaves the jittered wait alone", "0", -1},
		{"a malformed hint is ignored", "soon", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newPayServer(t, status(429, "Retry-After", tt.retryAfter), status(201))
			rec := &recorder{}
			c := testClient(srv, rec)
			c.Now = func() time.Time { return now }
			res, err := c.Pay(context.Background(), order)
			if err != nil || res.Status != 201 || len(rec.sleeps) != 1 {
				t.Fatalf("status %d, err %v, sleeps %v", res.Status, err, rec.sleeps)
			}
			got := rec.sleeps[0]
			if got != res.Attempts[0].Wait {
				t.Errorf("slept %v but recorded %v", got, res.Attempts[0].Wait)
			}
			if tt.want < 0 {
				if got > DefaultPolicy().Ceiling(0) {
					t.Errorf("wait %v above the first ceiling", got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("wait %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"delta seconds", "120", 2 * time.Minute, true},
		{"delta seconds with spaces", " 7 ", 7 * time.Second, true},
		{"a date in the future", now.Add(time.Minute).Format(http.TimeFormat), time.Minute, true},
		{"a date in the past is zero", now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"a huge number saturates", "99999999999999999999999", maxDuration, true},
		{"empty is absent", "", 0, false},
		{"negative is malformed", "-5", 0, false},
		{"a fraction is malformed", "1.5", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.in, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %v, %v", got, ok)
			}
		})
	}
}

func TestRetryClientStopsWhenTheContextEnds(t *testing.T) {
	t.Run("cancelling during a wait stops further attempts", func(t *testing.T) {
		srv := newPayServer(t, status(503))
		ctx, cancel := context.WithCancel(context.Background())
		c := testClient(srv, &recorder{})
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			cancel() // the user closes the page while we wait
			<-ctx.Done()
			return ctx.Err()
		}
		res, err := c.Pay(ctx, order)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if srv.log().calls != 1 || len(res.Attempts) != 1 {
			t.Errorf("%d calls, %d attempts", srv.log().calls, len(res.Attempts))
		}
	})
	t.Run("cancelling during an attempt returns the context error at once", func(t *testing.T) {
		started := make(chan struct{})
		srv := newPayServer(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		rec := &recorder{}
		res, err := testClient(srv, rec).Pay(ctx, order)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if len(res.Attempts) != 1 || len(rec.sleeps) != 0 || res.Attempts[0].Status != 0 {
			t.Errorf("attempts %+v, sleeps %v", res.Attempts, rec.sleeps)
		}
	})
	t.Run("an already cancelled context sends nothing", func(t *testing.T) {
		srv := newPayServer(t, status(201))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := testClient(srv, &recorder{}).Pay(ctx, order)
		if !errors.Is(err, context.Canceled) || srv.log().calls != 0 {
			t.Errorf("err %v, %d calls", err, srv.log().calls)
		}
	})
}

func TestRetryClientKeys(t *testing.T) {
	srv := newPayServer(t, status(503), status(201))
	rec := &recorder{}
	c := testClient(srv, rec)
	c.UnquotedKey = true
	first, err1 := c.Pay(context.Background(), order)
	srv.restart(0) // replay the script for the second action
	second, err2 := c.Pay(context.Background(), order)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	t.Run("the key survives across the attempts of one action", func(t *testing.T) {
		keys := srv.log().keys
		if len(keys) != 4 || keys[0] != keys[1] || keys[2] != keys[3] {
			t.Errorf("keys sent: %v", keys)
		}
	})
	t.Run("two actions get two different keys", func(t *testing.T) {
		if first.Key == second.Key || srv.log().keys[1] == srv.log().keys[2] {
			t.Errorf("both actions used %s", first.Key)
		}
	})
	t.Run("the unquoted form sends the bare key, as Stripe does", func(t *testing.T) {
		if srv.log().keys[0] != first.Key {
			t.Errorf("sent %q, key %q", srv.log().keys[0], first.Key)
		}
	})
	t.Run("resuming with a known key sends that key", func(t *testing.T) {
		srv.restart(1)
		res, err := c.PayWithKey(context.Background(), first.Key, order)
		keys := srv.log().keys
		if err != nil || res.Key != first.Key || keys[len(keys)-1] != first.Key {
			t.Errorf("err %v, key %s, sent %s", err, res.Key, keys[len(keys)-1])
		}
	})
	t.Run("quotes and backslashes in a key are escaped in the quoted form", func(t *testing.T) {
		q := &RetryClient{}
		if got := q.keyHeader(`a"b\c`); got != `"a\"b\\c"` {
			t.Errorf("got %s", got)
		}
	})
}

func TestRetryClientNetworkFailures(t *testing.T) {
	t.Run("a dropped connection is retried with the same key", func(t *testing.T) {
		srv := newPayServer(t, hangUp, status(201, "Idempotent-Replayed", "true"))
		rec := &recorder{}
		res, err := testClient(srv, rec).Pay(context.Background(), order)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Attempts) != 2 || res.Attempts[0].Status != 0 || res.Attempts[0].Error == "" {
			t.Fatalf("attempts %+v", res.Attempts)
		}
		keys := srv.log().keys
		if keys[0] != keys[1] || res.Status != 201 || !res.Replayed {
			t.Errorf("keys %v, status %d, replayed %v", keys, res.Status, res.Replayed)
		}
	})
	t.Run("an attempt that hangs past its time-out is retried", func(t *testing.T) {
		// The first attempt hangs until the client abandons it; the test,
		// not a wall clock, says when its time-out has passed.
		hanging := make(chan struct{})
		abandoned := make(chan struct{})
		srv := newPayServer(t, func(w http.ResponseWriter, r *http.Request) {
			close(hanging)
			<-r.Context().Done()
			close(abandoned)
		}, status(201))
		c := testClient(srv, &recorder{})
		c.AttemptTimeout = 7 * time.Second
		first := newExpiringContext(context.Background())
		var timeouts []time.Duration
		c.attemptContext = func(ctx context.Context, n int, d time.Duration) (context.Context, context.CancelFunc) {
			timeouts = append(timeouts, d)
			if n == 1 {
				return first, first.expire
			}
			return context.WithCancel(ctx) // no time-out: only the first attempt may time out
		}
		type payment struct {
			res PayResult
			err error
		}
		done := make(chan payment, 1)
		go func() {
			res, err := c.Pay(context.Background(), order)
			done <- payment{res, err}
		}()
		<-hanging
		first.expire()
		p := <-done
		<-abandoned
		res := p.res
		if p.err != nil || res.Status != 201 || len(res.Attempts) != 2 || srv.log().calls != 2 {
			t.Fatalf("err %v, status %d, attempts %+v", p.err, res.Status, res.Attempts)
		}
		if res.Attempts[0].Status != 0 || !strings.Contains(res.Attempts[0].Error, "deadline") {
			t.Errorf("first attempt %+v, want no status and a deadline error", res.Attempts[0])
		}
		if keys := srv.log().keys; keys[0] != keys[1] {
			t.Errorf("keys %v, want the same key twice", keys)
		}
		if len(timeouts) != 2 || timeouts[0] != c.AttemptTimeout || timeouts[1] != c.AttemptTimeout {
			t.Errorf("attempt time-outs %v, want AttemptTimeout on each", timeouts)
		}
	})
	t.Run("without an attempt time-out each attempt gets the default one", func(t *testing.T) {
		srv := newPayServer(t, status(201))
		c := testClient(srv, &recorder{})
		var timeouts []time.Duration
		c.attemptContext = func(ctx context.Context, n int, d time.Duration) (context.Context, context.CancelFunc) {
			timeouts = append(timeouts, d)
			return context.WithCancel(ctx)
		}
		if _, err := c.Pay(context.Background(), order); err != nil || len(timeouts) != 1 || timeouts[0] != DefaultAttemptTimeout {
			t.Errorf("err %v, time-outs %v", err, timeouts)
		}
	})
	t.Run("when no attempt gets a response the error says so", func(t *testing.T) {
		srv := newPayServer(t, hangUp)
		rec := &recorder{}
		c := testClient(srv, rec)
		c.Policy = Policy{Base: time.Second, Cap: time.Second, MaxRetries: 2, Strategy: FullJitter}
		res, err := c.Pay(context.Background(), order)
		if err == nil || !res.GaveUp || len(res.Attempts) != 3 || srv.log().calls != 3 {
			t.Errorf("err %v, gave up %v, %d attempts, %d calls", err, res.GaveUp, len(res.Attempts), srv.log().calls)
		}
	})
	t.Run("a server that keeps failing is given up on after the last retry", func(t *testing.T) {
		srv := newPayServer(t, status(500))
		rec := &recorder{}
		var seen []int
		c := testClient(srv, rec)
		c.OnAttempt = func(a Attempt) { seen = append(seen, a.Number) }
		res, err := c.Pay(context.Background(), order)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Attempts) != 6 || len(rec.sleeps) != 5 || !res.GaveUp || res.Status != 500 {
			t.Errorf("%d attempts, %d sleeps, gave up %v, status %d", len(res.Attempts), len(rec.sleeps), res.GaveUp, res.Status)
		}
		if len(seen) != 6 || seen[5] != 6 {
			t.Errorf("OnAttempt saw %v", seen)
		}
	})
}

func TestRetryClientRejectsBadSettings(t *testing.T) {
	tests := []struct {
		name  string
		c     *RetryClient
		field string
	}{
		{"a missing base URL", &RetryClient{}, "base_url"},
		{"an invalid policy", &RetryClient{BaseURL: "http://127.0.0.1:1", Policy: Policy{Base: 2, Cap: 1, Strategy: FullJitter}}, "cap"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is reported before anything is sent", func(t *testing.T) {
			res, err := tt.c.Pay(context.Background(), order)
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Field != tt.field || len(res.Attempts) != 0 {
				t.Errorf("got %v, %d attempts", err, len(res.Attempts))
			}
		})
	}
}

// expiringContext is an attempt context whose deadline passes when expire is
// called, so a test decides when an attempt times out. Like a context from
// context.WithTimeout, its Err is then context.DeadlineExceeded.
type expiringContext struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringContext(parent context.Context) *expiringContext {
	return &expiringContext{Context: parent, done: make(chan struct{})}
}

func (e *expiringContext) Done() <-chan struct{} { return e.done }

func (e *expiringContext) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (e *expiringContext) expire() { e.once.Do(func() { close(e.done) }) }

func TestRetryClientStopsAtAFinalAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
	}{
		{"a replayed 500", status(500, "Idempotent-Replayed", "true")},
		{"a saved 500 the server says a retry cannot change", status(500, "Stripe-Should-Retry", "false")},
		{"a 502 the server says a retry cannot change", status(502, "Stripe-Should-Retry", "False")},
	} {
		t.Run(tc.name+" is not sent again", func(t *testing.T) {
			srv := newPayServer(t, tc.answer)
			rec := &recorder{}
			res, err := testClient(srv, rec).Pay(context.Background(), order)
			if err != nil || len(res.Attempts) != 1 || len(rec.sleeps) != 0 || res.GaveUp || srv.log().calls != 1 {
				t.Errorf("err %v, %d attempts, %d sleeps, gave up %v, %d calls", err, len(res.Attempts), len(rec.sleeps), res.GaveUp, srv.log().calls)
			}
		})
	}
	t.Run("a 409 that invites a retry is sent again", func(t *testing.T) {
		srv := newPayServer(t, status(409, "Stripe-Should-Retry", "true"), status(201))
		res, err := testClient(srv, &recorder{}).Pay(context.Background(), order)
		if err != nil || len(res.Attempts) != 2 || res.Status != 201 {
			t.Errorf("err %v, %d attempts, status %d", err, len(res.Attempts), res.Status)
		}
	})
}

func TestRetryClientHonoursRetryAfterWithinItsBudget(t *testing.T) {
	// A clock that the waits move: the budget counts waits as they pass.
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	client := func(srv *payServer, budget time.Duration, sleeps *[]time.Duration) *RetryClient {
		c := testClient(srv, nil)
		c.Budget = budget
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			*sleeps = append(*sleeps, d)
			now = now.Add(d)
			return ctx.Err()
		}
		return c
	}
	t.Run("a 504's hint beyond the backoff cap is waited in full", func(t *testing.T) {
		srv := newPayServer(t, status(504, "Retry-After", "35"), status(409, "Retry-After", "20"), status(201))
		var sleeps []time.Duration
		res, err := client(srv, time.Minute, &sleeps).Pay(context.Background(), order)
		if err != nil || res.Status != 201 || len(sleeps) != 2 || sleeps[0] != 35*time.Second || sleeps[1] != 20*time.Second {
			t.Errorf("err %v, status %d, waits %v; want 35 s then 20 s", err, res.Status, sleeps)
		}
	})
	t.Run("a wait that would end past the budget is not made", func(t *testing.T) {
		srv := newPayServer(t, status(504, "Retry-After", "35"), status(409, "Retry-After", "30"), status(201))
		var sleeps []time.Duration
		res, err := client(srv, time.Minute, &sleeps).Pay(context.Background(), order)
		if err != nil || !res.GaveUp || res.Status != 409 || len(res.Attempts) != 2 || len(sleeps) != 1 {
			t.Errorf("err %v, gave up %v, status %d, %d attempts, waits %v", err, res.GaveUp, res.Status, len(res.Attempts), sleeps)
		}
		if last := res.Attempts[1]; last.RetryAfter != 30*time.Second || last.Wait != 0 {
			t.Errorf("last attempt %+v", last)
		}
	})
	t.Run("without a budget the hint is capped", func(t *testing.T) {
		srv := newPayServer(t, status(504, "Retry-After", "35"), status(201))
		rec := &recorder{}
		if _, err := testClient(srv, rec).Pay(context.Background(), order); err != nil || len(rec.sleeps) != 1 || rec.sleeps[0] != DefaultPolicy().Cap {
			t.Errorf("err %v, waits %v", err, rec.sleeps)
		}
	})
}
