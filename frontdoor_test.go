package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"paytwice/pay/peers"
	"paytwice/web"
)

// TestFrontDoor runs the front door before test servers standing in for
// paytwice's.
func TestFrontDoor(t *testing.T) {
	// Each test server answers with its name and what it was sent.
	backend := func(name string) *child {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if r.Header.Get("Close") != "" {
				w.Header().Set("Connection", "close")
			}
			w.Header().Set(web.ServerHeader, name)
			fmt.Fprintf(w, "%s %s %s %s %s", r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get(web.FrontDoorHeader), body)
		}))
		t.Cleanup(hs.Close)
		u, _ := url.Parse(hs.URL)
		return &child{name: name, url: u, exited: make(chan struct{})}
	}
	refusing := func(name string) *child {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // a server that died: its port refuses connections
		return &child{name: name, url: &url.URL{Scheme: "http", Host: addr}, exited: make(chan struct{})}
	}
	exited := func(c *child) *child { close(c.exited); return c }
	serve := func(servers ...*child) string {
		hs := httptest.NewServer(newFrontDoor(servers, "door-mark", io.Discard))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	post := func(t *testing.T, client *http.Client, u, body string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
		req.Host = "classroom.example:8080"
		req.Header.Set("X-Forwarded-For", "6.6.6.6") // a client's own claim
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}

	t.Run("it takes the servers in turn and keeps the Host the client used", func(t *testing.T) {
		u := serve(backend("s1"), backend("s2"), backend("s3"))
		var got []string
		for range 6 {
			// A client's own mark is replaced by the door's.
			res, body := post(t, http.DefaultClient, u, "pay", web.FrontDoorHeader, "forged")
			got = append(got, res.Header.Get(web.ServerHeader))
			if want := "classroom.example:8080 127.0.0.1 classroom.example:8080 door-mark pay"; body != want {
				t.Fatalf("the server saw %q, want %q", body, want)
			}
		}
		if strings.Join(got, " ") != "s2 s3 s1 s2 s3 s1" {
			t.Fatalf("answers by %v, want each server in turn", got)
		}
	})

	t.Run("every workshop request goes to the first running server, whatever the method", func(t *testing.T) {
		u := serve(exited(backend("s1")), backend("s2"), backend("s3"), backend("s4"))
		paths := []string{"/workshop", "/workshop/run", "/workshop/-/scores", "/api/workshop", "/api/workshop/endpoint", "/workshop/gw/secret/v1/charges"}
		for range 3 {
			for _, p := range paths {
				res, _ := post(t, http.DefaultClient, u+p, "x")
				if s := res.Header.Get(web.ServerHeader); s != "s2" {
					t.Fatalf("POST %s answered by %q, want s2, the first running server", p, s)
				}
				get, err := http.Get(u + p)
				if err != nil {
					t.Fatal(err)
				}
				get.Body.Close()
				if s := get.Header.Get(web.ServerHeader); s != "s2" {
					t.Fatalf("GET %s answered by %q, want s2", p, s)
				}
			}
		}
		// Everything else still takes the servers in turn.
		seen := map[string]bool{}
		for _, p := range []string{"/workshops", "/", "/api/workshopx", "/"} {
			res, _ := post(t, http.DefaultClient, u+p, "x")
			seen[res.Header.Get(web.ServerHeader)] = true
		}
		if len(seen) < 2 {
			t.Fatalf("other paths answered only by %v, want them spread", seen)
		}
	})

	t.Run("a server that exited or refuses is passed over, and the body reaches the next", func(t *testing.T) {
		u := serve(exited(backend("s1")), refusing("s2"), backend("s3"))
		for range 3 {
			// A client's own mark is replaced by the door's.
			res, body := post(t, http.DefaultClient, u, "pay", web.FrontDoorHeader, "forged")
			if s := res.Header.Get(web.ServerHeader); s != "s3" || !strings.HasSuffix(body, " pay") {
				t.Fatalf("answered by %q with %q, want s3 with the body", s, body)
			}
		}
	})

	t.Run("with no server left the client gets a problem saying so", func(t *testing.T) {
		u := serve(exited(backend("s1")), refusing("s2"))
		res, body := post(t, http.DefaultClient, u, "pay")
		var p struct {
			Status int
			Detail string
		}
		_ = json.Unmarshal([]byte(body), &p)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Content-Type") != "application/problem+json" ||
			p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Detail, "None of the 2 servers") ||
			res.Header.Get("Retry-After") != "1" || res.Header.Get("Stripe-Should-Retry") != "true" {
			t.Fatalf("%d %s %s", res.StatusCode, res.Header.Get("Content-Type"), body)
		}
	})

	t.Run("a server that takes the request and hangs up gets the client a 502 that invites a retry with the key", func(t *testing.T) {
		var taken atomic.Int32
		hangingUp := func(name string) *child {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				taken.Add(1)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close() // acted on it, maybe; answered nothing
				}
			}))
			t.Cleanup(hs.Close)
			su, _ := url.Parse(hs.URL)
			return &child{name: name, url: su, exited: make(chan struct{})}
		}
		u := serve(hangingUp("s1"), hangingUp("s2"))
		res, body := post(t, http.DefaultClient, u, "pay")
		if n := taken.Load(); n != 1 {
			t.Fatalf("%d servers got the request, want the one that took it and no other", n)
		}
		if res.StatusCode != http.StatusBadGateway || res.Header.Get("Retry-After") != "1" ||
			res.Header.Get("Stripe-Should-Retry") != "true" || !strings.Contains(body, "retry with the same Idempotency-Key") {
			t.Fatalf("%d Retry-After %q Stripe-Should-Retry %q: %s", res.StatusCode,
				res.Header.Get("Retry-After"), res.Header.Get("Stripe-Should-Retry"), body)
		}
	})

	t.Run("a server's Connection: close reaches the client", func(t *testing.T) {
		// The checkout page's payments each need a connection of their own
		// (web/page_attempts.go): the door must close the client's as the
		// server closed its own.
		u := serve(backend("s1"))
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		if res, _ := post(t, client, u, "pay", "Close", "yes"); !res.Close {
			t.Fatal("the client's connection stays open after a server's Connection: close")
		}
		if res, _ := post(t, client, u, "pay"); res.Close {
			t.Fatal("the door closed a connection the server kept")
		}
	})

	t.Run("a page resuming its event stream goes back to the server that numbered its events while it runs", func(t *testing.T) {
		// Each stand-in numbers its streams' events under an epoch of its
		// own and says so, as a paytwice server does.
		streaming := func(name, epoch string) (*child, *httptest.Server) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(web.ServerHeader, name)
				if r.URL.Path == "/events" {
					w.Header().Set(peers.StreamEpochHeader, epoch)
				}
			}))
			t.Cleanup(hs.Close)
			su, _ := url.Parse(hs.URL)
			return &child{name: name, url: su, exited: make(chan struct{})}, hs
		}
		s1, _ := streaming("s1", "0a0a0a0a0a0a")
		s2, hs2 := streaming("s2", "0b0b0b0b0b0b")
		s3, _ := streaming("s3", "0c0c0c0c0c0c")
		u := serve(s1, s2, s3)
		get := func(path string, header ...string) string {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, u+path, nil)
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.Header.Get(web.ServerHeader)
		}
		// New pages' streams take the reads' turns; the door learns each
		// server's epoch from its answers.
		var first []string
		for range 3 {
			first = append(first, get("/events"))
		}
		if slices.Sort(first); strings.Join(first, " ") != "s1 s2 s3" {
			t.Fatalf("new streams went to %v, want each server once", first)
		}
		for i := range 6 {
			if got := get("/events", "Last-Event-ID", "0b0b0b0b0b0b-"+strconv.Itoa(40+i)); got != "s2" {
				t.Fatalf("a page resuming from s2's event %d was sent to %s", 40+i, got)
			}
		}
		if got := get("/events?since=0c0c0c0c0c0c-7"); got != "s3" {
			t.Fatalf("a page opening from s3's event 7 was sent to %s", got)
		}
		// Only the event stream sticks: other reads take turns, whatever
		// they carry.
		other := map[string]bool{}
		for range 3 {
			other[get("/lab/live", "Last-Event-ID", "0b0b0b0b0b0b-40")] = true
		}
		if len(other) != 3 {
			t.Fatalf("other reads went to %v, want every server in turn", other)
		}
		// Its server gone, the page goes to another, which draws it again.
		hs2.Close()
		for range 3 {
			if got := get("/events", "Last-Event-ID", "0b0b0b0b0b0b-45"); got != "s1" && got != "s3" {
				t.Fatalf("a page of a server that is gone was sent to %q", got)
			}
		}
	})
}

