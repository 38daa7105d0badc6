package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
	"paytwice/pay/peers"
	"paytwice/store/postgres/pgtest"
	"paytwice/web"
)

// cluster is a running "paytwice cluster": the front door's process and
// each server's own URL by name.
type cluster struct {
	*process
	servers map[string]string
	pids    map[string]int
}

var clusterServerLine = regexp.MustCompile(`(?m)^  (s\d+)  (http://\S+)  pid (\d+)$`)

// startCluster runs "paytwice cluster" on the database dbURL with a front
// door on a free loopback port; the servers' lines come before the front
// door's URL, so they are read by the time it is.
func startCluster(ctx context.Context, t *testing.T, bin, dbURL string, flags ...string) *cluster {
	t.Helper()
	p := startProcess(ctx, t, bin, append([]string{"cluster", "-addr", "127.0.0.1:0", "-db", dbURL, "-presenter-token", clusterPresenterToken}, flags...)...)
	c := &cluster{process: p, servers: map[string]string{}, pids: map[string]int{}}
	for _, m := range clusterServerLine.FindAllStringSubmatch(p.stdout.String(), -1) {
		c.servers[m[1]] = m[2]
		c.pids[m[1]], _ = strconv.Atoi(m[3])
	}
	return c
}

// setFaults changes the switches through the front door, as the
// presenter, and waits until every server runs with them: the servers
// share one room and learn of a change by a notification.
func (c *cluster) setFaults(ctx context.Context, t *testing.T, body string) {
	t.Helper()
	status, b := c.asPresenter(ctx, t, http.MethodPatch, c.url+"/api/faults", body)
	var want pay.Faults
	if status != http.StatusOK || json.Unmarshal(b, &want) != nil {
		t.Fatalf("PATCH /api/faults %s: %d %s", body, status, b)
	}
	for name, u := range c.servers {
		poll(ctx, t, "the switches on "+name, func() bool {
			var got pay.Faults
			status, b := c.asPresenter(ctx, t, http.MethodGet, u+"/api/faults", "")
			return status == http.StatusOK && json.Unmarshal(b, &got) == nil && got == want
		})
	}
}

