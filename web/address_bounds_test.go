package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"paytwice/pay/addrlimit"
	"paytwice/pay/peers"
	"paytwice/sim"
)

// boundedEnv is a test server whose listener holds each address to its
// connections, as main serves it.
func boundedEnv(t *testing.T, cfg Config) (*testEnv, *addrlimit.Listener) {
	t.Helper()
	mc := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	clock := sim.NewClock(mc.Now)
	db := MustOpenDB(t, clock.Now)
	cfg.Logger = log.New(io.Discard, "", 0)
	cfg.Ledger = db
	srv := NewServer(cfg, db, clock)
	hs := httptest.NewUnstartedServer(srv.Handler())
	ln := srv.Listener(hs.Listener)
	hs.Listener = ln
	hs.Start()
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return &testEnv{tb: t, t: t, URL: hs.URL, DB: db, Server: srv, Clock: mc, HTTP: hs}, ln
}

// rawFrom opens a TCP connection to env from ip, as a student's script
// would, with nothing sent yet.
func rawFrom(t *testing.T, ip, url string) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond, which the server changes on its own time (a
// connection it accepts or closes), for at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after 30 s: %s", what)
}

// rawAnswer reads one HTTP answer from c.
func rawAnswer(c net.Conn) (*http.Response, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b), nil
}

// One address that opens many connections gets its bound's worth and
// the rest are refused (on trial, at their first request: a presenter
// token is set) with 503 and Retry-After, while another
// address and the presenter pay and stream as usual; once it closes them
// its count is back at zero.
func TestAnAddressHoldsAtMostItsConnections(t *testing.T) {
	t.Parallel()
	const token, bound, tries = "front-of-class", 8, 20
	env, ln := boundedEnv(t, Config{PresenterToken: token, Limits: Limits{ConnectionsPerAddress: bound, PresenterReserve: 4}})
	conns := make([]net.Conn, tries)
	for i := range conns {
		conns[i] = rawFrom(t, "127.0.0.2", env.URL)
	}
	let, refused := 0, 0
	for i, c := range conns {
		if _, err := io.WriteString(c, "GET /api/faults HTTP/1.1\r\nHost: room\r\n\r\n"); err != nil {
			refused++ // closed by the server already
			continue
		}
		res, body, err := rawAnswer(c)
		switch {
		case err != nil:
			refused++ // closed before the answer could be read
		case res.StatusCode == http.StatusOK:
			let++
		case res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "" && strings.Contains(body, "connections"):
			refused++
		default:
			t.Fatalf("connection %d: %d %q", i, res.StatusCode, body)
		}
	}
	if let != bound || refused != tries-bound {
		t.Fatalf("of %d connections from one address, %d were served and %d refused; want %d served", tries, let, refused, bound)
	}
	if n := ln.Open("127.0.0.2"); n != bound {
		t.Fatalf("the listener counts %d open for the address, want %d", n, bound)
	}

	other := fromAddress("127.0.0.3")
	if r := payFrom(t, other, env.URL, "other-1", "B-1", "Bearer student-3"); r.Status != http.StatusCreated {
		t.Fatalf("another address's payment: %d %s", r.Status, r.Body)
	}
	stream, status := openHeld(context.Background(), other, env.URL)
	if stream == nil {
		t.Fatalf("another address's live view: %d", status)
	}
	stream.close()
	presenter := fromAddress("127.0.0.4")
	if r := payFrom(t, presenter, env.URL, "presenter-1", "P-1", "Bearer presenter", PresenterHeader, token); r.Status != http.StatusCreated {
		t.Fatalf("the presenter's payment: %d %s", r.Status, r.Body)
	}
	presenterStream, status := openHeld(context.Background(), presenter, env.URL, PresenterHeader, token)
	if presenterStream == nil {
		t.Fatalf("the presenter's live view: %d", status)
	}
	presenterStream.close()

	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "the closed connections are no longer counted", func() bool { return ln.Open("127.0.0.2") == 0 })
	if r := getFrom(t, fromAddress("127.0.0.2"), env.URL+"/api/faults"); r.Status != http.StatusOK {
		t.Fatalf("the address once its connections closed: %d", r.Status)
	}
}

