package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store/postgres/pgtest"
	"paytwice/web"
)

// TestRoomOnThreeServers runs the real binary three times on one
// PostgreSQL database: switches flipped through one server and a lesson
// started through another are what every server shows and what its
// requests run with, and a server started afterwards joins the class as
// it is.
func TestRoomOnThreeServers(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := binary(t)
	servers := startServers(ctx, t, bin, url)
	get := func(s *process, path string, into any) {
		r := s.do(ctx, http.MethodGet, path, "", "")
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s %v", path, r.status, r.body, r.err)
		}
		if err := json.Unmarshal(r.body, into); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	faults := func(s *process) (f pay.Faults) { get(s, "/api/faults", &f); return f }
	lesson := func(s *process) (l web.LessonsState) { get(s, "/api/lessons", &l); return l }

	patchFaults(ctx, t, `{"server":{"server_error":true},"gateway":{"latency_ms":25}}`, servers[0])
	for _, s := range servers {
		poll(ctx, t, "the switches on "+s.url, func() bool {
			f := faults(s)
			return f.Server.ServerError && f.Gateway.LatencyMS == 25
		})
	}
	// A payment through the third server runs with them: a saved 500.
	if r := servers[2].do(ctx, http.MethodPost, "/v1/payments", "room-1", `{"order_id":"room-1","amount_satang":100}`); r.status != http.StatusInternalServerError {
		t.Fatalf("payment on the third server with server_error on: %d %s %v", r.status, r.body, r.err)
	}

	if r := servers[1].do(ctx, http.MethodPut, "/api/lessons/current", "", `{"slug":"response-lost"}`); r.status != http.StatusOK {
		t.Fatalf("PUT /api/lessons/current: %d %s %v", r.status, r.body, r.err)
	}
	servers = append(servers, startServer(ctx, t, bin, url)) // joins after the lesson started
	for _, s := range servers {
		poll(ctx, t, "the lesson on "+s.url, func() bool {
			f := faults(s)
			return lesson(s).Current == "response-lost" && f.Server.ResponseLost && !f.Server.ServerError && f.Gateway.LatencyMS == 0
		})
	}
	conn := connect(ctx, t, url)
	if n := count(ctx, t, conn, `SELECT count(*) FROM charges`); n != 0 {
		t.Fatalf("%d charges after the lesson's reset", n)
	}
}