// asPresenter sends one request with the presenter's token.
func (c *cluster) asPresenter(ctx context.Context, t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(web.PresenterHeader, clusterPresenterToken)
	res, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// clusterPresenterToken is the presenter's token in the clusters the
// tests start.
const clusterPresenterToken = "cluster-class"

// answeredBy sends one request through the front door and returns its
// status, body and the server that answered.
func (c *cluster) answeredBy(ctx context.Context, t *testing.T, key, body string) (int, []byte, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := c.client.Do(req)
	if err != nil {
		t.Errorf("%s: %v", key, err)
		return 0, nil, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header.Get(web.ServerHeader)
}

// TestClusterCommand runs "paytwice cluster -servers 3" on a database of
// its own: the front door spreads requests over the three servers, a
// storm of one key through it is charged once, and SIGTERM with a live
// page open ends the front door and every server, with status 0.
func TestClusterCommand(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(ctx, t, binary(t), dbURL, "-servers", "3")
	if len(c.servers) != 3 {
		t.Fatalf("the cluster named %d servers, want 3:\n%s", len(c.servers), c.stdout.String())
	}

	t.Run("requests through the front door are spread over all three servers", func(t *testing.T) {
		seen := map[string]int{}
		for i := range 6 {
			key := fmt.Sprintf("spread-%d", i)
			status, body, server := c.answeredBy(ctx, t, key, fmt.Sprintf(`{"order_id":%q,"amount_satang":100}`, key))
			if status != http.StatusCreated {
				t.Fatalf("%s: %d %s", key, status, body)
			}
			seen[server]++
		}
		if seen["s1"] == 0 || seen["s2"] == 0 || seen["s3"] == 0 {
			t.Fatalf("answers by server: %v; want all three", seen)
		}
	})

	t.Run("the database's URL, password and all, is not on the servers' command lines", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("reads /proc")
		}
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		for name, pid := range c.pids {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				t.Fatal(err)
			}
			args := strings.ReplaceAll(string(cmdline), "\x00", " ")
			if strings.Contains(args, "postgres://") || strings.Contains(args, u.Path) {
				t.Errorf("server %s was started as %q, which every user of the machine can read", name, args)
			}
		}
	})

	t.Run("a storm of one key through the front door charges once", func(t *testing.T) {
		// A slow gateway keeps the first request's claim open while the
		// others arrive on the other servers.
		c.setFaults(ctx, t, `{"gateway":{"latency_ms":300}}`)
		const key, body, requests = "storm-through-the-door", `{"order_id":"D-1","amount_satang":4200}`, 12
		var (
			mu      sync.Mutex
			charges = map[string]bool{}
			servers = map[string]bool{}
			wg      sync.WaitGroup
		)
		for range requests {
			wg.Go(func() {
				status, b, server := c.answeredBy(ctx, t, key, body)
				mu.Lock()
				defer mu.Unlock()
				servers[server] = true
				switch status {
				case http.StatusCreated:
					var ch struct {
						ID string `json:"charge_id"`
					}
					_ = json.Unmarshal(b, &ch)
					charges[ch.ID] = true
				case http.StatusConflict: // the first request was at the gateway
				default:
					t.Errorf("status %d %s", status, b)
				}
			})
		}
		wg.Wait()
		if len(servers) != 3 || len(charges) != 1 {
			t.Fatalf("answered by %v, 201s naming charges %v: want three servers and one charge", servers, charges)
		}
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM charges WHERE idempotency_key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%d charges in the database for the key, want 1", n)
		}
	})

	t.Run("the presenter's cookie from one server counts on all of them", func(t *testing.T) {
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noRedirect.Get(c.url + "/board?token=" + clusterPresenterToken)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		var cookie *http.Cookie
		for _, ck := range res.Cookies() {
			if ck.Name == web.PresenterCookie {
				cookie = ck
			}
		}
		if cookie == nil {
			t.Fatalf("%d and no presenter cookie", res.StatusCode)
		}
		seen := map[string]bool{}
		for range 3 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, c.url+"/api/faults", strings.NewReader(`{"server":{"delay_ms":0}}`))
			req.Header.Set("Content-Type", "application/json")
			req.AddCookie(cookie)
			res, err := c.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			seen[res.Header.Get(web.ServerHeader)] = true
			if res.StatusCode != http.StatusOK {
				t.Fatalf("PATCH /api/faults with the presenter's cookie on %s: %d", res.Header.Get(web.ServerHeader), res.StatusCode)
			}
		}
		if len(seen) != 3 {
			t.Fatalf("the switches went to %v, want all three servers", seen)
		}
	})

	// A page's event stream through the front door, whose server is s2.
	var onS2 string
	t.Run("a page resuming its event stream through the front door goes back to its server, which resumes it without a redraw", func(t *testing.T) {
		for range 3 {
			if server, id, _ := firstFrameVia(ctx, t, c.url, ""); server == "s2" {
				onS2 = id
				break
			}
		}
		if onS2 == "" {
			t.Fatal("no new stream went to s2 in three turns")
		}
		if status, body, _ := c.answeredBy(ctx, t, "resume-1", `{"order_id":"R-1","amount_satang":100}`); status != http.StatusCreated {
			t.Fatalf("pay: %d %s", status, body)
		}
		for range 4 {
			server, _, data := firstFrameVia(ctx, t, c.url, onS2)
			if server != "s2" || strings.Contains(data, "<!--resync-->") {
				t.Fatalf("a page of s2 resumed on %s, its first frame: %.300s", server, data)
			}
		}
	})

	t.Run("a server that dies is reported and passed over", func(t *testing.T) {
		if err := syscall.Kill(c.pids["s2"], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "stderr to report s2's death", func() bool {
			return strings.Contains(c.stderr.String(), "server s2 stopped: signal: killed")
		})
		seen := map[string]int{}
		for i := range 4 {
			key := fmt.Sprintf("after-s2-%d", i)
			status, body, server := c.answeredBy(ctx, t, key, fmt.Sprintf(`{"order_id":%q,"amount_satang":100}`, key))
			if status != http.StatusCreated {
				t.Fatalf("%s: %d %s", key, status, body)
			}
			seen[server]++
		}
		if seen["s1"] == 0 || seen["s3"] == 0 || seen["s2"] != 0 {
			t.Fatalf("answers by server: %v; want s1 and s3 only", seen)
		}
	})

	t.Run("a page of the server that died is drawn again by another, which says its server stopped", func(t *testing.T) {
		if onS2 == "" {
			t.Skip("no page of s2")
		}
		server, _, data := firstFrameVia(ctx, t, c.url, onS2)
		if server == "s2" || !strings.Contains(data, "<!--resync-->") || !strings.Contains(data, "The server this page followed stopped or restarted") {
			t.Fatalf("a page of s2 after s2 died, on %s: %.400s", server, data)
		}
	})

	t.Run("SIGTERM with an event stream open ends everything with status 0, a server dead before included", func(t *testing.T) {
		streamEnded := openEventStream(ctx, t, c.url)
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-streamEnded:
		case <-ctx.Done():
			t.Fatal("the event stream stayed open after SIGTERM")
		}
		select {
		case <-c.exited:
		case <-ctx.Done():
			t.Fatalf("the cluster did not exit after SIGTERM: %s", c.stderr.String())
		}
		if code := c.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit status %d: %s", code, c.stderr.String())
		}
		// The servers exited before the cluster did: nobody listens on
		// their ports any more.
		for name, u := range c.servers {
			if _, err := net.Dial("tcp", strings.TrimPrefix(u, "http://")); err == nil {
				t.Errorf("server %s still accepts connections at %s", name, u)
			}
		}
	})
}