// One address that keeps many slow requests going (bodies that never
// come) has its bound of them in flight; the next are refused before
// routing with 429 and Retry-After, while another address pays and
// streams and the presenter, behind the same address, is still answered;
// when the requests end the count is back at zero.
func TestAnAddressHasAtMostItsRequestsInFlight(t *testing.T) {
	t.Parallel()
	const token, bound, reserve, tries = "front-of-class", 6, 3, 10
	env, _ := boundedEnv(t, Config{PresenterToken: token, BodyTimeout: 10 * time.Minute,
		Limits: Limits{InFlightPerAddress: bound, PresenterReserve: reserve}})
	const slow = "POST /api/delivery HTTP/1.1\r\nHost: room\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"
	conns := make([]net.Conn, tries)
	answers := make(chan *http.Response, tries)
	for i := range conns {
		conns[i] = rawFrom(t, "127.0.0.2", env.URL)
		if _, err := io.WriteString(conns[i], slow); err != nil {
			t.Fatal(err)
		}
		go func(c net.Conn) {
			res, _, err := rawAnswer(c)
			if err != nil {
				res = nil
			}
			answers <- res
		}(conns[i])
	}
	for range tries - bound {
		res := <-answers
		if res == nil || res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
			t.Fatalf("a slow request past the bound: %v", res)
		}
	}
	if n := env.Server.admission.inFlight.Held("127.0.0.2"); n != bound {
		t.Fatalf("%d requests of the address in flight, want %d", n, bound)
	}

	student := fromAddress("127.0.0.2")
	r := getFrom(t, student, env.URL+"/api/faults")
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "in flight") {
		t.Fatalf("another request of the address: %d %s", r.Status, r.Body)
	}
	t.Run("the presenter behind the same address is answered", func(t *testing.T) {
		for i := range reserve + 2 { // one by one: each gives its place back
			if r := getFrom(t, student, env.URL+"/api/faults", PresenterHeader, token); r.Status != http.StatusOK {
				t.Fatalf("the presenter's request %d by token: %d %s", i, r.Status, r.Body)
			}
		}
		cookie := env.Server.admission.presenter.cookie
		if r := getFrom(t, student, env.URL+"/api/faults", "Cookie", PresenterCookie+"="+cookie); r.Status != http.StatusOK {
			t.Fatalf("the presenter's request by cookie: %d %s", r.Status, r.Body)
		}
		if r := payFrom(t, student, env.URL, "presenter-1", "P-1", "Bearer presenter", PresenterHeader, token); r.Status != http.StatusCreated {
			t.Fatalf("the presenter's payment: %d %s", r.Status, r.Body)
		}
	})
	t.Run("another address pays and streams", func(t *testing.T) {
		other := fromAddress("127.0.0.3")
		for i := range bound + 2 {
			if r := payFrom(t, other, env.URL, fmt.Sprintf("other-%d", i), fmt.Sprintf("B-%d", i), "Bearer student-3"); r.Status != http.StatusCreated {
				t.Fatalf("another address's payment %d: %d %s", i, r.Status, r.Body)
			}
		}
		stream, status := openHeld(context.Background(), other, env.URL)
		if stream == nil {
			t.Fatalf("another address's live view: %d", status)
		}
		stream.close()
	})

	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "the ended requests are no longer counted", func() bool { return env.Server.admission.inFlight.Addresses() == 0 })
	if r := getFrom(t, student, env.URL+"/api/faults"); r.Status != http.StatusOK {
		t.Fatalf("the address once its requests ended: %d %s", r.Status, r.Body)
	}
}

