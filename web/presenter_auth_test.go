package web

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/peers"
	"paytwice/sim"
	"paytwice/web/room"
)

// The cookie the presenter's link sets holds something derived from the
// token, never the token; the token itself is no cookie; the cookie is
// Secure when the page came over TLS.
func TestPresenterCookieIsNotTheToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	env := newTestEnv(t, Config{PresenterToken: token})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cookieFrom := func(client *http.Client, url string) *http.Cookie {
		t.Helper()
		res, err := client.Get(url + "/board?token=" + token)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		for _, c := range res.Cookies() {
			if c.Name == PresenterCookie {
				return c
			}
		}
		t.Fatalf("%d and no presenter cookie", res.StatusCode)
		return nil
	}
	c := cookieFrom(noRedirect, env.URL)
	if c.Value == "" || strings.Contains(c.Value, token) || c.Secure || !c.HttpOnly {
		t.Fatalf("cookie %+v: it must hold neither the token nor be Secure over plain HTTP", c)
	}
	// The cookie works; the raw token in its place does not.
	if r := env.get("/board", "Cookie", PresenterCookie+"="+c.Value); strings.Contains(string(r.Body), `<fieldset id="faults" disabled`) {
		t.Fatal("the derived cookie does not mark the presenter")
	}
	if r := env.get("/board", "Cookie", PresenterCookie+"="+token); !strings.Contains(string(r.Body), `<fieldset id="faults" disabled`) {
		t.Fatal("the raw token in the cookie still marks the presenter")
	}
	// Another run of the server, with the same token, derives the same
	// cookie: the presenter stays signed in across a restart. Another
	// token derives another one.
	if other := newTestEnv(t, Config{PresenterToken: token}); other.Server.admission.presenter.cookie != env.Server.admission.presenter.cookie {
		t.Fatal("a restarted server with the same token does not recognise the presenter's cookie")
	}
	if other := newTestEnv(t, Config{PresenterToken: token + "-new"}); other.Server.admission.presenter.cookie == env.Server.admission.presenter.cookie {
		t.Fatal("a new token still recognises the cookie of the old one")
	}
	// Servers given one key, as behind a load balancer, derive one cookie.
	key := []byte("one key for the servers of one front door")
	s1, s2 := newTestEnv(t, Config{PresenterToken: token, PresenterCookieKey: key}), newTestEnv(t, Config{PresenterToken: token, PresenterCookieKey: key})
	if s1.Server.admission.presenter.cookie != s2.Server.admission.presenter.cookie || s1.Server.admission.presenter.cookie == env.Server.admission.presenter.cookie {
		t.Fatal("servers sharing a cookie key must derive the same cookie, and another than the token alone derives")
	}

	// Over TLS the cookie is Secure.
	tlsSrv := httptest.NewTLSServer(env.Server.Handler())
	defer tlsSrv.Close()
	tlsClient := tlsSrv.Client()
	tlsClient.CheckRedirect = noRedirect.CheckRedirect
	tlsClient.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // the test server's own certificate
	if c := cookieFrom(tlsClient, tlsSrv.URL); !c.Secure {
		t.Fatalf("cookie over TLS %+v is not Secure", c)
	}
}