func TestClusterCommandFlags(t *testing.T) {
	t.Setenv("PAYTWICE_DB", "")
	const pg = "postgres://u:p@127.0.0.1:5432/paytwice"
	for _, tc := range []struct {
		name string
		args []string
		exit int
		want string // in the error, or in the usage for a bad command line
	}{
		{"an unknown flag prints the usage", []string{"-bogus"}, 2, "usage: paytwice cluster"},
		{"a stray argument prints the usage", []string{"-db", pg, "now"}, 2, "usage: paytwice cluster"},
		{"a count that is not a number prints the usage", []string{"-servers", "three"}, 2, "usage: paytwice cluster"},
		{"no database is refused", nil, 2, "-db must be a postgres:// URL"},
		{"a SQLite file is refused", []string{"-db", "paytwice.db"}, 2, "servers on SQLite files of their own would not share"},
		{"no server is refused", []string{"-db", pg, "-servers", "0"}, 2, "-servers must be between 1 and 16, not 0"},
		{"seventeen servers are refused", []string{"-db", pg, "-servers", "17"}, 2, "-servers must be between 1 and 16, not 17"},
		{"a zero lock timeout is refused", []string{"-db", pg, "-lock-timeout", "0s"}, 2, "-lock-timeout and -retention must be positive"},
		{"a lock timeout under a second is refused", []string{"-db", pg, "-lock-timeout", "2ns"}, 2, "-lock-timeout must be at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := runCmd(t, append([]string{"cluster"}, tc.args...)...)
			if code := exitCode(err, io.Discard); code != tc.exit {
				t.Fatalf("exit status %d, want %d (error %v)", code, tc.exit, err)
			}
			if !strings.Contains(stderr+fmt.Sprint(err), tc.want) {
				t.Fatalf("error %v, stderr %q: want %q", err, stderr, tc.want)
			}
		})
	}
	t.Run("help lists it", func(t *testing.T) {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"help"}, func(string) string { return "" }, &out, io.Discard); err != nil || !strings.Contains(out.String(), "cluster  run several servers") {
			t.Fatalf("error %v, usage:\n%s", err, out.String())
		}
	})
}

// firstFrameVia opens GET /events at base, resuming from lastID unless it
// is "", and returns the server that answered, the first frame's id and
// its data; it closes the stream.
func firstFrameVia(ctx context.Context, t *testing.T, base, lastID string) (server, id, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /events: %d", res.StatusCode)
	}
	r := bufio.NewReader(res.Body)
	var lines []string
	frame := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream's first frame: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case line == "event: frame":
			frame = true
		case strings.HasPrefix(line, "data: "):
			lines = append(lines, line[6:])
		case line == "" && frame:
			return res.Header.Get(web.ServerHeader), id, strings.Join(lines, "\n")
		case line == "":
			id, lines = "", nil
		}
	}
}

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
		// (web/payments.go): the door must close the client's as the
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

func TestParsePublicAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{":8080", "[::]:8080"},
		{"192.168.1.20:8080", "192.168.1.20:8080"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
	} {
		if a, err := parsePublicAddr(tc.in); err != nil || a.String() != tc.want {
			t.Errorf("%q: %v %v, want %s", tc.in, a, err, tc.want)
		}
	}
	for _, bad := range []string{"8080", "laptop.local:8080", "1.2.3.4:0", "1.2.3.4:http", ":70000"} {
		if _, err := parsePublicAddr(bad); err == nil || !strings.Contains(err.Error(), "-public-addr must be an IP address and a port") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}

