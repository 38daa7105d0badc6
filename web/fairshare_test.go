package web

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/sim"
)

// fromAddress is an HTTP client whose connections leave from ip, another
// loopback address: a student's laptop on the classroom's network. Its
// answers' headers must come within 20 s; a body, such as a live view's,
// may last.
func fromAddress(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 20 * time.Second}}
}

// getFrom sends a GET from client and reads the whole answer.
func getFrom(t testing.TB, client *http.Client, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: body}
}

func TestBucketTableForgetsTheIdleAndNeverLocksOutANewAddress(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	tab := newBucketTable(clock.Now, Rate{Burst: 2, Every: time.Second}, 3, time.Minute)
	for i := range 3 {
		ip := fmt.Sprintf("10.0.0.%d", i)
		tab.take(ip)
		tab.take(ip)
		if w := tab.take(ip); w != time.Second {
			t.Fatalf("%s's third try waits %v, want 1s", ip, w)
		}
		clock.Advance(time.Millisecond)
	}
	t.Run("a new address finds room while every held address has used its tries", func(t *testing.T) {
		if w := tab.take("10.0.0.9"); w != 0 {
			t.Fatalf("a new address waits %v", w)
		}
		if n := tab.size(); n != 3 {
			t.Fatalf("the table holds %d addresses, want its bound 3", n)
		}
		if w := tab.take("10.0.0.1"); w == 0 {
			t.Fatal("an address still held lost its count to the new one; the one idle longest should have gone")
		}
	})
	t.Run("idle addresses expire", func(t *testing.T) {
		clock.Advance(2 * time.Minute)
		tab.take("10.0.0.8")
		if n := tab.size(); n != 1 {
			t.Fatalf("after two idle minutes the table holds %d addresses, want only the new one", n)
		}
	})
}

func TestWrongTokenTableFullOfGuessersStillLetsANewAddressTry(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	l := newGuessLimiter(clock.Now)
	for i := range guessMaxClients {
		ip := fmt.Sprintf("10.%d.%d.1", i/256, i%256)
		for range guessBurst {
			l.fail(ip)
		}
	}
	if w := l.wait("192.168.1.10"); w != 0 {
		t.Fatalf("with %d guessers held, a new address (the presenter's first try) waits %v", guessMaxClients, w)
	}
	l.fail("192.168.1.10")
	if n := len(l.clients); n > guessMaxClients {
		t.Fatalf("the table grew to %d addresses past its bound %d", n, guessMaxClients)
	}
	if w := l.wait("10.0.1.1"); w == 0 {
		t.Fatal("a guesser that used its tries may try again because the table was full")
	}
}

func TestRequestsBeyondAnAddressShareGet429WithASentence(t *testing.T) {
	t.Parallel()
	const token = "front-of-class"
	sims := Rate{Burst: 5, Every: time.Minute}
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{Simulations: sims, Deliveries: Rate{Burst: 3, Every: time.Minute}}})
	student, other := fromAddress("127.0.0.2"), fromAddress("127.0.0.3")
	const backoff = "/api/backoff?base=500ms&cap=8s&retries=5"
	for i := range sims.Burst {
		if r := getFrom(t, student, env.URL+backoff); r.Status != http.StatusOK {
			t.Fatalf("run %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	t.Run("the API answers problem+json with Retry-After", func(t *testing.T) {
		r := getFrom(t, student, env.URL+backoff)
		if r.Status != http.StatusTooManyRequests || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("over the share: %d %s %s", r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Fatalf("Retry-After %q", ra)
		}
		if !strings.Contains(string(r.Body), "127.0.0.2") || !strings.Contains(string(r.Body), "simulation runs") {
			t.Fatalf("the sentence does not say whose share of what: %s", r.Body)
		}
	})
	t.Run("a page gets a readable page", func(t *testing.T) {
		r := getFrom(t, student, env.URL+"/herd", "Accept", "text/html")
		if r.Status != http.StatusTooManyRequests || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(r.Body), "share") {
			t.Fatalf("the herd page over the share: %d %s", r.Status, r.Header.Get("Content-Type"))
		}
	})
	t.Run("another address and the presenter are answered as usual", func(t *testing.T) {
		if r := getFrom(t, other, env.URL+backoff); r.Status != http.StatusOK {
			t.Fatalf("another student: %d", r.Status)
		}
		for range sims.Burst + 2 {
			if r := env.get(backoff, PresenterHeader, token); r.Status != http.StatusOK {
				t.Fatalf("the presenter: %d %s", r.Status, r.Body)
			}
		}
	})
	t.Run("payments are not counted among the simulations", func(t *testing.T) {
		for i := range 8 {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, env.URL+paymentsPath,
				strings.NewReader(fmt.Sprintf(`{"order_id":"S-%d","amount_satang":100}`, i)))
			req.Header.Set("Idempotency-Key", fmt.Sprintf("share-%d", i))
			req.Header.Set("Content-Type", "application/json")
			res, err := student.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("payment %d: %d", i, res.StatusCode)
			}
		}
	})
}

