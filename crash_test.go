package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/web"
)

// TestCrashRecovery builds the real binary, runs it on a temporary
// database with a slow gateway, kills it with SIGKILL while payments are
// in flight, and starts it again on the same file. After the start-up
// sweep no key may be started, every 201 a client saw must stand for
// exactly one charge, and our charges must match the gateway's one for
// one.
func TestCrashRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := binary(t)
	dbPath := filepath.Join(dir, "crash.db")

	// 1. First life: a slow gateway, double-clicked payments, SIGKILL.
	first := startServer(ctx, t, bin, dbPath)
	if r := first.do(ctx, http.MethodPatch, "/api/faults", "", `{"gateway":{"latency_ms":300}}`); r.status != http.StatusOK {
		t.Fatalf("PATCH /api/faults: %d %s", r.status, r.body)
	}

	const (
		workers         = 12
		paymentsPerWork = 15 // bounds the load whatever happens
		// Kill once a whole wave of payments has been answered and at
		// least half of the next wave's keys are claimed: those requests
		// are at the gateway.
		killAfterKeys   = workers
		killWhenStarted = workers / 2
	)
	var (
		mu      sync.Mutex
		sent    []string                // every key some request carried
		bodies  = map[string]string{}   // key → its body
		seen201 = map[string][]string{} // key → charge ids of the 201s seen
	)
	enough := make(chan struct{})
	var enoughOnce sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range paymentsPerWork {
				key := fmt.Sprintf("crash-%02d-%02d", w, i)
				body := fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, key, 1000+w*100+i)
				mu.Lock()
				sent = append(sent, key)
				bodies[key] = body
				mu.Unlock()
				// A double click: two requests with one key, at once.
				var click sync.WaitGroup
				var dead bool
				for range 2 {
					click.Go(func() {
						r := first.do(ctx, http.MethodPost, "/v1/payments", key, body)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case r.err != nil:
							dead = true
						case r.status == http.StatusCreated:
							var ch struct {
								ID string `json:"charge_id"`
							}
							_ = json.Unmarshal(r.body, &ch)
							seen201[key] = append(seen201[key], ch.ID)
							if len(seen201) >= killAfterKeys {
								enoughOnce.Do(func() { close(enough) })
							}
						case r.status != http.StatusConflict:
							t.Errorf("key %s: unexpected %d %s", key, r.status, r.body)
						}
					})
				}
				click.Wait()
				if dead || ctx.Err() != nil {
					return // the server is gone
				}
			}
		})
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("the server never answered enough payments")
	}
	// Watch the file from here (SQLite lets a second process read it) and
	// kill as soon as enough keys are started. The wait is bounded (by a
	// minute, which a loaded machine under -race does not come near): if
	// the moment never comes, the kill happens anyway and the check below
	// reports it.
	watch, err := store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		started, _, err := watch.KeyCounts(ctx)
		if err != nil || started >= killWhenStarted {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	first.kill(t)
	watch.Close()
	wg.Wait()

	// The crash left keys started: their requests were at the gateway.
	db, err := store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	startedAtCrash, _, err := db.KeyCounts(ctx)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("at the crash: %d keys sent, %d answered 201, %d keys left started", len(sent), len(seen201), startedAtCrash)
	mu.Unlock()
	if startedAtCrash == 0 {
		t.Fatal("the kill left no key started: the test did not catch requests in flight")
	}

	// 2. Second life: the keys left started are found before the server
	// serves and closed while it does; it says when that is done.
	second := startServer(ctx, t, bin, dbPath)
	select {
	case <-second.startupDone:
	case <-second.exited:
		t.Fatalf("the server exited: %s", second.stderr.String())
	case <-ctx.Done():
		t.Fatalf("the server never said its start-up work was done:\n%s", second.stdout.String())
	}
	// It said what it closed, one line per key the crash left started.
	if n := strings.Count(second.stdout.String(), "start-up sweep: key "); n != startedAtCrash {
		t.Fatalf("the start-up sweep reported %d keys, want %d:\n%s", n, startedAtCrash, second.stdout.String())
	}
	// Every client whose request died retries with its key: it must end
	// with 201, charged once, whether the sweep found the charge or not.
	for _, key := range sent {
		mu.Lock()
		had := len(seen201[key]) > 0
		mu.Unlock()
		if had {
			continue
		}
		r := second.do(ctx, http.MethodPost, "/v1/payments", key, bodies[key])
		if r.err != nil || r.status != http.StatusCreated {
			t.Fatalf("retry of %s after the restart: %v %d %s", key, r.err, r.status, r.body)
		}
	}
	second.stop(t)

	// 3. The books, read from the file once the process is gone.
	db, err = store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	started, done, err := db.KeyCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if started != 0 {
		t.Fatalf("%d keys still started after the restart", started)
	}
	if done != len(sent) {
		t.Fatalf("%d keys done, want one per key sent (%d)", done, len(sent))
	}
	for key, ids := range seen201 {
		cs, err := db.ChargesByOrder(ctx, web.AnonymousScope, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 {
			t.Fatalf("key %s: a client saw 201, the database holds %d charges", key, len(cs))
		}
		for _, id := range ids {
			if id != cs[0].ID {
				t.Fatalf("key %s: a client saw charge %s, the database holds %s", key, id, cs[0].ID)
			}
		}
	}
	local, err := db.RecentCharges(ctx, 10*len(sent)+10)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := store.Open(gatewayPath(dbPath), store.Options{Schema: pay.SchemaLedger})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	gateway, err := ledger.CountGatewayCharges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(local) != gateway || len(local) != len(sent) {
		t.Fatalf("%d local charges, %d at the gateway, %d keys sent: they must all agree", len(local), gateway, len(sent))
	}
	for _, c := range local {
		// The server passes the gateway its scope and key joined by "|".
		g, ok, err := ledger.LookupGatewayCharge(ctx, c.Scope+"|"+c.Key)
		if err != nil || !ok || g.ID != c.GatewayRef || g.AmountSatang != c.AmountSatang {
			t.Fatalf("local charge %+v has no matching gateway charge (%+v, %v, %v)", c, g, ok, err)
		}
	}
}

// process is one run of the binary.
type process struct {
	cmd    *exec.Cmd
	url    string
	client *http.Client
	stdout *syncBuffer // its lines up to the URL, at least
	stderr *syncBuffer
	exited chan struct{}
	// startupDone is closed when the server says its start-up work (the
	// sweep of what an earlier life left started) is done.
	startupDone chan struct{}
}

// startServer runs the binary on a free loopback port and waits until it
// prints its URL, which it does once it serves.
func startServer(ctx context.Context, t *testing.T, bin, dbPath string, flags ...string) *process {
	t.Helper()
	// Flags given later win over the defaults here.
	return startProcess(ctx, t, bin, append([]string{"-addr", "127.0.0.1:0", "-db", dbPath, "-lock-timeout", "30s"}, flags...)...)
}

// startProcess runs the binary with args, without the test's PAYTWICE_*
// variables, and waits until it prints a line that is a URL.
func startProcess(ctx context.Context, t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYTWICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	p := &process{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{}), startupDone: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.stdout.Write(append(sc.Bytes(), '\n'))
			if strings.HasPrefix(sc.Text(), "start-up work done ") {
				close(p.startupDone)
			}
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "http://") {
				select {
				case urls <- line:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	select {
	case p.url = <-urls:
	case <-p.exited:
		t.Fatalf("the server exited before serving: %s", p.stderr.String())
	case <-ctx.Done():
		t.Fatalf("the server did not start: %s", p.stderr.String())
	}
	// One connection per request: Go's transport would otherwise resend a
	// keyed request on its own when a kept-alive connection dies.
	p.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
	return p
}

type result struct {
	status int
	body   []byte
	err    error
}

// do sends one request; key "" sends no Idempotency-Key.
func (p *process) do(ctx context.Context, method, path, key, body string) result {
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := p.client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return result{status: res.StatusCode, body: b, err: err}
}

// kill sends SIGKILL: no deferred function, no shutdown, no flush.
func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// stop asks the server to shut down and waits, killing it if it hangs.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("the server did not shut down: %s", p.stderr.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
