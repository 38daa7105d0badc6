package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	var servers []*process
	for range 3 {
		servers = append(servers, startServer(ctx, t, bin, url, "-lock-timeout", lockTimeout.String()))
	}
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
		for _, e := range swept(ctx, t, s) {
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

// swept returns the keys a server's sweeper closed, periodically or on
// demand, as its timeline shows them.
func swept(ctx context.Context, t *testing.T, s *process) []live.Event {
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
		if e.Kind == live.Swept {
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