// Behind one shared address, a browser session or a bearer token is
// counted by itself too, at its part of the address's share: one caller
// in a loop leaves the rest of the address's share to the others, and a
// caller without a credential is counted by the address alone.
func TestOneCallerCannotUseUpItsAddressShare(t *testing.T) {
	t.Parallel()
	const token = "front-of-class"
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{Simulations: Rate{Burst: 8, Every: time.Hour}, CallerShare: 50}})
	nat := fromAddress("127.0.0.2")
	const backoff = "/api/backoff?base=500ms&cap=8s&retries=5"
	session := func(id string) []string { return []string{"Cookie", sessionCookie + "=" + id} }
	alice, bob := session(uuid.NewString()), session(uuid.NewString())
	statuses := func(n int, header ...string) []int {
		var got []int
		for range n {
			got = append(got, getFrom(t, nat, env.URL+backoff, header...).Status)
		}
		return got
	}
	t.Run("a session in a loop gets its part of the share, then 429 naming the session", func(t *testing.T) {
		got := statuses(5, alice...)
		if !slices.Equal(got, []int{200, 200, 200, 200, 429}) {
			t.Fatalf("alice's five runs: %v, want her four (half the address's eight), then 429", got)
		}
		r := getFrom(t, nat, env.URL+backoff, alice...)
		if !strings.Contains(string(r.Body), "browser session or token") || r.Header.Get("Retry-After") == "" {
			t.Fatalf("the refusal does not say whose share: %d %s", r.Status, r.Body)
		}
	})
	t.Run("the others behind the address still get theirs", func(t *testing.T) {
		if got := statuses(2, bob...); got[0] != http.StatusOK || got[1] != http.StatusOK {
			t.Fatalf("bob's two runs: %v", got)
		}
		if got := statuses(2, "Authorization", "Bearer carol"); got[0] != http.StatusOK || got[1] != http.StatusOK {
			t.Fatalf("carol's two runs: %v", got)
		}
	})
	t.Run("the address's share bounds them all", func(t *testing.T) {
		r := getFrom(t, nat, env.URL+backoff, "Authorization", "Bearer dave")
		if r.Status != http.StatusTooManyRequests || !strings.Contains(string(r.Body), "127.0.0.2") {
			t.Fatalf("dave after the address's eight: %d %s", r.Status, r.Body)
		}
	})
}