// TestClusterServersThatCannotStart: when the servers cannot reach the
// database, the cluster says which exited before serving and why, and
// exits 1 without serving.
func TestClusterServersThatCannotStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := ln.Addr().String()
	ln.Close() // a database that refuses connections
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary(t), "cluster", "-servers", "2", "-addr", "127.0.0.1:0",
		"-db", "postgres://nobody:x@"+nowhere+"/paytwice").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("%v, want exit status 1:\n%s", err, out)
	}
	for _, want := range []string{"s1 | paytwice: postgres", "server s1 exited before serving (exit status 1)", "server s2 exited before serving (exit status 1)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "paytwice is serving on") {
		t.Errorf("the front door served without servers:\n%s", out)
	}
}

// TestKilledClusterTakesItsServersAlong kills the cluster's own process
// with SIGKILL, which it cannot handle: on Linux its servers are told by
// the kernel and stop too, freeing their ports.
func TestKilledClusterTakesItsServersAlong(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(ctx, t, binary(t), dbURL, "-servers", "2")
	c.kill(t)
	for name, u := range c.servers {
		poll(ctx, t, name+" to stop with its cluster", func() bool {
			conn, err := net.Dial("tcp", strings.TrimPrefix(u, "http://"))
			if err == nil {
				conn.Close()
			}
			return err != nil
		})
	}
}

func TestBoundPools(t *testing.T) {
	for _, c := range []struct {
		url       string
		n         int
		want      string
		wantPool  int
		wantTotal int // at most, over all servers: a pool and two listeners each
	}{
		{"postgres://u:p@127.0.0.1:5432/pay", 1, "postgres://u:p@127.0.0.1:5432/pay?pool_max_conns=16", 16, 90},
		{"postgres://u:p@127.0.0.1:5432/pay?sslmode=disable", 3, "postgres://u:p@127.0.0.1:5432/pay?pool_max_conns=16&sslmode=disable", 16, 90},
		{"postgres://u:p@127.0.0.1:5432/pay", 16, "postgres://u:p@127.0.0.1:5432/pay?pool_max_conns=3", 3, 90},
		{"postgres://u:p@127.0.0.1:5432/pay?pool_max_conns=40", 3, "postgres://u:p@127.0.0.1:5432/pay?pool_max_conns=40", 0, 0},
	} {
		got, pool := boundPools(c.url, c.n)
		if got != c.want || pool != c.wantPool {
			t.Errorf("boundPools(%q, %d) = %q, %d; want %q, %d", c.url, c.n, got, pool, c.want, c.wantPool)
		}
		if total := c.n * (pool + 2); pool > 0 && total > c.wantTotal {
			t.Errorf("%d servers with pools of %d hold up to %d connections, over %d", c.n, pool, total, c.wantTotal)
		}
	}
}

// TestStopChildrenKillsEveryServerThatOutlivesTheLimit: servers that
// ignore SIGTERM are all killed once the limit has passed, not only the
// first one waited for.
func TestStopChildrenKillsEveryServerThatOutlivesTheLimit(t *testing.T) {
	var children []*child
	for _, name := range []string{"s1", "s2"} {
		// SIGTERM stays ignored across exec; 20 s is far past the limit.
		cmd := exec.Command("sh", "-c", "trap '' TERM; echo ready; exec sleep 20")
		ready, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// It ignores SIGTERM once it says so.
		if _, err := bufio.NewReader(ready).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		c := &child{name: name, cmd: cmd, exited: make(chan struct{})}
		go func() { c.waitErr = cmd.Wait(); close(c.exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.exited })
		children = append(children, c)
	}
	var stderr bytes.Buffer
	err := stopChildren(children, &lockedLines{stdout: io.Discard, stderr: &stderr}, 100*time.Millisecond)
	for _, name := range []string{"s1", "s2"} {
		if !strings.Contains(stderr.String(), "server "+name+" did not stop within 100ms; killing it") {
			t.Errorf("%s was not killed:\n%s", name, stderr.String())
		}
		if err == nil || !strings.Contains(err.Error(), "server "+name+": signal: killed") {
			t.Errorf("the error does not say %s was killed: %v", name, err)
		}
	}
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
