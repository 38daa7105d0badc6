package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/addrlimit"
	"paytwice/pay/check"
	"paytwice/pay/peers"
	"paytwice/web"
)

// shareBackend stands in for a paytwice server behind the door: /hold
// holds a request until release is closed (telling arrived first), and
// the right header token or the presenter's cookie gets the answer a
// server gives the door for the presenter (peers.PresenterSeenHeader).
type shareBackend struct {
	arrived chan string // the client address the door forwarded
	release chan struct{}
	// probes gets the client address and token of each probe of a token
	// (peers.PresenterProbePath) that carried the door's mark.
	probes chan [2]string
	// forwarded gets the path of every other request.
	forwarded chan string
}

func (b *shareBackend) child(t *testing.T, name string) *child {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(peers.PresenterCookie); r.Header.Get(check.PresenterHeader) == "right" || err == nil && c.Value == "the-cookie" {
			w.Header().Set(peers.PresenterSeenHeader, "1")
		}
		if r.URL.Path == peers.PresenterProbePath && r.Header.Get(peers.FrontDoorHeader) == "door-mark" {
			record(b.probes, [2]string{r.Header.Get("X-Forwarded-For"), r.Header.Get(check.PresenterHeader)})
		} else {
			record(b.forwarded, r.URL.Path)
		}
		if r.URL.Path == "/hold" || r.URL.Path == "/events" && r.URL.Query().Has("hold") {
			b.arrived <- r.Header.Get("X-Forwarded-For")
			<-b.release
		}
		fmt.Fprint(w, name)
	}))
	t.Cleanup(hs.Close)
	u, _ := url.Parse(hs.URL)
	return &child{name: name, url: u, exited: make(chan struct{})}
}

// record sends v on c unless c is full: the tests that read c read
// a few.
func record[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

// serveDoor serves a front door before three stand-ins on a real
// listener bounded as runCluster bounds it, with sh and the presenter
// cookie "the-cookie".
func serveDoor(t *testing.T, sh addrlimit.Shares) (*frontDoor, *shareBackend, string) {
	t.Helper()
	return serveDoorAt(t, sh, time.Now)
}

// serveDoorAt is serveDoor with the door's clock now.
func serveDoorAt(t *testing.T, sh addrlimit.Shares, now func() time.Time) (*frontDoor, *shareBackend, string) {
	t.Helper()
	if sh.IdleAfter == 0 {
		sh.IdleAfter = addrlimit.DefaultIdleAfter
	}
	b := &shareBackend{arrived: make(chan string, 64), release: make(chan struct{}),
		probes: make(chan [2]string, 64), forwarded: make(chan string, 1024)}
	door := newFrontDoor([]*child{b.child(t, "s1"), b.child(t, "s2"), b.child(t, "s3")}, "door-mark", io.Discard)
	door.bound(sh, "the-cookie", now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: door}
	go func() { _ = hs.Serve(door.listener(ln)) }()
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
		_ = hs.Close()
	})
	return door, b, ln.Addr().String()
}