func TestParseLimits(t *testing.T) {
	t.Parallel()
	l, err := ParseLimits("streams-per-address=300, simulations=60/1s,idle-after=5m")
	if err != nil {
		t.Fatal(err)
	}
	if l.StreamsPerAddress != 300 || l.Simulations != (Rate{60, time.Second}) || l.IdleAfter != 5*time.Minute || l.Requests != DefaultLimits.Requests {
		t.Fatalf("parsed %+v", l)
	}
	for _, bad := range []string{"streams", "streams=0", "nope=1", "simulations=60", "simulations=x/1s", "idle-after=soon"} {
		if _, err := ParseLimits(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if u := LimitsUsage(); !strings.Contains(u, "streams-per-address=200") || !strings.Contains(u, "simulations=120/500ms") {
		t.Errorf("the usage does not list the defaults: %s", u)
	}
}

// TestThePresenterTakesNothingFromItsAddressShare: behind one address (a
// classroom's NAT) the presenter's requests, which are never held back,
// do not use up the share the students on that address have.
func TestThePresenterTakesNothingFromItsAddressShare(t *testing.T) {
	t.Parallel()
	const token = "front-of-class"
	sims := Rate{Burst: 5, Every: time.Minute}
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{Simulations: sims}})
	room := fromAddress("127.0.0.4") // the presenter and a student share it
	const backoff = "/api/backoff?base=500ms&cap=8s&retries=5"
	for i := range sims.Burst + 2 {
		if r := getFrom(t, room, env.URL+backoff, PresenterHeader, token); r.Status != http.StatusOK {
			t.Fatalf("the presenter's run %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	for i := range sims.Burst {
		if r := getFrom(t, room, env.URL+backoff); r.Status != http.StatusOK {
			t.Fatalf("the student's run %d after the presenter's: %d %s, want the address's whole share", i+1, r.Status, r.Body)
		}
	}
	if r := getFrom(t, room, env.URL+backoff); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the student beyond the share: %d, want 429", r.Status)
	}
}

// An address past its share is answered 429 (refuseEarly, before its
// request is routed) whatever it asks for: a student looping on a page
// that does not exist gets the same 429, with Retry-After, a sentence and
// the security headers, as on one that does, while another address, and
// the presenter from the same address, are answered as usual.
func TestAnAddressPastItsShareIsRefusedWhateverItAsks(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{Requests: Rate{Burst: 2, Every: time.Hour}}})
	student := fromAddress("127.0.0.2")
	for i := range 2 {
		if r := getFrom(t, student, env.URL+"/api/lessons"); r.Status != http.StatusOK {
			t.Fatalf("request %d within the share: %d %s", i+1, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/api/lessons", "/no-such-page"} {
		r := getFrom(t, student, env.URL+path)
		if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "share") {
			t.Errorf("%s past the share: %d Retry-After %q %s", path, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: the refusal lacks the security headers: %v", path, r.Header)
		}
	}
	if r := getFrom(t, fromAddress("127.0.0.3"), env.URL+"/no-such-page"); r.Status != http.StatusNotFound {
		t.Errorf("another address on a page that does not exist: %d, want 404", r.Status)
	}
	if r := getFrom(t, student, env.URL+"/api/lessons", PresenterHeader, token); r.Status != http.StatusOK {
		t.Errorf("the presenter behind the student's address: %d %s", r.Status, r.Body)
	}
}

// A caller (a bearer token or a browser session) past its own share is
// refused before its request is routed, as an address past its share is,
// while another caller of the same address is let through.
func TestACallerPastItsShareIsRefusedBeforeRouting(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{PresenterToken: "front-of-the-room", Limits: Limits{Requests: Rate{Burst: 8, Every: time.Hour}, CallerShare: 25}})
	student := fromAddress("127.0.0.2")
	for i := range 2 { // a quarter of the address's 8
		if r := getFrom(t, student, env.URL+"/api/lessons", "Authorization", "Bearer looper"); r.Status != http.StatusOK {
			t.Fatalf("request %d within the caller's share: %d %s", i+1, r.Status, r.Body)
		}
	}
	reached := 0
	early := env.Server.admission.refuseEarly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	ask := func(auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/api/lessons", nil)
		req.RemoteAddr = "127.0.0.2:40000"
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		early.ServeHTTP(rec, req)
		return rec
	}
	rec := ask("Bearer looper")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "session or token") || reached != 0 {
		t.Fatalf("the caller past its share: %d %q, reached the router %d times", rec.Code, rec.Body, reached)
	}
	if rec := ask("Bearer classmate"); rec.Code != http.StatusOK || reached != 1 {
		t.Fatalf("another caller of the address: %d %q, reached the router %d times", rec.Code, rec.Body, reached)
	}
}

// The presenter's link (GET /board?token=) gets in from an address whose
// students have used up its share of requests and its live views: it is
// how the presenter's browser gets its cookie, and the presenter is never
// behind students. A wrong link is still looked at as a guess, not let in.
func TestThePresenterLinkGetsInFromAnAddressPastItsShares(t *testing.T) {
	t.Parallel()
	const token = "front-of-class"
	requests := Rate{Burst: 3, Every: time.Hour}
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{Requests: requests, StreamsPerAddress: 2}})
	room := fromAddress("127.0.0.4") // the presenter and the students share it
	for range 2 {
		h, status := openHeld(context.Background(), room, env.URL)
		if h == nil {
			t.Fatalf("a student's live view: %d", status)
		}
		t.Cleanup(h.close)
	}
	if _, status := openHeld(context.Background(), room, env.URL); status != http.StatusTooManyRequests {
		t.Fatalf("a student's live view past the address's share: %d, want 429", status)
	}
	for range requests.Burst {
		getFrom(t, room, env.URL+"/board")
	}
	if r := getFrom(t, room, env.URL+"/board"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a student's page past the address's share: %d, want 429", r.Status)
	}

	noRedirect := &http.Client{Transport: room.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	link := func(tok string) *http.Response {
		t.Helper()
		res, err := noRedirect.Get(env.URL + "/board?token=" + tok)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := link("a-guess"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong link from the address past its share: %d, want 403 (looked at as a guess)", res.StatusCode)
	}
	res := link(token)
	var cookie string
	for _, c := range res.Cookies() {
		if c.Name == PresenterCookie {
			cookie = c.Name + "=" + c.Value
		}
	}
	if res.StatusCode != http.StatusSeeOther || cookie == "" {
		t.Fatalf("the presenter's link from the address past its shares: %d, cookie %q; want 303 with the presenter's cookie", res.StatusCode, cookie)
	}
	if r := getFrom(t, room, env.URL+"/board", "Cookie", cookie); r.Status != http.StatusOK {
		t.Fatalf("the presenter's board: %d", r.Status)
	}
	h, status := openHeld(context.Background(), room, env.URL, "Cookie", cookie)
	if h == nil {
		t.Fatalf("the presenter's live view from the address whose views are all taken: %d", status)
	}
	h.close()
}
