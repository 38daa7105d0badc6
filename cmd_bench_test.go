package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBenchCommand(t *testing.T) {
	url := payServer(t)

	t.Run("new payments are all 201 and the CPU of a process is read", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-c", "4", "-n", "60", "-pid", fmt.Sprint(os.Getpid()))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"new payments: 4 clients, 60 requests", "requests    60 in", "throughput", "p50", "p99", "max", "statuses    201 ×60\n", "server CPU"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("the write system calls of a process are counted", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-c", "4", "-n", "60", "-pid", fmt.Sprint(os.Getpid()))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// The server runs in this process: each of its 60 answers is at
		// least one write to its connection.
		var n int
		var per float64
		i := strings.Index(out, "server writes ")
		if i < 0 {
			t.Fatalf("output lacks the server's writes:\n%s", out)
		}
		if _, err := fmt.Sscanf(out[i:], "server writes %d write calls, %f per request", &n, &per); err != nil || n < 60 || per < 1 {
			t.Fatalf("server writes %d (%v per request, %v), want at least one per answer:\n%s", n, per, err, out)
		}
	})

	t.Run("replays are all saved answers", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-mode", "replay", "-keys", "5", "-c", "3", "-n", "40")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "statuses    201 ×40, (40 marked Idempotent-Replayed)") {
			t.Errorf("output:\n%s", out)
		}
	})

	t.Run("replays from many callers are all saved answers: each key is always its one caller's", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-mode", "replay", "-keys", "12", "-c", "3", "-n", "60", "-callers", "5")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"callers: 5 (Bearer bench-", "statuses    201 ×60, (60 marked Idempotent-Replayed)"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("a storm against paytwice has one fresh 201", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-mode", "storm", "-c", "40", "-n", "2")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"storms: 2 × 40 requests", "fresh 201s  1 per storm", "2xx bodies  1 distinct per storm"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("with viewers, every payment is timed from its 201 to the pages", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-c", "2", "-n", "30", "-rate", "100", "-viewers", "12")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// 12 viewers: the first is the board, and one in ten of the 11
		// phones is sampled; each sees all 30 payments done.
		for _, want := range []string{"statuses    201 ×30\n", "viewers     12 open event streams (0 ended early)", "201→viewer  p50", "(30 deliveries to 1 sampled phone, every payment)", "201→board   p50", "(30 deliveries to the board)"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("bad flags are refused before anything is sent", func(t *testing.T) {
		for _, args := range [][]string{
			{"bench", "-url", "127.0.0.1:8080"},
			{"bench", "-url", url, "-mode", "twice"},
			{"bench", "-url", url, "-c", "0"},
			{"bench", "-url", url, "-n", "5", "-d", "1s"},
			{"bench", "-url", url, "-mode", "storm", "-d", "1s"},
			{"bench", "-url", url, "-path", "v1/payments"},
			{"bench", "-url", url, "-pid", "-3"},
			{"bench", "-url", url, "-rate", "-1"},
			{"bench", "-url", url, "-mode", "storm", "-rate", "5"},
			{"bench", "-url", url, "-viewers", "-2"},
			{"bench", "-url", url, "-auth", "Bearer a\r\nX-Injected: 1"},
			{"bench", "-url", url, "-callers", "-1"},
			{"bench", "-url", url, "-callers", "2", "-auth", "Bearer a"},
		} {
			if _, _, err := runCmd(t, args...); err == nil {
				t.Errorf("%v: no error", args)
			}
		}
	})
}

// An endpoint that charges every request, key or not, is caught: a storm
// gets many fresh 201s with different bodies and the command fails.
func TestBenchCommandCatchesDoubleCharges(t *testing.T) {
	var charges atomic.Int64
	var mu sync.Mutex
	var auths, keys []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge_id":"ch_%d"}`, charges.Add(1))
	}))
	defer hs.Close()

	out, _, err := runCmd(t, "bench", "-url", hs.URL, "-mode", "storm", "-c", "10", "-auth", "Bearer alice")
	if err == nil || !strings.Contains(err.Error(), "storm 1: 10 fresh 201s and 10 distinct success bodies") {
		t.Errorf("error %v, output:\n%s", err, out)
	}
	if !strings.Contains(out, "fresh 201s  10 per storm") {
		t.Errorf("output:\n%s", out)
	}
	if len(auths) != 10 || auths[0] != "Bearer alice" || keys[0] != keys[9] || !strings.HasPrefix(keys[0], `"bench-`) {
		t.Errorf("authorization %q, keys %q", auths, keys)
	}
}