// Behind paytwice cluster's front door every connection comes from the
// door on loopback: those are not counted, and requests in flight are
// counted by the address the door forwards, believed only with the door's
// mark, so a student cannot name itself someone else.
func TestBehindTheFrontDoorRequestsAreBoundedByTheForwardedAddress(t *testing.T) {
	t.Parallel()
	const mark, bound, tries = "door-mark", 2, 5
	env, ln := boundedEnv(t, Config{BehindFrontDoor: true, FrontDoorMark: mark, BodyTimeout: 10 * time.Minute,
		Limits: Limits{InFlightPerAddress: bound, ConnectionsPerAddress: bound}})
	slow := "POST /api/delivery HTTP/1.1\r\nHost: room\r\nContent-Type: application/json\r\nContent-Length: 200\r\n" +
		FrontDoorHeader + ": " + mark + "\r\nX-Forwarded-For: 10.0.0.7\r\n\r\n{"
	answers := make(chan *http.Response, tries)
	conns := make([]net.Conn, tries)
	for i := range conns {
		conns[i] = rawFrom(t, "127.0.0.2", env.URL)
		if _, err := io.WriteString(conns[i], slow); err != nil {
			t.Fatal(err)
		}
		go func(c net.Conn) {
			res, _, err := rawAnswer(c)
			if err != nil {
				res = nil
			}
			answers <- res
		}(conns[i])
	}
	for range tries - bound {
		if res := <-answers; res == nil || res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a forwarded slow request past the bound: %v", res)
		}
	}
	if n := env.Server.admission.inFlight.Held("10.0.0.7"); n != bound {
		t.Fatalf("%d requests of the forwarded address in flight, want %d", n, bound)
	}
	if n := ln.Open("127.0.0.2"); n != 0 {
		t.Fatalf("the door's connections are counted: %d", n)
	}
	door := fromAddress("127.0.0.2")
	if r := getFrom(t, door, env.URL+"/api/faults", FrontDoorHeader, mark, "X-Forwarded-For", "10.0.0.8"); r.Status != http.StatusOK {
		t.Fatalf("another forwarded address: %d %s", r.Status, r.Body)
	}
	if r := getFrom(t, door, env.URL+"/api/faults", "X-Forwarded-For", "10.0.0.7"); r.Status != http.StatusOK {
		t.Fatalf("a forged forwarded address, counted by its connection's: %d %s", r.Status, r.Body)
	}
	if r := getFrom(t, door, env.URL+"/api/faults", FrontDoorHeader, mark, "X-Forwarded-For", "10.0.0.7"); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the forwarded address past its bound: %d %s", r.Status, r.Body)
	}
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "the ended requests are no longer counted", func() bool { return env.Server.admission.inFlight.Addresses() == 0 })
}

// A server behind the front door says on its answer, to the door alone
// (the door's mark on the request), that the presenter sent a request:
// by the cookie or the right token in the header, never a wrong token,
// and never to a client that reached the server without the door's mark.
func TestTheServerTellsTheFrontDoorWhereThePresenterIs(t *testing.T) {
	t.Parallel()
	const mark, token = "door-mark", "the-presenter-token"
	env, _ := boundedEnv(t, Config{BehindFrontDoor: true, FrontDoorMark: mark, PresenterToken: token})
	client := fromAddress("127.0.0.1")
	cookie := PresenterCookie + "=" + env.Server.admission.presenter.cookie
	for _, tc := range []struct {
		name   string
		header []string
		told   bool
	}{
		{"the right token through the door", []string{FrontDoorHeader, mark, PresenterHeader, token}, true},
		{"the cookie through the door", []string{FrontDoorHeader, mark, "Cookie", cookie}, true},
		{"a wrong token through the door", []string{FrontDoorHeader, mark, PresenterHeader, "a-guess"}, false},
		{"a student through the door", []string{FrontDoorHeader, mark}, false},
		{"the right token without the door's mark", []string{PresenterHeader, token}, false},
		{"the cookie with a forged mark", []string{FrontDoorHeader, "forged", "Cookie", cookie}, false},
	} {
		r := getFrom(t, client, env.URL+"/api/faults", append(tc.header, "X-Forwarded-For", "10.0.0.9")...)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, r.Status, r.Body)
		}
		if told := r.Header.Get(peers.PresenterSeenHeader) != ""; told != tc.told {
			t.Errorf("%s: the answer tells the door of the presenter: %v, want %v", tc.name, told, tc.told)
		}
	}
}