// dialFrom opens a connection to addr from the loopback address ip.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ask sends one request on c and reads its answer (30 s at most).
func ask(t *testing.T, c net.Conn, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: room\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// The front door bounds each address's open connections by -limits'
// connections-per-address. Past it a connection is on trial: kept, in
// presenter-reserve more places, when its first request is the
// presenter's (the cookie, which the door checks, or a header token a
// server recognises, which the door never compares), refused with 503
// otherwise. Students behind the presenter's own address (one NAT) never
// hold the reserve, and a wrong token or a forged cookie keeps nothing.
func TestTheFrontDoorBoundsConnectionsByTheLimits(t *testing.T) {
	const bound, reserve = 3, 2
	door, b, addr := serveDoor(t, addrlimit.Shares{Connections: bound, InFlight: 100, Reserve: reserve})
	// fill opens bound connections from ip, each answered once (so each
	// is surely counted) and kept open.
	fill := func(t *testing.T, ip string) {
		t.Helper()
		for i := range bound {
			if res, body := ask(t, dialFrom(t, ip, addr), "/"); res.StatusCode != http.StatusOK {
				t.Fatalf("connection %d of %d from %s: %d %s", i+1, bound, ip, res.StatusCode, body)
			}
		}
	}
	refused := func(t *testing.T, ip string, header ...string) {
		t.Helper()
		res, body := ask(t, dialFrom(t, ip, addr), "/", header...)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, fmt.Sprintf("holds %d connections", bound)) ||
			res.Header.Get("Retry-After") == "" || !res.Close {
			t.Fatalf("one past the share from %s (%q): %d close=%v %s", ip, header, res.StatusCode, res.Close, body)
		}
	}
	t.Run("a student holds its bound, not one more", func(t *testing.T) {
		fill(t, "127.0.0.2")
		refused(t, "127.0.0.2")
		// One that sends nothing waits for its first request, and does
		// not count.
		dialFrom(t, "127.0.0.2", addr)
		if n := door.conns.Held("127.0.0.2"); n != bound {
			t.Fatalf("the door counts %d connections of the address, want %d", n, bound)
		}
	})
	t.Run("the presenter's cookie gets in from a full address, in the reserve", func(t *testing.T) {
		const ip = "127.0.0.3"
		fill(t, ip)
		cookie := []string{"Cookie", peers.PresenterCookie + "=the-cookie"}
		for i := range reserve {
			c := dialFrom(t, ip, addr)
			for j := range 2 { // its next request is the kept connection's
				if res, body := ask(t, c, "/", cookie...); res.StatusCode != http.StatusOK || res.Close {
					t.Fatalf("the presenter's connection %d, request %d: %d close=%v %s", i, j, res.StatusCode, res.Close, body)
				}
			}
		}
		refused(t, ip, cookie...) // past bound and reserve
		refused(t, ip)            // a student behind the same address
		if n := door.conns.Held(ip); n != bound+reserve {
			t.Fatalf("the door counts %d connections of the presenter's address, want %d", n, bound+reserve)
		}
	})
	t.Run("a header token a server recognises gets in, and the door keeps the server's word to itself", func(t *testing.T) {
		const ip = "127.0.0.4"
		fill(t, ip)
		for i := range reserve { // the first one no server has recognised yet
			res, body := ask(t, dialFrom(t, ip, addr), "/", check.PresenterHeader, "right")
			if res.StatusCode != http.StatusOK || res.Close {
				t.Fatalf("the presenter's token on connection %d: %d close=%v %s", i, res.StatusCode, res.Close, body)
			}
			if res.Header.Get(peers.PresenterSeenHeader) != "" {
				t.Fatal("the server's word to the door reached the client")
			}
		}
		refused(t, ip, check.PresenterHeader, "right")
		if n := door.conns.Held(ip); n != bound+reserve {
			t.Fatalf("the door counts %d connections, want %d", n, bound+reserve)
		}
	})
	t.Run("a wrong token or a forged cookie keeps nothing", func(t *testing.T) {
		const ip = "127.0.0.5"
		fill(t, ip)
		refused(t, ip, "Cookie", peers.PresenterCookie+"=forged")
		// A token is the servers' to compare: the door asks one, with the
		// client's address (so that a wrong one is counted against it),
		// and the request itself goes nowhere. A made-up token gets the
		// answer a student without one gets.
		for len(b.forwarded) > 0 {
			<-b.forwarded
		}
		for len(b.probes) > 0 {
			<-b.probes
		}
		refused(t, ip, check.PresenterHeader, "made-up")
		select {
		case p := <-b.probes:
			if p != [2]string{ip, "made-up"} {
				t.Fatalf("the probe carried address and token %q, want %q", p, [2]string{ip, "made-up"})
			}
		default:
			t.Fatal("no server was asked about the token")
		}
		if len(b.forwarded) > 0 {
			t.Fatalf("the request of a made-up token reached a server: %s", <-b.forwarded)
		}
		if n := door.conns.Held(ip); n != bound {
			t.Fatalf("the door counts %d connections, want %d", n, bound)
		}
	})
}