// With -callers, new payments come from that many callers, spread over
// all of them, and each key from one.
func TestBenchCommandSendsAsManyCallers(t *testing.T) {
	var mu sync.Mutex
	callerOf := map[string]map[string]bool{} // key: the Authorization values it came with
	perCaller := map[string]int{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		key, auth := r.Header.Get("Idempotency-Key"), r.Header.Get("Authorization")
		if callerOf[key] == nil {
			callerOf[key] = map[string]bool{}
		}
		callerOf[key][auth] = true
		perCaller[auth]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge_id":"ch_1"}`)
	}))
	defer hs.Close()

	out, _, err := runCmd(t, "bench", "-url", hs.URL, "-c", "4", "-n", "400", "-callers", "8")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(perCaller) != 8 {
		t.Errorf("%d distinct callers, want 8: %v", len(perCaller), perCaller)
	}
	for auth, n := range perCaller {
		if !strings.HasPrefix(auth, "Bearer bench-") || !strings.Contains(auth, "-caller-") || n < 10 {
			t.Errorf("caller %q sent %d of the 400 payments", auth, n)
		}
	}
	for key, auths := range callerOf {
		if len(auths) != 1 {
			t.Errorf("key %s came from %d callers", key, len(auths))
		}
	}
}

// rawServer answers on 127.0.0.1 with whatever serve writes: the answers
// a well-behaved Go server never sends, byte for byte. serve gets each
// accepted connection and its number.
func rawServer(t *testing.T, serve func(n int, conn net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for n := 0; ; n++ {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				serve(n, conn, bufio.NewReader(conn))
			})
		}
	})
	return "http://" + ln.Addr().String() + "/v1/payments"
}

func testConn(t *testing.T, url, body, auth string) *benchConn {
	t.Helper()
	tmpl, err := newRequestTemplate(url, body, auth)
	if err != nil {
		t.Fatal(err)
	}
	c := &benchConn{t: tmpl, timeout: 10 * time.Second}
	t.Cleanup(c.close)
	return c
}

// The client writes its requests by hand: each must be one that net/http
// reads as the request the flags describe.
func TestBenchRequestsAreWellFormed(t *testing.T) {
	got := make(chan *http.Request, 3)
	bodies := make(chan string, 3)
	url := rawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(req.Body)
			got <- req
			bodies <- string(b)
			io.WriteString(conn, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
		}
	})
	c := testConn(t, url, `{"order_id":"{key}","n":{n},"again":"{key}{n}"}`, "Bearer alice")
	for i, key := range []string{"k-1", `quote"d`} {
		if a := c.send(context.Background(), key, 7+i, false); a.err != nil || a.status != http.StatusCreated {
			t.Fatalf("answer %+v", a)
		}
		req, body := <-got, <-bodies
		wantKey := strconv.Quote(key)
		if req.Method != http.MethodPost || req.URL.Path != "/v1/payments" || req.Host == "" ||
			req.Header.Get("Idempotency-Key") != wantKey || req.Header.Get("Authorization") != "Bearer alice" ||
			req.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s host %q header %v", req.Method, req.URL, req.Host, req.Header)
		}
		n := strconv.Itoa(7 + i)
		if want := `{"order_id":"` + key + `","n":` + n + `,"again":"` + key + n + `"}`; body != want || req.ContentLength != int64(len(want)) {
			t.Errorf("body %q (length %d), want %q", body, req.ContentLength, want)
		}
	}
	c.unquoted = true
	c.send(context.Background(), "bare", 0, false)
	if req := <-got; req.Header.Get("Idempotency-Key") != "bare" {
		t.Errorf("-unquoted sent %q", req.Header.Get("Idempotency-Key"))
	}
	<-bodies
}