// A server behind the front door that answers past the door's bounds:
// headers larger than it reads, a body of declared length larger than it
// forwards, or of unknown length running past it. The first two get a
// 502 naming the bound; the third is cut, never passed on shortened as if
// whole. An answer within the bounds passes.
func TestFrontDoorBoundsAServersAnswer(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/headers":
			for i := range 20 {
				w.Header().Set(fmt.Sprintf("X-Filler-%d", i), strings.Repeat("v", 60<<10))
			}
		case "/declared":
			w.Header().Set("Content-Length", strconv.Itoa(frontDoorMaxBody+1))
			w.WriteHeader(http.StatusOK)
			return // the door refuses it on the length alone
		case "/unbounded":
			w.Header().Set("Content-Type", "application/octet-stream")
			chunk := make([]byte, 1<<20)
			for range frontDoorMaxBody>>20 + 2 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		io.WriteString(w, "fine")
	}))
	defer hs.Close()
	u, _ := url.Parse(hs.URL)
	door := httptest.NewServer(newFrontDoor([]*child{{name: "s1", url: u, exited: make(chan struct{})}}, "door-mark", io.Discard))
	defer door.Close()
	get := func(path string) (*http.Response, []byte, error) {
		res, err := http.Get(door.URL + path)
		if err != nil {
			return nil, nil, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res, b, err
	}
	for path, want := range map[string]string{
		"/headers":  "headers are larger than the front door reads (1024 KiB)",
		"/declared": "body is larger than the front door forwards (64 MiB)",
	} {
		res, body, err := get(path)
		if err != nil || res.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), want) {
			t.Fatalf("%s: %v %v %.300s; want 502 saying %q", path, err, res, body, want)
		}
	}
	if _, body, err := get("/unbounded"); err == nil || len(body) > frontDoorMaxBody {
		t.Fatalf("an answer past the bound: %d bytes, error %v; want the connection cut at the bound", len(body), err)
	}
	if res, body, err := get("/fine"); err != nil || res.StatusCode != http.StatusOK || string(body) != "fine" {
		t.Fatalf("an answer within the bounds: %v %v %s", err, res, body)
	}
}