// Five wrong tokens from one address, then that address waits ten seconds
// per try, even with the right token; other addresses are not slowed.
func TestWrongPresenterTokensAreSlowedDown(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	env := newFIEnv(t, Config{PresenterToken: token})
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	env.Server.admission.presenter.tries.now = clock.Now

	patch := func(tok string) response {
		return env.must(http.MethodPatch, "/api/faults", `{"server":{"delay_ms":1}}`, PresenterHeader, tok)
	}
	for i := range guessBurst {
		if r := patch("guess-" + strconv.Itoa(i)); r.Status != http.StatusForbidden {
			t.Fatalf("wrong token %d: %d %s, want 403", i, r.Status, r.Body)
		}
	}
	r := patch(token)
	if r.Status != http.StatusTooManyRequests || problemSlug(t, r) != "too-many-wrong-tokens" || r.Header.Get("Retry-After") != "10" {
		t.Fatalf("after %d wrong tokens, the right one: %d Retry-After %q %s; want 429 and 10 s", guessBurst, r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	// The link on the board is limited by the same count.
	if r := env.get("/board?token=" + token); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the presenter link while slowed down: %d", r.Status)
	}
	clock.Advance(guessEvery / 2)
	if r := patch(token); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "5" {
		t.Fatalf("half-way: %d Retry-After %q", r.Status, r.Header.Get("Retry-After"))
	}
	clock.Advance(guessEvery / 2)
	if r := patch("guess-again"); r.Status != http.StatusForbidden {
		t.Fatalf("one try is back after 10 s: %d", r.Status)
	}
	if r := patch(token); r.Status != http.StatusTooManyRequests {
		t.Fatalf("and spent on a wrong token: %d", r.Status)
	}
	clock.Advance(guessEvery)
	if r := patch(token); r.Status != http.StatusOK {
		t.Fatalf("the right token after the wait: %d %s", r.Status, r.Body)
	}

	// The count is per address.
	l := newGuessLimiter(clock.Now)
	for range guessBurst {
		l.fail("192.0.2.1")
	}
	if l.wait("192.0.2.1") == 0 || l.wait("192.0.2.2") != 0 {
		t.Fatal("the limit is not per address")
	}
}

// Behind paytwice cluster's front door every connection comes from the
// door: the wrong-token limit counts by the client the door names in
// X-Forwarded-For, so one student's guesses do not slow the presenter
// down. A server on its own believes no such header.
func TestWrongTokensCountByTheClientBehindTheFrontDoor(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	const mark = "the-door's-mark"
	for _, tc := range []struct {
		name            string
		behindFrontDoor bool
		sentMark        string // what the request carries in FrontDoorHeader
		presenter       int    // the presenter's status after a student's guesses
	}{
		{"behind the front door, the presenter is not slowed down", true, mark, http.StatusOK},
		{"on its own, the header is not believed", false, mark, http.StatusTooManyRequests},
		{"behind the front door, a request without the door's mark (sent to the server's port directly) is not believed", true, "", http.StatusTooManyRequests},
		{"behind the front door, a request with a wrong mark is not believed", true, "guessed", http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch := func(env *fiEnv, tok, client string) response {
				return env.must(http.MethodPatch, "/api/faults", `{"server":{"delay_ms":1}}`, PresenterHeader, tok, "X-Forwarded-For", client,
					FrontDoorHeader, tc.sentMark)
			}
			env := newFIEnv(t, Config{PresenterToken: token, BehindFrontDoor: tc.behindFrontDoor, FrontDoorMark: mark})
			for i := range guessBurst {
				if r := patch(env, "guess-"+strconv.Itoa(i), "192.0.2.7"); r.Status != http.StatusForbidden {
					t.Fatalf("wrong token %d: %d", i, r.Status)
				}
			}
			if r := patch(env, token, "192.0.2.7"); r.Status != http.StatusTooManyRequests {
				t.Fatalf("the guessing client with the right token: %d, want 429", r.Status)
			}
			if r := patch(env, token, "198.51.100.1"); r.Status != tc.presenter {
				t.Fatalf("the presenter from another client: %d, want %d", r.Status, tc.presenter)
			}
		})
	}
}

// Servers that share a room share one wrong-token count: guesses sent to
// one server count on every other, so a class of three servers allows no
// more guesses than one server does. Run on room.SharedMemory() peers and
// on one PostgreSQL database.
func TestWrongTokensCountForTheWholeRoom(t *testing.T) {
	waitsOnRealClocks(t)
	t.Run("memory peers", func(t *testing.T) {
		clock := sim.NewClock(nil)
		db := MustOpenDB(t, clock.Now)
		wrongTokensAcrossServers(t, &class{t: t, Store: db, Peers: room.SharedMemory(), ledger: db, sqlite: db, clock: clock})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		wrongTokensAcrossServers(t, newPostgresClass(t))
	})
}