// Answers are read however a server ends them, and one connection carries
// every request it can.
func TestBenchReadsEveryShapeOfAnswer(t *testing.T) {
	answers := []string{
		"HTTP/1.1 201 Created\r\nContent-Length: 9\r\ncontent-type: application/json\r\n\r\n{\"id\":1}\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nidempotent-replayed: TRUE\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbusy\r\n3;ext=1\r\n!!!\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: 4\r\n\r\nlast",
	}
	var conns atomic.Int64
	url := rawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for _, a := range answers {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(conn, a)
			if strings.Contains(a, "Connection: close") {
				return
			}
		}
	})
	c := testConn(t, url, "{}", "")
	type seen struct {
		status   int
		replayed bool
		body     string
	}
	want := []seen{{201, false, "{\"id\":1}\n"}, {200, true, "abc"}, {409, false, "busy!!!"}, {204, false, ""}, {201, false, "last"}, {201, false, "{\"id\":1}\n"}}
	for i, w := range want {
		a := c.send(context.Background(), "k", i, true)
		if a.err != nil || (seen{a.status, a.replayed, a.body}) != w {
			t.Errorf("answer %d: %+v, want %+v", i, a, w)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: one until the server closed it, then another", n)
	}

	// HTTP/1.0 without a length: the body is all the connection carries.
	url = rawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(conn, "HTTP/1.0 201 Created\r\n\r\nuntil the end")
		}
	})
	c = testConn(t, url, "{}", "")
	if a := c.send(context.Background(), "k", 0, true); a.err != nil || a.status != 201 || a.body != "until the end" || c.conn != nil {
		t.Errorf("answer %+v, connection left open: %v", a, c.conn != nil)
	}

	for _, bad := range []string{"HTTP/1.1 2x1 Created\r\n\r\n", "SPDY 201\r\n\r\n", "HTTP/1.1 201 Created\r\nContent-Length: -4\r\n\r\n", "HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\nshort"} {
		url := rawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err == nil {
				io.WriteString(conn, bad)
			}
		})
		if a := testConn(t, url, "{}", "").send(context.Background(), "k", 0, false); a.err == nil {
			t.Errorf("%q: no error, answer %+v", bad, a)
		}
	}
}

// A kept-alive connection that the server closed while it sat idle is
// replaced and the request sent again, once; a new connection that breaks
// is an error.
func TestBenchReplacesAConnectionClosedWhileIdle(t *testing.T) {
	var requests atomic.Int64
	url := rawServer(t, func(n int, conn net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		requests.Add(1)
		io.WriteString(conn, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
		// Then the connection closes, as after an idle time-out, with
		// the next request unanswered.
		http.ReadRequest(br)
	})
	c := testConn(t, url, "{}", "")
	for i := range 3 {
		if a := c.send(context.Background(), "k", i, false); a.err != nil || a.status != 201 {
			t.Fatalf("request %d: %+v", i, a)
		}
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("%d requests answered, want 3", n)
	}

	url = rawServer(t, func(int, net.Conn, *bufio.Reader) {})
	if a := testConn(t, url, "{}", "").send(context.Background(), "k", 0, false); a.err == nil {
		t.Errorf("a connection closed at once answered %+v", a)
	}
}

// A request without an answer ends at the time-out, or when the run is
// stopped, whichever is first.
func TestBenchGivesUpOnASilentServer(t *testing.T) {
	stop, received := make(chan struct{}), make(chan bool, 2)
	defer close(stop)
	url := rawServer(t, func(_ int, _ net.Conn, br *bufio.Reader) {
		_, err := http.ReadRequest(br)
		received <- err == nil
		<-stop
	})
	c := testConn(t, url, "{}", "")
	c.timeout = 50 * time.Millisecond
	if a := c.send(context.Background(), "k", 0, false); !errors.Is(a.err, os.ErrDeadlineExceeded) {
		t.Errorf("after the time-out: %v", a.err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	c = testConn(t, url, "{}", "")
	done := make(chan answer)
	go func() { done <- c.send(ctx, "k", 0, false) }()
	for range 2 { // the request that timed out above, then this one
		if !<-received {
			t.Fatal("the server did not read the requests")
		}
	}
	cancel()
	if a := <-done; !errors.Is(a.err, context.Canceled) {
		t.Errorf("after the run was stopped: %v", a.err)
	}
}

// An https:// endpoint is spoken to over TLS, one handshake per client.
func TestBenchOverTLS(t *testing.T) {
	var conns atomic.Int64
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.Header.Get("Idempotency-Key"))
	}))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.StartTLS()
	defer hs.Close()
	c := testConn(t, hs.URL+"/v1/payments", "{}", "")
	c.t.tlsConfig.RootCAs = hs.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	for i := range 3 {
		if a := c.send(context.Background(), "k"+strconv.Itoa(i), i, true); a.err != nil || a.status != http.StatusCreated || a.body != strconv.Quote("k"+strconv.Itoa(i)) {
			t.Fatalf("answer %d: %+v", i, a)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for three requests", n)
	}
}

