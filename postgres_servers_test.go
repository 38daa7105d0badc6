package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
	"paytwice/store/postgres/pgtest"
)

// TestSameKeyStormOnThreeServers runs the real binary three times on one
// PostgreSQL database and sends every key's requests to all three at
// once, with a slow gateway so that they overlap. Nothing in one
// process's memory can stop the second charge here: each key must still
// be charged exactly once, every 201 must name that charge, and every
// server must replay it afterwards.
func TestSameKeyStormOnThreeServers(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	servers := startServers(ctx, t, bin, url)
	// Slow every gateway call.
	patchFaults(ctx, t, `{"gateway":{"latency_ms":150}}`, servers...)

	const (
		keys             = 8
		requestsPerServe = 3 // per key and server
	)
	type answer struct {
		status   int
		chargeID string
	}
	var mu sync.Mutex
	answers := map[string][]answer{}
	send := func(s *process, key string) {
		body := fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, key, 4200)
		r := s.do(ctx, http.MethodPost, "/v1/payments", key, body)
		var a answer
		if r.err != nil {
			t.Errorf("%s: %v", key, r.err)
			return
		}
		a.status = r.status
		if a.chargeID = chargeID(r); r.status == http.StatusCreated && a.chargeID == "" {
			t.Errorf("%s: a 201 without a charge: %s", key, r.body)
		}
		mu.Lock()
		answers[key] = append(answers[key], a)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("storm-%d", k)
		for _, s := range servers {
			for range requestsPerServe {
				wg.Go(func() { send(s, key) })
			}
		}
	}
	wg.Wait()
	// Once the storm is over, every server replays each key's charge.
	for k := range keys {
		for _, s := range servers {
			send(s, fmt.Sprintf("storm-%d", k))
		}
	}
	if t.Failed() {
		return
	}

	conflicts := 0
	for key, as := range answers {
		charged := ""
		for _, a := range as {
			switch a.status {
			case http.StatusCreated:
				if charged != "" && a.chargeID != charged {
					t.Errorf("%s: 201s name two charges, %s and %s", key, charged, a.chargeID)
				}
				charged = a.chargeID
			case http.StatusConflict: // the first request was still running
				conflicts++
			default:
				t.Errorf("%s: status %d", key, a.status)
			}
		}
		if last := as[len(as)-1]; last.status != http.StatusCreated {
			t.Errorf("%s: the replay after the storm answered %d", key, last.status)
		}
	}

	t.Logf("%d requests answered 409 while their key's first request was at the gateway", conflicts)

	checkBooks(ctx, t, connect(ctx, t, url), keys)
}

