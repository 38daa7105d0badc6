package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/web/room"
)

// testEnv is a real server on 127.0.0.1 over a real SQLite file, with a
// manual clock.
type testEnv struct {
	t      *testing.T // nil in benchmarks
	tb     testing.TB
	URL    string
	DB     *store.DB
	Server *Server
	Clock  *sim.ManualClock
	HTTP   *httptest.Server
}

// fullRun reports whether the tests run in full: PAYTWICE_TEST_FULL=1,
// which .ci/run sets. A full run adds the browser tests outside the quick
// run's smoke set (browserFullOnly) and the repetitions a quick run
// samples.
func fullRun() bool { return os.Getenv("PAYTWICE_TEST_FULL") == "1" }

// picturesWanted reports whether the documentation's pictures are asked
// for (PAYTWICE_SCREENSHOTS) or the run is a full one: a quick run
// leaves out the screenshots a test takes along the way.
func picturesWanted() bool { return os.Getenv("PAYTWICE_SCREENSHOTS") != "" || fullRun() }

// picturesOnly skips t, a test that takes the documentation's pictures
// and checks only that they render, unless pictures are asked for
// (PAYTWICE_SCREENSHOTS) or the run is a full one.
func picturesOnly(t *testing.T) {
	t.Helper()
	if !picturesWanted() {
		t.Skip("takes the documentation's pictures: runs with PAYTWICE_SCREENSHOTS=dir or PAYTWICE_TEST_FULL=1 (as .ci/run sets)")
	}
}

// MustOpenDB opens a store on a fresh file in the test's temp dir.
func MustOpenDB(tb testing.TB, now func() time.Time) *store.DB {
	tb.Helper()
	db, err := store.Open(filepath.Join(tb.TempDir(), "paytwice.db"), store.Options{Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// newTestEnv starts a server; cfg may be the zero Config.
func newTestEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	env := newTestEnvTB(t, cfg)
	env.t = t
	return env
}

// newTestEnvTB is newTestEnv for benchmarks too.
func newTestEnvTB(t testing.TB, cfg Config) *testEnv {
	t.Helper()
	mc := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	clock := sim.NewClock(mc.Now)
	db := MustOpenDB(t, clock.Now)
	if cfg.Logger == nil {
		cfg.Logger = log.New(io.Discard, "", 0)
	}
	if cfg.Ledger == nil {
		cfg.Ledger = db
	}
	srv := NewServer(cfg, db, clock)
	hs := httptest.NewServer(srv.Handler()) // listens on 127.0.0.1
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return &testEnv{tb: t, URL: hs.URL, DB: db, Server: srv, Clock: mc, HTTP: hs}
}

// response is a finished HTTP exchange.
type response struct {
	Status int
	Header http.Header
	Body   []byte
	// Err is why there is no answer (Status 0): the client's error.
	Err error
}

func (r response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.Body, err)
	}
	return m
}

// pay posts a payment body with the given key ("" sends no header) and
// extra headers given as name, value pairs.
func (e *testEnv) pay(key, body string, headers ...string) response {
	e.t.Helper()
	r, err := e.tryPay(key, body, headers...)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *testEnv) tryPay(key, body string, headers ...string) (response, error) {
	req, err := http.NewRequest(http.MethodPost, e.URL+"/v1/payments", bytes.NewBufferString(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	return do(req)
}

func do(req *http.Request) (response, error) {
	res, err := apiClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}, err
}

// get fetches a path.
func (e *testEnv) get(path string, headers ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r, err := do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// charges counts the charges in the database.
func (e *testEnv) charges() int {
	e.tb.Helper()
	n, err := e.Server.db.CountCharges(context.Background()) // whatever the store: SQLite or PostgreSQL
	if err != nil {
		e.tb.Fatal(err)
	}
	return n
}

// blockingGateway makes every gateway charge wait until release is
// closed, so a test can hold a key in the started state.
func (e *testEnv) holdGateway() (release func()) {
	ch := make(chan struct{})
	e.Server.world.gateway.SetSleep(func(ctx context.Context, d time.Duration) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	// A latency makes the gateway sleep, which the sleep above holds.
	if _, _, err := e.Server.room.Change(context.Background(), func(r *room.State) error {
		r.Faults.Gateway.LatencyMS = max(r.Faults.Gateway.LatencyMS, 1)
		return nil
	}); err != nil {
		e.tb.Fatal(err)
	}
	return func() { close(ch) }
}
