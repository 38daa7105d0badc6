package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
)

// TestKilledInStepModeAnswersSoonAfterRestart: on PostgreSQL, a server
// holds a payment in step mode past the key's claim (its key started,
// its work lease renewed while it waits), and is killed with SIGKILL.
// The key's claim names the life of the server that took it, and that
// life has ended with its process: once the server is started again, a
// retry of the key gets a definite answer within 10 s, not 409 for as
// long as the dead life's lease and the lock time-out run (30 s here, the
// default).
func TestKilledInStepModeAnswersSoonAfterRestart(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := binary(t)
	flags := []string{"-lock-timeout", "30s", "-name", "s1"}
	s := startServer(ctx, t, bin, url, flags...)
	if r := s.do(ctx, http.MethodPut, "/api/step", "", `{"on":true}`); r.status != http.StatusOK {
		t.Fatalf("step mode on: %d %s %v", r.status, r.body, r.err)
	}
	const key, body = "held-at-kill", `{"order_id":"K-1","amount_satang":4200}`
	go s.do(ctx, http.MethodPost, "/v1/payments", key, body) // held, then cut by the kill

	conn := connect(ctx, t, url)
	started := func() int {
		return count(ctx, t, conn, `SELECT count(*) FROM idempotency_keys WHERE key = $1 AND status = 'started'`, key)
	}
	// Let the held request go on, one checkpoint at a time, until its key
	// is claimed: then it waits at the next checkpoint with the key
	// started and its lease renewed.
	for i := 0; started() == 0; i++ {
		if i == 200 || ctx.Err() != nil {
			t.Fatal("the held payment never claimed its key")
		}
		var st struct {
			Held []struct {
				Request, Checkpoint string
			} `json:"held"`
		}
		r := s.do(ctx, http.MethodGet, "/api/step", "", "")
		if r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
			t.Fatalf("GET /api/step: %d %s", r.status, r.body)
		}
		if len(st.Held) == 1 {
			s.do(ctx, http.MethodPost, "/api/step/next", "", "")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var leaseLeft float64
	if err := conn.QueryRow(ctx, `SELECT extract(epoch FROM work_until - clock_timestamp()) FROM idempotency_keys WHERE key = $1`, key).Scan(&leaseLeft); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed with the key started and %.1f s of its work lease left", leaseLeft)
	s.kill(t)

	s = startServer(ctx, t, bin, url, flags...)
	restarted := time.Now()
	// Step mode is the room's and may outlive the restart: the retry below
	// is meant to meet the key, not to be held itself.
	if r := s.do(ctx, http.MethodPut, "/api/step", "", `{"on":false}`); r.status != http.StatusOK {
		t.Fatalf("step mode off: %d %s %v", r.status, r.body, r.err)
	}
	conflicts := 0
	for {
		r := s.do(ctx, http.MethodPost, "/v1/payments", key, body)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.status != http.StatusConflict {
			if r.status != http.StatusCreated {
				t.Fatalf("the retry: %d %s", r.status, r.body)
			}
			break
		}
		conflicts++
		if since := time.Since(restarted); since > 10*time.Second {
			t.Fatalf("the key still answers 409 %s after the restart (%d times): the dead life's claim holds it", since.Round(time.Millisecond), conflicts)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("a definite answer %s after the restart, after %d 409s", time.Since(restarted).Round(time.Millisecond), conflicts)
	checkBooks(ctx, t, conn, 1)
}