// A request that timed out on a kept connection is not sent again on a
// new one: the server has it, and the time it had is over. The next
// request dials the run's second connection, not a third.
func TestBenchDoesNotRedialARequestThatTimedOut(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	url := rawServer(t, func(n int, conn net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if n == 0 && i == 1 {
				<-stop // the first connection's second request is never answered
				return
			}
			fmt.Fprintf(conn, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%d", len(strconv.Itoa(n)), n)
		}
	})
	c := testConn(t, url, "{}", "")
	if a := c.send(context.Background(), "k", 0, true); a.err != nil || a.body != "0" {
		t.Fatalf("the first request: %+v", a)
	}
	c.timeout = 50 * time.Millisecond
	if a := c.send(context.Background(), "k", 1, false); !errors.Is(a.err, os.ErrDeadlineExceeded) {
		t.Fatalf("the unanswered request: %+v", a)
	}
	c.timeout = 10 * time.Second
	if a := c.send(context.Background(), "k", 2, true); a.err != nil || a.body != "1" {
		t.Errorf("the request after the time-out was answered on connection %q (%v), want the second one, 1", a.body, a.err)
	}
}

// TestBenchViewersTimeARowOnceOnEachPage: a done row drawn again in later
// frames (its panel redrawn, or the whole page after a gap) is not a new
// delivery; only its first showing on each sampled page is timed.
func TestBenchViewersTimeARowOnceOnEachPage(t *testing.T) {
	v := &viewers{prefix: "run-", paid: map[string]time.Time{}, seen: map[string]int{}}
	v.paidAt("run-1", time.Now())
	v.paidAt("run-2", time.Now())
	row := func(key string) string {
		return `data: <tr class="key-done"><td><code title="` + key + `">` + key + "</code></td></tr>\n"
	}
	stream := "id: 1\nevent: frame\n" + row("run-1") + "\n" +
		"id: 2\nevent: frame\n" + row("run-1") + row("run-2") + "\n" +
		"id: 3\nevent: frame\n" + row("run-2") + row("run-1") + row("old-9") + "\n"
	for range 2 { // two sampled phones of no caller
		v.read(strings.NewReader(stream), false, -1)
	}
	if len(v.delay) != 4 {
		t.Fatalf("%d deliveries timed, want 4 (two rows on two pages): %v", len(v.delay), v.delay)
	}
	if v.seen["run-1"] != 2 || v.seen["run-2"] != 2 {
		t.Fatalf("pages that saw each row: %v, want 2 each", v.seen)
	}
}

// TestBenchViewersTellTheBoardAndTheOwnPhoneApart: a delivery to the
// board is timed as the board's, one to the phone of the caller that paid
// the key as its own as well as a phone's, one to another caller's phone
// as a phone's only.
func TestBenchViewersTellTheBoardAndTheOwnPhoneApart(t *testing.T) {
	v := &viewers{prefix: "run-", callers: 2, paid: map[string]time.Time{}, seen: map[string]int{}}
	key := "run-7"
	v.paidAt(key, time.Now())
	stream := "id: 1\nevent: frame\n" + `data: <tr class="key-done"><td><code title="` + key + `">k</code></td></tr>` + "\n\n"
	owner := callerIndex(key, 2)
	v.read(strings.NewReader(stream), true, -1)
	v.read(strings.NewReader(stream), false, owner)
	v.read(strings.NewReader(stream), false, 1-owner)
	if len(v.board) != 1 || len(v.ownDelay) != 1 || len(v.delay) != 2 {
		t.Fatalf("board %d, own %d, phones %d deliveries; want 1, 1, 2", len(v.board), len(v.ownDelay), len(v.delay))
	}
}