// The front door sees every live view of the cluster, so it bounds an
// address's across all the servers (each server counts only the ones it
// serves): past -limits streams-per-address, 429 problem+json before any
// server gets it. The presenter's are not counted (the cookie, or a
// header token a server recognised), another address opens its own, and
// a place comes back when a live view ends.
func TestTheFrontDoorBoundsLiveViewsAcrossTheServers(t *testing.T) {
	const streams = 3
	door, b, addr := serveDoor(t, addrlimit.Shares{Connections: 100, InFlight: 100, Reserve: 2, Streams: streams})
	if res, _ := ask(t, dialFrom(t, "127.0.0.4", addr), "/", check.PresenterHeader, "right"); res.StatusCode != http.StatusOK {
		t.Fatalf("the presenter's token: %d", res.StatusCode)
	}
	var held sync.WaitGroup
	for range streams { // one on each server, by the door's turns
		holdPathFrom(t, b, addr, &held, "/events?hold", "127.0.0.2")
	}
	res, body := ask(t, dialFrom(t, "127.0.0.2", addr), "/events?hold")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Content-Type") != "application/problem+json" ||
		res.Header.Get("Retry-After") != "10" || !strings.Contains(body, addrlimit.StreamsName) {
		t.Fatalf("one live view past the address's share across three servers: %d %v %s", res.StatusCode, res.Header, body)
	}
	if len(b.arrived) != 0 {
		t.Fatal("the refused live view reached a server")
	}
	for _, tc := range []struct {
		what, ip string
		header   []string
	}{
		{"another request of the address", "127.0.0.2", nil},
		{"the presenter's cookie at the address", "127.0.0.2", []string{"Cookie", peers.PresenterCookie + "=the-cookie"}},
		{"the presenter's recognised token at the address", "127.0.0.2", []string{check.PresenterHeader, "right"}},
		{"another address's live view", "127.0.0.3", nil},
	} {
		path := "/events"
		if tc.header == nil && tc.ip == "127.0.0.2" {
			path = "/"
		}
		if res, body := ask(t, dialFrom(t, tc.ip, addr), path, tc.header...); res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.what, res.StatusCode, body)
		}
	}
	if res, body := ask(t, dialFrom(t, "127.0.0.2", addr), "/events", check.PresenterHeader, "a-guess"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a token no server recognised, past the share: %d %s", res.StatusCode, body)
	}
	if n := door.streams.Held("127.0.0.2"); n != streams {
		t.Fatalf("the door counts %d live views of the address, want %d", n, streams)
	}
	close(b.release)
	held.Wait()
	// The door gives a place back just after the live view ends.
	for deadline := time.Now().Add(30 * time.Second); door.streams.Addresses() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d addresses still counted once every live view ended", door.streams.Addresses())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res, body := ask(t, dialFrom(t, "127.0.0.2", addr), "/events"); res.StatusCode != http.StatusOK {
		t.Fatalf("after the live views ended: %d %s", res.StatusCode, body)
	}
}

// holdFrom sends GET /hold to the door at addr from ip, with header
// lines ("Name: value\r\n"), and returns once a server holds it; held is
// done when its answer has been read (2 minutes at most).
func holdFrom(t *testing.T, b *shareBackend, addr string, held *sync.WaitGroup, ip string, header ...string) {
	t.Helper()
	holdPathFrom(t, b, addr, held, "/hold", ip, header...)
}

// holdPathFrom is holdFrom for path, which a server holds.
func holdPathFrom(t *testing.T, b *shareBackend, addr string, held *sync.WaitGroup, path, ip string, header ...string) {
	t.Helper()
	c := dialFrom(t, ip, addr)
	held.Add(1)
	// answered is what the door said, if it answered before a server had
	// the request: a refusal, which the test reads at once.
	answered := make(chan string, 1)
	go func() {
		defer held.Done()
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: room\r\n"+strings.Join(header, "")+"\r\n")
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answered <- err.Error()
			return
		}
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		res.Body.Close()
		answered <- res.Status + " " + string(body)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-b.arrived:
	case a := <-answered:
		t.Fatalf("a held request from %s (%q) was answered before it reached a server: %s", ip, header, a)
	case <-ctx.Done():
		t.Fatalf("a held request from %s (%q) did not reach a server in 30 s", ip, header)
	}
}