// TestKillOneOfThreeServers runs the real binary three times on one
// PostgreSQL database and double-clicks payments across them, each click
// of a pair on another server, with a slow gateway. One server is killed
// with SIGKILL while keys are started, then started again. Its orphans
// are closed by a sweeper as soon as one runs: the life that claimed them
// has ended with its process; after that,
// every client that retries gets a 201, every 201 names the one charge of
// its key, and the charges and the gateway's records agree one for one.
func TestKillOneOfThreeServers(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	// A short lock timeout: the orphans are closed once it has really
	// passed. The gateway time-out is half of it, the gateway's latency
	// less again, and long enough that the keys server 0 holds when the
	// test decides to kill it are still at the gateway when the kill
	// lands: the check and the kill take a few hundred milliseconds on a
	// loaded machine, which a latency of 200 ms did not always outlast.
	const lockTimeout = 3 * time.Second
	servers := startServers(ctx, t, bin, url, "-lock-timeout", lockTimeout.String())
	patchFaults(ctx, t, `{"gateway":{"latency_ms":700}}`, servers...)
	conn := connect(ctx, t, url)
	startedOn := func() int { return count(ctx, t, conn, startedKeys) }

	const (
		workers           = 9
		paymentsPerWorker = 8 // bounds the load whatever happens
	)
	var (
		mu      sync.Mutex
		sent    = map[string]string{}   // key → body
		seen201 = map[string][]string{} // key → charge ids of the 201s seen
		killed  = make(chan struct{})
	)
	// Which claims are server 0's: one payment through it alone names the
	// server id its claims carry, so that the kill below can wait for keys
	// server 0 itself holds (the other two answer theirs, whatever happens
	// to server 0).
	const probe = "kill-probe"
	sent[probe] = `{"order_id":"kill-probe","amount_satang":999}`
	if r := servers[0].do(ctx, http.MethodPost, "/v1/payments", probe, sent[probe]); r.status != http.StatusCreated {
		t.Fatalf("probe payment: %d %s %v", r.status, r.body, r.err)
	}
	var server0 string
	if err := conn.QueryRow(ctx, `SELECT claimed_by FROM idempotency_keys WHERE key = $1`, probe).Scan(&server0); err != nil {
		t.Fatal(err)
	}
	heldBy0 := func() int { return count(ctx, t, conn, startedKeys+` AND claimed_by = $1`, server0) }
	record := func(key string, r result) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.err != nil: // the server died under the request
		case r.status == http.StatusCreated:
			seen201[key] = append(seen201[key], chargeID(r))
		case r.status != http.StatusConflict:
			t.Errorf("key %s: unexpected %d %s", key, r.status, r.body)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range paymentsPerWorker {
				key := fmt.Sprintf("kill-%d-%d", w, i)
				body := fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, key, 1000+w*100+i)
				mu.Lock()
				sent[key] = body
				mu.Unlock()
				// A double-click whose two requests a load balancer sent to
				// two different servers.
				var click sync.WaitGroup
				for _, s := range []*process{servers[w%3], servers[(w+1)%3]} {
					click.Go(func() { record(key, s.do(ctx, http.MethodPost, "/v1/payments", key, body)) })
				}
				click.Wait()
				select {
				case <-killed:
					if w%3 == 0 || (w+1)%3 == 0 {
						return // this worker's clicks reach the dead server
					}
				default:
				}
			}
		})
	}
	// Kill server 0 once a first wave has been answered and server 0 itself
	// holds started keys: their requests are at the gateway. The wait is
	// bounded (by a minute, not a count of tries, which a loaded machine
	// can run through before the moment); the check below says if the
	// moment never came. The keys it
	// left are counted at once: the other servers' sweepers may rightly
	// close them once they have been held for the lock timeout, which a
	// slow machine can reach before the other clients are done.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		mu.Lock()
		answered := len(seen201)
		mu.Unlock()
		if answered >= workers && heldBy0() >= 1 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	servers[0].kill(t)
	killedAt := time.Now()
	startedAtKill := heldBy0()
	close(killed)
	wg.Wait()
	mu.Lock()
	t.Logf("%d keys sent, %d answered 201, %d keys of the killed server started at the kill", len(sent), len(seen201), startedAtKill)
	mu.Unlock()
	if startedAtKill == 0 {
		t.Fatal("the kill left no key started: the test did not catch requests in flight")
	}

	// The killed server comes back on the same database under its name,
	// as a new life: its start-up sweep, and any other server's sweep,
	// close what its previous life left started.
	servers[0] = startServer(ctx, t, bin, url, "-lock-timeout", lockTimeout.String(), "-name", serverName(0))
	sweep := func() {
		if r := servers[1].do(ctx, http.MethodPost, "/api/sweep", "", ""); r.status != http.StatusOK {
			t.Fatalf("sweep: %d %s %v", r.status, r.body, r.err)
		}
	}
	for startedOn() != 0 && ctx.Err() == nil {
		sweep()
		time.Sleep(100 * time.Millisecond)
	}
	if n := startedOn(); n != 0 {
		t.Fatalf("%d keys still started", n)
	}
	t.Logf("the killed server's keys closed %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	// Every client retries its key on some server and gets a 201.
	i := 0
	for key, body := range sent {
		s := servers[i%3]
		i++
		r := s.do(ctx, http.MethodPost, "/v1/payments", key, body)
		if r.err != nil || r.status != http.StatusCreated {
			t.Fatalf("retry of %s: %v %d %s", key, r.err, r.status, r.body)
		}
		record(key, r)
	}

	for key, ids := range seen201 {
		var chargeIDs []string
		rows, err := conn.Query(ctx, `SELECT id FROM charges WHERE idempotency_key = $1`, key)
		if err != nil {
			t.Fatal(err)
		}
		if chargeIDs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(chargeIDs) != 1 {
			t.Fatalf("key %s: %d charges, want 1", key, len(chargeIDs))
		}
		for _, id := range ids {
			if id != chargeIDs[0] {
				t.Fatalf("key %s: a client saw charge %s, the database holds %s", key, id, chargeIDs[0])
			}
		}
	}
	checkBooks(ctx, t, conn, len(sent))
}

// patchFaults changes the switches through the first of servers and
// waits until every one of them runs with the result: the servers on one
// database share one room, and the others learn of a change by a
// notification.
func patchFaults(ctx context.Context, t *testing.T, body string, servers ...*process) {
	t.Helper()
	r := servers[0].do(ctx, http.MethodPatch, "/api/faults", "", body)
	var want pay.Faults
	if r.status != http.StatusOK || json.Unmarshal(r.body, &want) != nil {
		t.Fatalf("PATCH /api/faults %s: %d %s %v", body, r.status, r.body, r.err)
	}
	for _, s := range servers[1:] {
		poll(ctx, t, "the switches on "+s.url, func() bool {
			var got pay.Faults
			r := s.do(ctx, http.MethodGet, "/api/faults", "", "")
			return r.status == http.StatusOK && json.Unmarshal(r.body, &got) == nil && got == want
		})
	}
}

// connect opens a connection of the test's own to the servers' database,
// to read the books behind their backs.
func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// startedKeys counts the keys whose outcome nobody has saved yet.
const startedKeys = `SELECT count(*) FROM idempotency_keys WHERE status = 'started'`

// count runs a query that counts something.
func count(ctx context.Context, t *testing.T, conn *pgx.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// checkBooks fails the test unless the database holds want charges, no
// two for one key, no key is left started, and the gateway holds exactly
// the same charges: one for each, with its reference and amount. The
// server passes the gateway its scope and key joined by "|".
func checkBooks(ctx context.Context, t *testing.T, conn *pgx.Conn, want int) {
	t.Helper()
	var local, keys, gateway, matched, started int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges),
		(SELECT count(DISTINCT (scope, idempotency_key)) FROM charges),
		(SELECT count(*) FROM gateway.charges),
		(SELECT count(*) FROM charges c JOIN gateway.charges g ON g.key = c.scope || '|' || c.idempotency_key
			AND g.id = c.gateway_ref AND g.amount_satang = c.amount_satang),
		(SELECT count(*) FROM idempotency_keys WHERE status = 'started')`).Scan(&local, &keys, &gateway, &matched, &started); err != nil {
		t.Fatal(err)
	}
	if local != want || keys != want || gateway != want || matched != want || started != 0 {
		t.Fatalf("%d charges for %d keys, %d at the gateway, %d matching, %d keys started; want %d, %d, %d, %d and 0",
			local, keys, gateway, matched, started, want, want, want, want)
	}
}
