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
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
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

	t.Run("each server runs on its share of the cores", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("reads /proc")
		}
		if os.Getenv("GOMAXPROCS") != "" {
			t.Skip("GOMAXPROCS is set: the servers inherit it")
		}
		want := fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.GOMAXPROCS(0)/3))
		for name, pid := range c.pids {
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(strings.Split(string(environ), "\x00"), want) {
				t.Errorf("server %s runs without %s in its environment", name, want)
			}
		}
		if !strings.Contains(c.stdout.String(), want) {
			t.Errorf("the cluster does not say it gives each server %s:\n%s", want, c.stdout.String())
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

// openEvents opens GET /events at base, resuming after lastID unless it
// is "", and fails the test unless the stream is open (200).
func openEvents(ctx context.Context, t *testing.T, base, lastID string) *http.Response {
	t.Helper()
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
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		t.Fatalf("GET %s/events: %d", base, res.StatusCode)
	}
	return res
}

// firstFrameVia opens GET /events at base, resuming from lastID unless it
// is "", and returns the server that answered, the first frame's id and
// its data; it closes the stream.
func firstFrameVia(ctx context.Context, t *testing.T, base, lastID string) (server, id, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res := openEvents(ctx, t, base, lastID)
	defer res.Body.Close()
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

func TestServerProcs(t *testing.T) {
	for _, c := range []struct{ procs, n, want int }{
		{2, 3, 1}, {2, 2, 1}, {2, 1, 2}, {8, 3, 2}, {8, 2, 4}, {1, 16, 1}, {16, 16, 1}, {4, 0, 4},
	} {
		if got := serverProcs(c.procs, c.n); got != c.want {
			t.Errorf("serverProcs(%d, %d) = %d, want %d", c.procs, c.n, got, c.want)
		}
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