// waitPlacesBack waits until the door counts no request in flight from
// ip: it gives a place back just after its answer is written, so a
// client can read the answer a moment before.
func waitPlacesBack(t *testing.T, door *frontDoor, ip string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); door.inFlight.Held(ip) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, the door still counts %d requests in flight from %s, all answered", door.inFlight.Held(ip), ip)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The front door sees every request of the cluster, so it bounds an
// address's requests in flight across all the servers (each server sees
// only its part): past -limits' in-flight-per-address, 429 before any
// server gets it. The presenter's cookie is never counted, the header
// token a server recognised gets the reserve, live views are not
// counted, and another address is answered as usual.
func TestTheFrontDoorBoundsRequestsInFlightAcrossTheServers(t *testing.T) {
	const bound, reserve = 4, 2
	door, b, addr := serveDoor(t, addrlimit.Shares{Connections: 100, InFlight: bound, Reserve: reserve})
	var held sync.WaitGroup
	hold := func(ip string, header ...string) { holdFrom(t, b, addr, &held, ip, header...) }
	for range bound {
		hold("127.0.0.2")
	}
	res, body := ask(t, dialFrom(t, "127.0.0.2", addr), "/hold")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" ||
		res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "in-flight-per-address") {
		t.Fatalf("one past the bound across three servers: %d %v %s", res.StatusCode, res.Header, body)
	}
	if len(b.arrived) != 0 {
		t.Fatal("the refused request reached a server")
	}
	for _, tc := range []struct {
		what, ip, path string
		header         []string
	}{
		{"another address", "127.0.0.3", "/", nil},
		{"the presenter's token from another address", "127.0.0.3", "/", []string{check.PresenterHeader, "right"}},
		{"a live view of the address", "127.0.0.2", "/events", nil},
		{"the presenter's cookie at the address", "127.0.0.2", "/", []string{"Cookie", peers.PresenterCookie + "=the-cookie"}},
	} {
		if res, body := ask(t, dialFrom(t, tc.ip, addr), tc.path, tc.header...); res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.what, res.StatusCode, body)
		}
	}
	// A server recognised the token: it may use the reserve, at any
	// address, no more, and a request without it still none of it.
	for range reserve {
		hold("127.0.0.2", check.PresenterHeader+": right\r\n")
	}
	for _, h := range [][]string{{check.PresenterHeader, "right"}, nil} {
		if res, body := ask(t, dialFrom(t, "127.0.0.2", addr), "/", h...); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("past bound and reserve (%v): %d %s", h, res.StatusCode, body)
		}
	}
	if n := door.inFlight.Held("127.0.0.2"); n != bound+reserve {
		t.Fatalf("the door counts %d requests in flight, want %d", n, bound+reserve)
	}
	close(b.release)
	held.Wait()
	// The door gives a place back just after its answer is written.
	for deadline := time.Now().Add(30 * time.Second); door.inFlight.Addresses() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d addresses still counted once every request ended", door.inFlight.Addresses())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res, body := ask(t, dialFrom(t, "127.0.0.2", addr), "/"); res.StatusCode != http.StatusOK {
		t.Fatalf("after the held requests ended: %d %s", res.StatusCode, body)
	}
}

