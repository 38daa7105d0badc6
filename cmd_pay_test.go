package main

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/web"
	"paytwice/web/live"
)

// payTarget is a real server on 127.0.0.1 over a real SQLite file, with
// its sweeper running on a short lock timeout, so that an outcome only the
// sweeper can learn is learnt within a test (newPayTarget).
type payTarget struct {
	t   testing.TB
	url string
	srv *web.Server
	db  *store.DB
}

func newPayTarget(t testing.TB) *payTarget {
	t.Helper()
	return newPayTargetWithLock(t, time.Second)
}

// newPayTargetWithLock is a payTarget whose lock timeout is lockTimeout.
// A request's work after its claim is bounded by half of it: a test that
// needs no sweeper and asserts what a client saw gives it minutes, since
// on a loaded machine a payment's work can outlast half a second and be
// answered 504, its key left started (409) until the sweeper closes it.
func newPayTargetWithLock(t testing.TB, lockTimeout time.Duration) *payTarget {
	t.Helper()
	clock := sim.NewClock(time.Now)
	db, err := store.Open(filepath.Join(t.TempDir(), "paytwice.db"), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := web.NewServer(web.Config{Ledger: db, LockTimeout: lockTimeout, SweepEvery: 500 * time.Millisecond, Logger: log.New(io.Discard, "", 0)}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan struct{})
	go func() { defer close(jobs); srv.Jobs().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-jobs; hs.Close(); srv.Close(); db.Close() })
	return &payTarget{t: t, url: hs.URL, srv: srv, db: db}
}

func (p *payTarget) setFaults(body string) {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, p.url+"/api/faults", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		p.t.Fatalf("PUT /api/faults %s: %d", body, res.StatusCode)
	}
}

// received counts the payment requests with the key that reached the
// server, from its own timeline.
func (p *payTarget) received(key string) int {
	n := 0
	for _, e := range p.srv.Hub().Recent(live.DefaultSize) {
		if e.Event.Kind == live.Received && e.Event.Key == key {
			n++
		}
	}
	return n
}

var attemptLine = regexp.MustCompile(`(?m)^attempt \d+  key \S+  (.*)$`)

func TestPayCommandTellsWhatTheServerDid(t *testing.T) {
	target := newPayTarget(t)
	pay := func(t *testing.T, faults, key string, extra ...string) (string, []string, error) {
		t.Helper()
		target.setFaults(faults)
		before := target.received(key)
		args := append([]string{"pay", "-url", target.url, "-order", "O-" + key, "-key", key, "-base", "10ms", "-cap", "20ms"}, extra...)
		out, _, err := runCmd(t, args...)
		target.setFaults(`{}`)
		var attempts []string
		for _, m := range attemptLine.FindAllStringSubmatch(out, -1) {
			attempts = append(attempts, m[1])
		}
		// Every attempt the server saw is printed, and no other: each
		// goes on a connection of its own, so none is sent again behind
		// the command's back.
		if n := target.received(key) - before; n != len(attempts) {
			t.Fatalf("the server saw %d attempts, the command printed %d:\n%s", n, len(attempts), out)
		}
		return out, attempts, err
	}

	t.Run("a saved 500 is sent once, and the order is looked up and found paid", func(t *testing.T) {
		out, attempts, err := pay(t, `{"server":{"server_error":true}}`, "k-500")
		if err == nil || len(attempts) != 1 || !strings.HasPrefix(attempts[0], "500") {
			t.Fatalf("error %v, output:\n%s", err, out)
		}
		if !strings.Contains(out, "order O-k-500: 1 charge(s) recorded, so it is paid") {
			t.Errorf("no look-up in:\n%s", out)
		}
	})
	t.Run("a replay ends the payment", func(t *testing.T) {
		out, attempts, err := pay(t, `{}`, "k-500")
		if err == nil || len(attempts) != 1 || !strings.Contains(attempts[0], "replayed") || !strings.Contains(out, "final") {
			t.Fatalf("error %v, output:\n%s", err, out)
		}
	})
	t.Run("a lost response is retried with the key and answered by the replay", func(t *testing.T) {
		out, attempts, err := pay(t, `{"server":{"response_lost":true}}`, "k-lost")
		if err != nil || len(attempts) != 2 || !strings.HasPrefix(attempts[0], "no response") || !strings.Contains(attempts[1], "201 Created  (replayed") {
			t.Fatalf("error %v, output:\n%s", err, out)
		}
	})
	t.Run("a 504's Retry-After is waited in full, and the retry finds the charge the sweeper recorded", func(t *testing.T) {
		out, attempts, err := pay(t, `{"gateway":{"timeout":true}}`, "k-504")
		if err != nil || len(attempts) < 2 || !strings.HasPrefix(attempts[0], "504") || !strings.Contains(attempts[0], "Retry-After 2 s") ||
			!strings.Contains(attempts[len(attempts)-1], "201 Created  (replayed") {
			t.Fatalf("error %v, output:\n%s", err, out)
		}
	})
	t.Run("a crash midway: the 409s say when the sweeper can close the key, and the command waits for it", func(t *testing.T) {
		out, attempts, err := pay(t, `{"server":{"crash_midway":true}}`, "k-crash")
		if err != nil || !strings.HasPrefix(attempts[0], "no response") || !strings.Contains(attempts[len(attempts)-1], "201 Created  (replayed") {
			t.Fatalf("error %v, output:\n%s", err, out)
		}
	})
	t.Run("a budget too short for the server's hint stops, and the order is looked up", func(t *testing.T) {
		out, attempts, err := pay(t, `{"gateway":{"timeout":true}}`, "k-budget", "-budget", "500ms")
		if err == nil || len(attempts) != 1 || !strings.Contains(out, "stopped after 1 attempts without a final answer") || !strings.Contains(out, "order O-k-budget: ") {
			t.Fatalf("error %v, output:\n%s", err, out)
		}
	})
}