func wrongTokensAcrossServers(t *testing.T, c *class) {
	const token = "s3cret-lecture"
	const mark = "the-door's-mark"
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	cfg := func(name string) Config {
		return Config{Name: name, PresenterToken: token, BehindFrontDoor: true, FrontDoorMark: mark}
	}
	a, b := c.server(cfg("a"), nil), c.server(cfg("b"), nil)
	a.Server.admission.presenter.tries.now, b.Server.admission.presenter.tries.now = clock.Now, clock.Now
	patch := func(env *testEnv, tok, client string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPatch, env.URL+"/api/faults", strings.NewReader(`{"server":{"delay_ms":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(PresenterHeader, tok)
		req.Header.Set("X-Forwarded-For", client)
		req.Header.Set(FrontDoorHeader, mark)
		r, err := do(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const student, presenter = "192.0.2.7", "198.51.100.1"
	for i := range guessBurst { // a, b, a, b, a
		env := []*testEnv{a, b}[i%2]
		if r := patch(env, "guess-"+strconv.Itoa(i), student); r.Status != http.StatusForbidden {
			t.Fatalf("wrong token %d: %d %s, want 403", i, r.Status, r.Body)
		}
	}
	for name, env := range map[string]*testEnv{"a": a, "b": b} {
		r := patch(env, token, student)
		if r.Status != http.StatusTooManyRequests || problemSlug(t, r) != "too-many-wrong-tokens" || r.Header.Get("Retry-After") != "10" {
			t.Fatalf("after %d wrong tokens over two servers, the right one on %s: %d Retry-After %q %s; want 429 and 10 s",
				guessBurst, name, r.Status, r.Header.Get("Retry-After"), r.Body)
		}
	}
	if r := patch(b, token, presenter); r.Status != http.StatusOK {
		t.Fatalf("another client is slowed down too: %d %s", r.Status, r.Body)
	}
	// The try that comes back is one for the room: spent on b, it is
	// gone on a.
	clock.Advance(guessEvery)
	if r := patch(b, "guess-again", student); r.Status != http.StatusForbidden {
		t.Fatalf("one try is back after 10 s: %d %s", r.Status, r.Body)
	}
	if r := patch(a, token, student); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the try spent on b is still there on a: %d", r.Status)
	}
	clock.Advance(guessEvery)
	if r := patch(a, token, student); r.Status != http.StatusOK {
		t.Fatalf("the right token after the wait: %d %s", r.Status, r.Body)
	}
}

// Wrong tokens sent all at once, from one client, to three servers that
// share a room: the look at the count, the comparison and the counting
// are one step, so no more than the limit are ever compared (answered
// 403); every other guess waits (429) without being looked at, and the
// right token sent among them is not looked at either once the tries are
// spent. Run on room.SharedMemory() peers, on one PostgreSQL database,
// and on one server alone.
func TestConcurrentWrongTokensComparedAtMostTheLimit(t *testing.T) {
	waitsOnRealClocks(t)
	t.Run("three servers on memory peers", func(t *testing.T) {
		clock := sim.NewClock(nil)
		db := MustOpenDB(t, clock.Now)
		concurrentGuesses(t, &class{t: t, Store: db, Peers: room.SharedMemory(), ledger: db, sqlite: db, clock: clock}, 3)
	})
	t.Run("three servers on PostgreSQL", func(t *testing.T) {
		concurrentGuesses(t, newPostgresClass(t), 3)
	})
	t.Run("one server on its own", func(t *testing.T) {
		clock := sim.NewClock(nil)
		db := MustOpenDB(t, clock.Now)
		concurrentGuesses(t, &class{t: t, Store: db, Peers: room.Memory(), ledger: db, sqlite: db, clock: clock}, 1)
	})
}

func concurrentGuesses(t *testing.T, c *class, servers int) {
	const token = "s3cret-lecture"
	const mark = "the-door's-mark"
	const guesses = 60
	clock := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) // no try comes back meanwhile
	var envs []*testEnv
	for i := range servers {
		env := c.server(Config{Name: "s" + strconv.Itoa(i), PresenterToken: token, BehindFrontDoor: true, FrontDoorMark: mark}, nil)
		env.Server.admission.presenter.tries.now = clock.Now
		// The guesses queue on the client's one count: on a loaded
		// machine the last of 60 waits longer than a server's usual bound
		// for a look at it, and would be refused unlooked (503, as
		// TestAnUnreadableGuessCountTakesNoToken shows). Here every guess
		// is to be counted, so the bound is generous.
		env.Server.admission.presenter.guessTimeout = 2 * time.Minute
		envs = append(envs, env)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: guesses}, Timeout: 3 * time.Minute}
	defer client.CloseIdleConnections()
	statuses := make([]int, guesses)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range guesses {
		wg.Go(func() {
			tok := "guess-" + strconv.Itoa(i)
			if i == guesses-1 {
				tok = token // sent last, after the tries are spent or among them
			}
			req, err := http.NewRequest(http.MethodPatch, envs[i%servers].URL+"/api/faults", strings.NewReader(`{"server":{"delay_ms":1}}`))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(PresenterHeader, tok)
			req.Header.Set("X-Forwarded-For", "192.0.2.7")
			req.Header.Set(FrontDoorHeader, mark)
			<-start
			res, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			statuses[i] = res.StatusCode
		})
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses[:guesses-1] {
		count[s]++
	}
	t.Logf("%d wrong guesses over %d servers: %v", guesses-1, servers, count)
	// On PostgreSQL a guess waits a second at most for its address's row
	// (guessLockWait): on a loaded machine one may be refused unlooked
	// with a 503, which compares nothing. Every other guess is compared
	// (403) until the tries are spent, and refused unlooked (429) after.
	compared, refused, unread := count[http.StatusForbidden], count[http.StatusTooManyRequests], count[http.StatusServiceUnavailable]
	if compared+refused+unread != guesses-1 {
		t.Fatalf("answers %v: want only 403, 429 and 503", count)
	}
	// A 503 spends no try: the tries go to the guesses that were read.
	if want := min(guessBurst, guesses-1-unread); compared != want {
		t.Fatalf("%d wrong tokens compared (403), %d refused unlooked (429), %d unread (503); want exactly %d compared, the rest 429",
			compared, refused, unread, want)
	}
}

// failingGuesses is shared peers whose count of wrong tokens cannot be
// read, like a database that is away.
type failingGuesses struct {
	room.Peers
}

func (failingGuesses) UpdateGuesses(context.Context, string, time.Time, func(room.Guesses, bool) room.Guesses) error {
	return errors.New("the database is away")
}

// When the count of wrong tokens the servers share cannot be read, a
// token is not looked at, the right one included: the answer is a 503
// with Retry-After that says why, on the API and on the presenter's
// link. Counting on each server meanwhile would give a client the limit
// once per server.
func TestAnUnreadableGuessCountTakesNoToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	clock := sim.NewClock(nil)
	db := MustOpenDB(t, clock.Now)
	c := &class{t: t, Store: db, Peers: room.SharedMemory(), ledger: db, sqlite: db, clock: clock}
	env := c.server(Config{PresenterToken: token}, func(p room.Peers) room.Peers { return failingGuesses{p} })
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, tok := range []string{"guess-1", "guess-2", "guess-3", "guess-4", "guess-5", "guess-6", token} {
		req, err := http.NewRequest(http.MethodPatch, env.URL+"/api/faults", strings.NewReader(`{"server":{"delay_ms":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(PresenterHeader, tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
			res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "could not be read") {
			t.Fatalf("token %d: %d Retry-After %q %s %s, want a 503 problem with Retry-After saying the count could not be read",
				i, res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Content-Type"), body)
		}
	}
	if env.Server.faultSwitches().currentFaults().Server.DelayMS != 0 {
		t.Fatal("a token was taken while its count could not be read")
	}
	res, err := noRedirect.Get(env.URL + "/board?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || len(res.Cookies()) != 0 || !strings.Contains(string(body), "could not be read") {
		t.Fatalf("the presenter's link: %d, cookies %v, %s; want a 503 page saying the count could not be read, no cookie", res.StatusCode, res.Cookies(), body)
	}
}

// paytwice cluster's front door asks GET /api/presenter about a header
// token before it keeps a connection past its address's share: the
// presenter's token gets 204 and the word for the door; a made-up one
// gets 403 and is counted against the client the door names, as any
// wrong token is, until that client is slowed down; another client is
// not.
func TestThePresenterProbeCountsAMadeUpToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	const mark = "the-door's-mark"
	env := newFIEnv(t, Config{PresenterToken: token, BehindFrontDoor: true, FrontDoorMark: mark})
	probe := func(tok, client string) response {
		return env.must(http.MethodGet, peers.PresenterProbePath, "", PresenterHeader, tok, "X-Forwarded-For", client, FrontDoorHeader, mark)
	}
	if r := probe(token, "198.51.100.1"); r.Status != http.StatusNoContent || r.Header.Get(peers.PresenterSeenHeader) == "" {
		t.Fatalf("the presenter's token: %d, seen %q", r.Status, r.Header.Get(peers.PresenterSeenHeader))
	}
	for i := range guessBurst {
		if r := probe("made-up-"+strconv.Itoa(i), "192.0.2.7"); r.Status != http.StatusForbidden || r.Header.Get(peers.PresenterSeenHeader) != "" {
			t.Fatalf("made-up token %d: %d, seen %q", i, r.Status, r.Header.Get(peers.PresenterSeenHeader))
		}
	}
	if r := probe(token, "192.0.2.7"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the guessing client with the right token: %d, want 429", r.Status)
	}
	if r := probe(token, "198.51.100.1"); r.Status != http.StatusNoContent {
		t.Fatalf("the presenter from another client: %d, want 204", r.Status)
	}
}