// askOn sends one GET on c, with header pairs, and reads its answer.
func askOn(t *testing.T, c net.Conn, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: room\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	res, body, err := rawAnswer(c)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return res, body
}

// The whole class behind one address holds all of its connections: the
// presenter, from that same address, still gets in. A connection past
// the share is on trial until its first request: the presenter's token
// or cookie keeps it (in the reserve, and its next requests are served
// too), a student's is answered 503 and closed, and a wrong token is
// counted as a guess. Students who open connections and send nothing do
// not keep the presenter out: the oldest undecided ones make room.
func TestThePresenterGetsInFromAnAddressWhoseConnectionsAreAllTaken(t *testing.T) {
	t.Parallel()
	const token, bound, reserve = "front-of-class", 4, 2
	const class = "127.0.0.2" // the presenter and the students, behind one NAT
	env, ln := boundedEnv(t, Config{PresenterToken: token, Limits: Limits{ConnectionsPerAddress: bound, PresenterReserve: reserve}})
	trials := env.Server.admission.trials
	for i := range bound {
		if res, body := askOn(t, rawFrom(t, class, env.URL), "/api/faults"); res.StatusCode != http.StatusOK {
			t.Fatalf("a student's connection %d: %d %s", i, res.StatusCode, body)
		}
	}
	if n := ln.Open(class); n != bound {
		t.Fatalf("%d connections of the address counted, want %d", n, bound)
	}
	res, body := askOn(t, rawFrom(t, class, env.URL), "/api/faults")
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || !strings.Contains(body, "connections") || !res.Close {
		t.Fatalf("a student's connection past the share: %d close=%v %s", res.StatusCode, res.Close, body)
	}

	// Connections that never send a request fill the trials, and more.
	for range addrlimit.TrialsAtOnce + 4 {
		rawFrom(t, class, env.URL)
	}
	waitFor(t, "the silent connections are on trial", func() bool { return trials.OnTrial() == addrlimit.TrialsAtOnce })

	presenter := rawFrom(t, class, env.URL)
	for i := range 3 { // the first request decides; the next are the kept connection's
		if res, body := askOn(t, presenter, "/api/faults", PresenterHeader, token); res.StatusCode != http.StatusOK {
			t.Fatalf("the presenter's request %d by token from the full address: %d %s", i, res.StatusCode, body)
		}
	}
	if res, body := askOn(t, presenter, "/api/faults"); res.StatusCode != http.StatusOK {
		t.Fatalf("the kept connection's next request: %d %s", res.StatusCode, body)
	}
	cookie := PresenterCookie + "=" + env.Server.admission.presenter.cookie
	if res, body := askOn(t, rawFrom(t, class, env.URL), "/api/faults", "Cookie", cookie); res.StatusCode != http.StatusOK {
		t.Fatalf("the presenter's request by cookie from the full address: %d %s", res.StatusCode, body)
	}
	if n := ln.Open(class); n != bound+reserve {
		t.Fatalf("%d connections of the address counted, want its share and the reserve, %d", n, bound+reserve)
	}
	if res, body := askOn(t, rawFrom(t, class, env.URL), "/api/faults", "Cookie", cookie); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the presenter past share and reserve: %d %s", res.StatusCode, body)
	}

	// The count of wrong tokens on a clock that stands still, so that no
	// try comes back while the guesses are sent.
	tries := env.Server.admission.presenter.tries
	stood := time.Now()
	tries.mu.Lock()
	tries.now = func() time.Time { return stood }
	tries.mu.Unlock()
	before := tries.wait(class)
	for i := range guessBurst {
		res, body := askOn(t, rawFrom(t, class, env.URL), "/api/faults", PresenterHeader, "a-guess")
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a wrong token on trial (%d): %d %s", i, res.StatusCode, body)
		}
	}
	if before != 0 || tries.wait(class) == 0 {
		t.Fatal("wrong tokens on trial were not counted as guesses")
	}

	presenter.Close()
	waitFor(t, "the presenter's kept connection gives its place back", func() bool { return ln.Open(class) == bound+reserve-1 })
}