// The front door reads its three bounds, and how long it keeps the
// tokens a server recognised, out of -limits as every server behind it reads
// them, defaults included, and refuses a wrong value of its own names
// before any server starts.
func TestTheFrontDoorReadsTheServersLimits(t *testing.T) {
	for _, v := range []string{"", "connections-per-address=7, in-flight-per-address=9,presenter-reserve=3,streams=5", "streams-per-address=300,simulations=60/1s", "idle-after=90s"} {
		sh, err := addrlimit.ParseShares(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		l, err := web.ParseLimits(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if want := (addrlimit.Shares{Connections: l.ConnectionsPerAddress, InFlight: l.InFlightPerAddress, Reserve: l.PresenterReserve,
			Streams: l.StreamsPerAddress, IdleAfter: l.IdleAfter}); sh != want {
			t.Fatalf("%q: the door reads %+v, a server %+v", v, sh, want)
		}
	}
	for _, v := range []string{"in-flight-per-address=0", "presenter-reserve=-1", "streams-per-address=0", "connections-per-address=many", "idle-after=0s", "idle-after=soon"} {
		if _, err := addrlimit.ParseShares(v); err == nil {
			t.Fatalf("%q taken", v)
		}
		if _, err := web.ParseLimits(v); err == nil {
			t.Fatalf("a server takes %q", v)
		}
	}
}

// Behind one NAT the presenter's address is every student's. At the
// front door a header token gets the presenter's reserve of requests in
// flight only once a server has recognised that very token: any other,
// from the presenter's own address, gets the address's share and a 429
// past it, without reaching a server. A token sent beside the
// presenter's cookie is not learned from the server's word, which was
// about the cookie; the cookie itself is never counted.
func TestTheFrontDoorGivesTheReserveOnlyToATokenAServerRecognised(t *testing.T) {
	const bound, reserve = 4, 2
	const class = "127.0.0.2" // the presenter and the students, behind one NAT
	door, b, addr := serveDoor(t, addrlimit.Shares{Connections: 100, InFlight: bound, Reserve: reserve})
	for _, h := range [][]string{
		{check.PresenterHeader, "right"}, // the presenter's client, recognised by a server
		{"Cookie", peers.PresenterCookie + "=the-cookie", check.PresenterHeader, "beside-the-cookie"}, // the presenter's browser
		{check.PresenterHeader, "a-guess"}, // a student's, while the address has room: a server says nothing
	} {
		if res, body := ask(t, dialFrom(t, class, addr), "/", h...); res.StatusCode != http.StatusOK {
			t.Fatalf("%q with room: %d %s", h, res.StatusCode, body)
		}
	}
	if !door.tokens.has("right") {
		t.Fatal("the token a server recognised is not kept")
	}
	waitPlacesBack(t, door, class)
	var held sync.WaitGroup
	defer func() { close(b.release); held.Wait() }()
	// The students fill the address's share, some of them with tokens of
	// their own.
	for i := range bound {
		if i%2 == 0 {
			holdFrom(t, b, addr, &held, class)
		} else {
			holdFrom(t, b, addr, &held, class, check.PresenterHeader+": x\r\n")
		}
	}
	for _, token := range []string{"x", "a-token", "a-guess", "beside-the-cookie"} {
		res, body := ask(t, dialFrom(t, class, addr), "/", check.PresenterHeader, token)
		if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, addrlimit.InFlightName) {
			t.Fatalf("a token no server recognised (%q), past the share of the presenter's address: %d %s", token, res.StatusCode, body)
		}
	}
	// The token a server recognised has the reserve, and no more.
	for range reserve {
		holdFrom(t, b, addr, &held, class, check.PresenterHeader+": right\r\n")
	}
	if res, body := ask(t, dialFrom(t, class, addr), "/", check.PresenterHeader, "right"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the recognised token past bound and reserve: %d %s", res.StatusCode, body)
	}
	if res, body := ask(t, dialFrom(t, class, addr), "/", "Cookie", peers.PresenterCookie+"=the-cookie"); res.StatusCode != http.StatusOK {
		t.Fatalf("the presenter's cookie at the full address: %d %s", res.StatusCode, body)
	}
	if n := door.inFlight.Held(class); n != bound+reserve {
		t.Fatalf("the door counts %d requests in flight, want %d", n, bound+reserve)
	}
	if len(b.arrived) != 0 {
		t.Fatal("a refused request reached a server")
	}
}

// The door keeps the tokens a server recognised for -limits idle-after after it last heard of them, by its
// clock: no longer, as a server keeps its own.
func TestTheFrontDoorKeepsThePresenterForIdleAfter(t *testing.T) {
	sh, err := addrlimit.ParseShares("idle-after=3m")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	pass := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); at = at.Add(d) }
	door := newFrontDoor(nil, "door-mark", io.Discard)
	door.bound(sh, "the-cookie", now)
	door.tokens.note("right")
	pass(3 * time.Minute)
	if !door.tokens.has("right") {
		t.Fatal("forgotten before idle-after")
	}
	if door.tokens.has("wrong") || door.tokens.has("") {
		t.Fatal("a token no server recognised is known")
	}
	pass(time.Second)
	if door.tokens.has("right") {
		t.Fatal("kept past idle-after")
	}
}
