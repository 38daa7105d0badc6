package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
	"paytwice/web"
	"paytwice/web/live"
)

// TestSweeperOnThreeServers runs the real binary three times on one
// PostgreSQL database with every payment crashing right after the gateway
// charged it, so that every key is left started with money taken. The
// keys are claimed on all three servers one after another, so that they
// come due one after another, and all three servers' sweepers go for
// them at once: their own periodic sweeps and POST /api/sweep sent to the
// three together. Each key must be closed by exactly one server, with
// the gateway's charge recorded once; the sweeping must be shared out
// between the servers, and cross from the server that claimed a key to
// another.
func TestSweeperOnThreeServers(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	// Short enough that the test waits for it in real time.
	const lockTimeout = 2 * time.Second
	servers := startServers(ctx, t, bin, url, "-lock-timeout", lockTimeout.String())
	// The gateway's latency spreads the claims, and so the moments the
	// keys come due, over more than a second.
	patchFaults(ctx, t, `{"server":{"crash_midway":true},"gateway":{"latency_ms":100}}`, servers...)
	conn := connect(ctx, t, url)

	const keys = 15
	bodies := map[string]string{}
	for i := range keys {
		key := fmt.Sprintf("sweep-%02d", i)
		bodies[key] = fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, key, 500+i)
		if r := servers[i%3].do(ctx, http.MethodPost, "/v1/payments", key, bodies[key]); r.err == nil {
			t.Fatalf("%s: the crash midway answered %d %s", key, r.status, r.body)
		}
	}
	if n := count(ctx, t, conn, startedKeys); n != keys {
		t.Fatalf("%d keys started after the crashes, want %d", n, keys)
	}
	if n := count(ctx, t, conn, `SELECT count(*) FROM gateway.charges`); n != keys {
		t.Fatalf("the gateway holds %d charges after the crashes, want %d", n, keys)
	}

	poll(ctx, t, "every key closed by a sweeper", func() bool {
		sweepAll(ctx, t, servers...)
		return count(ctx, t, conn, startedKeys) == 0
	})

	// The servers' timelines say who closed what.
	closedBy := map[string][]int{} // key → every server that closed it
	sweptCharge := map[string]string{}
	for i, s := range servers {
		for _, e := range swept(ctx, t, s, serverName(i)) {
			closedBy[e.Key] = append(closedBy[e.Key], i)
			sweptCharge[e.Key] = e.Charge
			if e.Sweep != live.SweepCharged {
				t.Errorf("server %d: %s swept %q, want %q: the gateway had charged", i, e.Key, e.Sweep, live.SweepCharged)
			}
		}
	}
	perServer := make([]int, len(servers))
	for key := range bodies {
		if len(closedBy[key]) != 1 {
			t.Errorf("%s closed by servers %v, want exactly one", key, closedBy[key])
			continue
		}
		perServer[closedBy[key][0]]++
	}
	t.Logf("keys closed by each server: %v", perServer)

	// The timelines alone cannot show two servers closing one key: the
	// fencing token turns the second close into a silent no-op. The sweep
	// owner can: every key a server closed must have been taken by that
	// server's sweeper alone, and never retaken by another since. And
	// somewhere a server's sweeper closed a key another server claimed.
	owners := map[int]map[string]bool{} // server → sweep owners of the keys it closed
	rows, err := conn.Query(ctx, `SELECT key, coalesce(sweep_owner, '') FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, owner string
		if err := rows.Scan(&key, &owner); err != nil {
			t.Fatal(err)
		}
		if by := closedBy[key]; len(by) == 1 {
			if owners[by[0]] == nil {
				owners[by[0]] = map[string]bool{}
			}
			owners[by[0]][owner] = true
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	closerOf := map[string]int{} // sweep owner → the server that closed its keys
	for i, taken := range owners {
		if len(taken) != 1 {
			t.Errorf("the keys server %d closed were taken by sweepers %v, want one: its own", i, taken)
		}
		for o := range taken {
			if j, ok := closerOf[o]; ok {
				t.Errorf("servers %d and %d closed keys taken by the same sweeper %q", j, i, o)
			}
			if o == "" {
				t.Errorf("server %d closed a key that no sweeper took", i)
			}
			closerOf[o] = i
		}
	}
	if len(owners) < 2 {
		t.Errorf("only %d server(s) closed keys: the sweeping was not shared", len(owners))
	}
	if n := count(ctx, t, conn, `SELECT count(*) FROM idempotency_keys WHERE sweep_owner <> claimed_by`); n == 0 {
		t.Error("every key was closed by the server that claimed it: no sweeper closed another server's key")
	}

	// Every server replays each key's one charge, the one its sweeper
	// recorded.
	for key, body := range bodies {
		for i, s := range servers {
			r := s.do(ctx, http.MethodPost, "/v1/payments", key, body)
			if id := chargeID(r); r.err != nil || r.status != http.StatusCreated || id != sweptCharge[key] {
				t.Errorf("%s on server %d: %d %s %v, want the 201 of the swept charge %s", key, i, r.status, r.body, r.err, sweptCharge[key])
			}
		}
	}
	checkBooks(ctx, t, conn, keys)
}

// TestSweepersOnOtherServersLeaveALiveRequestAlone holds one request's
// key started on one server, in the delay fault, for longer than a sweep
// period, while the room's demo clock runs an hour ahead and the other
// two servers' sweepers are asked again and again. They only know that
// the key has not really been held for the lock timeout, and that must
// be enough: no sweeper takes the key from its live request, which
// answers with the charge it made.
func TestSweepersOnOtherServersLeaveALiveRequestAlone(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	// The gateway time-out is half the lock timeout: 10 s, longer than the
	// delay, which is longer than the servers' 5 s sweep period.
	const (
		lockTimeout = 20 * time.Second
		delay       = 7 * time.Second
	)
	servers := startServers(ctx, t, bin, url, "-lock-timeout", lockTimeout.String())
	holder, others := servers[0], servers[1:]
	patchFaults(ctx, t, fmt.Sprintf(`{"server":{"delay_ms":%d}}`, delay.Milliseconds()), holder)
	conn := connect(ctx, t, url)

	const key = "held-by-a-live-request"
	answered := make(chan result, 1)
	go func() {
		answered <- holder.do(ctx, http.MethodPost, "/v1/payments", key, `{"order_id":"live-1","amount_satang":700}`)
	}()
	poll(ctx, t, "the key claimed", func() bool { return count(ctx, t, conn, startedKeys) == 1 })
	// The servers share the demo clock: each of the other two moves it half
	// an hour, so that each has applied the whole hour itself before its
	// sweeps, whenever the room's notifications arrive.
	for _, s := range others {
		if r := s.do(ctx, http.MethodPost, "/api/clock/advance", "", `{"seconds":1800}`); r.status != http.StatusOK {
			t.Fatalf("clock advance: %d %s %v", r.status, r.body, r.err)
		}
	}
	var answer result
	poll(ctx, t, "the delayed request's answer", func() bool {
		for i, rep := range sweepAll(ctx, t, others...) {
			for _, k := range rep.Closed {
				t.Errorf("server %d's sweeper closed %s (%s) while its request was running", i+1, k.Key, k.Outcome)
			}
		}
		select {
		case answer = <-answered:
			return true
		default:
			return false
		}
	})

	if id := chargeID(answer); id == "" {
		t.Fatalf("the delayed request answered %d %s %v, want 201", answer.status, answer.body, answer.err)
	}
	for i, s := range servers {
		if e := swept(ctx, t, s, serverName(i)); len(e) != 0 {
			t.Errorf("server %d swept %v", i, e)
		}
	}
	// Not even taken: a sweeper other than the claiming server's own never
	// marked the key as its to close.
	if n := count(ctx, t, conn, `SELECT count(*) FROM idempotency_keys
		WHERE key = $1 AND status = 'done' AND response_status = 201 AND coalesce(sweep_owner, claimed_by) = claimed_by`, key); n != 1 {
		t.Errorf("the key is not done with its own 201, or another server's sweeper took it")
	}
	checkBooks(ctx, t, conn, 1)
}

// TestKilledServersKeysSweptByTheOthers kills one of three servers with
// SIGKILL while it holds started keys of both kinds: some the gateway had
// charged (a crash midway before the kill), some still in the delay
// fault, not charged. The killed server's life has ended with its
// process: the two survivors' sweepers close each of its keys exactly
// once, well before the lock timeout, recording the charges the gateway
// took and releasing the rest. The killed server
// comes back on the same database, and every client retrying its key
// there gets one charge: the swept one, or a fresh one for a released
// key.
func TestKilledServersKeysSweptByTheOthers(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	// The gateway time-out is half the lock timeout: 4 s, longer than
	// the delay, which holds the uncharged keys until the kill.
	const (
		lockTimeout = 8 * time.Second
		delay       = 3 * time.Second
		perKind     = 5 // keys left charged, and keys left uncharged
	)
	servers := startServers(ctx, t, bin, url, "-lock-timeout", lockTimeout.String())
	victim, survivors := servers[0], servers[1:]
	conn := connect(ctx, t, url)

	firstClaim := time.Now()
	bodies := map[string]string{}
	charged := map[string]bool{} // by the gateway before the kill
	patchFaults(ctx, t, `{"server":{"crash_midway":true}}`, victim)
	for i := range perKind {
		key := fmt.Sprintf("charged-%d", i)
		bodies[key], charged[key] = fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, key, 800+i), true
		if r := victim.do(ctx, http.MethodPost, "/v1/payments", key, bodies[key]); r.err == nil {
			t.Fatalf("%s: the crash midway answered %d %s", key, r.status, r.body)
		}
	}
	patchFaults(ctx, t, fmt.Sprintf(`{"server":{"crash_midway":false,"delay_ms":%d}}`, delay.Milliseconds()), victim)
	var inFlight sync.WaitGroup
	for i := range perKind {
		key := fmt.Sprintf("delayed-%d", i)
		body := fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, key, 900+i)
		bodies[key] = body
		inFlight.Go(func() {
			if r := victim.do(ctx, http.MethodPost, "/v1/payments", key, body); r.err == nil {
				t.Errorf("%s: answered %d %s by a server killed before its delay ended", key, r.status, r.body)
			}
		})
	}
	poll(ctx, t, "every key started", func() bool { return count(ctx, t, conn, startedKeys) == len(bodies) })
	victim.kill(t)
	killedAt := time.Now()
	inFlight.Wait()

	poll(ctx, t, "the killed server's keys closed", func() bool {
		sweepAll(ctx, t, survivors...)
		return count(ctx, t, conn, startedKeys) == 0
	})
	if took, held := time.Since(killedAt), time.Since(firstClaim); took >= lockTimeout/2 {
		t.Fatalf("the killed server's keys closed %s after the kill (held %s): its ended life should have freed them at the first sweep", took, held)
	} else {
		t.Logf("the killed server's keys closed %s after the kill, %s after the first claim (lock timeout %s)", took.Round(time.Millisecond), held.Round(time.Millisecond), lockTimeout)
	}

	sweptCharge := map[string]string{}
	closed := map[string]int{}
	for i, s := range survivors {
		for _, e := range swept(ctx, t, s, serverName(i+1)) {
			closed[e.Key]++
			want := live.SweepReleased
			if charged[e.Key] {
				want = live.SweepCharged
				sweptCharge[e.Key] = e.Charge
			}
			if e.Sweep != want {
				t.Errorf("server %d swept %s: %q, want %q", i+1, e.Key, e.Sweep, want)
			}
		}
	}
	for key := range bodies {
		if closed[key] != 1 {
			t.Errorf("%s closed %d times by the survivors, want once", key, closed[key])
		}
	}

	victim = startServer(ctx, t, bin, url, "-lock-timeout", lockTimeout.String(), "-name", "s1-again")
	// PUT turns off every switch it does not name: the retries run clean.
	if r := victim.do(ctx, http.MethodPut, "/api/faults", "", `{}`); r.status != http.StatusOK {
		t.Fatalf("PUT /api/faults: %d %s %v", r.status, r.body, r.err)
	}
	for key, body := range bodies {
		r := victim.do(ctx, http.MethodPost, "/v1/payments", key, body)
		id := chargeID(r)
		switch {
		case id == "":
			t.Errorf("retry of %s: %d %s %v, want 201", key, r.status, r.body, r.err)
		case charged[key] && id != sweptCharge[key]:
			t.Errorf("retry of %s: charge %s, want the swept charge %s", key, id, sweptCharge[key])
		}
	}
	if e := swept(ctx, t, victim, "s1-again"); len(e) != 0 {
		t.Errorf("the restarted server swept %v", e)
	}
	checkBooks(ctx, t, conn, len(bodies))
}

// poll calls done until it reports true, a few times a second, and fails
// the test if ctx ends first.
func poll(ctx context.Context, t *testing.T, what string, done func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// sweepAll sends POST /api/sweep to every server at once and returns each
// one's report, in the servers' order.
func sweepAll(ctx context.Context, t *testing.T, servers ...*process) []web.SweepReport {
	t.Helper()
	reports := make([]web.SweepReport, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			r := s.do(ctx, http.MethodPost, "/api/sweep", "", "")
			if r.err != nil || r.status != http.StatusOK {
				t.Errorf("POST /api/sweep: %d %s %v", r.status, r.body, r.err)
				return
			}
			if err := json.Unmarshal(r.body, &reports[i]); err != nil {
				t.Errorf("POST /api/sweep: %v in %s", err, r.body)
			}
		})
	}
	wg.Wait()
	return reports
}

// startServers starts three servers on the database at url, named by
// serverName.
func startServers(ctx context.Context, t *testing.T, bin, url string, flags ...string) []*process {
	t.Helper()
	var servers []*process
	for i := range 3 {
		servers = append(servers, startServer(ctx, t, bin, url, slices.Concat(flags, []string{"-name", serverName(i)})...))
	}
	return servers
}

// serverName names the i-th server of startServers, from 0: s1, s2, s3.
func serverName(i int) string { return fmt.Sprintf("s%d", i+1) }

// swept returns the keys the sweeper of the server called name closed,
// periodically or on demand, as its timeline shows them. Every server's
// timeline shows the other servers' events too, so it keeps the ones
// that carry its name.
func swept(ctx context.Context, t *testing.T, s *process, name string) []live.Event {
	t.Helper()
	r := s.do(ctx, http.MethodGet, "/api/timeline.json", "", "")
	var export web.TimelineExport
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /api/timeline.json: %d %v", r.status, r.err)
	}
	if err := json.Unmarshal(r.body, &export); err != nil {
		t.Fatalf("GET /api/timeline.json: %v", err)
	}
	var out []live.Event
	for _, e := range export.Events {
		if e.Kind == live.Swept && e.Server == name {
			out = append(out, e)
		}
	}
	return out
}

// chargeID is the charge a 201 names, "" for any other answer.
func chargeID(r result) string {
	if r.err != nil || r.status != http.StatusCreated {
		return ""
	}
	var ch struct {
		ID string `json:"charge_id"`
	}
	_ = json.Unmarshal(r.body, &ch)
	return ch.ID
}
