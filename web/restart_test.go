package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// restartable is a server on a SQLite file and a fixed loopback address
// that a test stops and starts again, as a teacher restarts paytwice: the
// same file, the same port (the listener is closed and opened again), a
// new process's memory. It shuts down as main does.
type restartable struct {
	t    *testing.T
	path string
	cfg  Config
	addr string // host:port, fixed after the first start

	db  *store.DB
	srv *Server
	hs  *http.Server
	// served is closed when the HTTP server stops serving.
	served chan struct{}
}

func newRestartable(t *testing.T, cfg Config) *restartable {
	t.Helper()
	r := &restartable{t: t, path: filepath.Join(t.TempDir(), "class.db"), cfg: cfg, addr: "127.0.0.1:0"}
	r.start()
	t.Cleanup(func() {
		if r.srv != nil {
			r.stop()
		}
	})
	return r
}

// URL is the server's address, the same across restarts.
func (r *restartable) URL() string { return "http://" + r.addr }

// start opens the file and serves on the address.
func (r *restartable) start() {
	r.t.Helper()
	clock := sim.NewClock(nil)
	db, err := store.Open(r.path, store.Options{Now: clock.Now})
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := r.cfg
	cfg.Ledger, cfg.Peers = db, room.Stored(db)
	if cfg.Logger == nil {
		cfg.Logger = log.New(io.Discard, "", 0)
	}
	srv := NewServer(cfg, db, clock)
	if _, err := srv.Jobs().SweepOrphans(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	var ln net.Listener
	// The port was just freed by the server before: the kernel lets it be
	// bound again at once (Go sets SO_REUSEADDR); a few tries cover a
	// connection of the old server still closing.
	for try := 0; ; try++ {
		ln, err = net.Listen("tcp", r.addr)
		if err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatalf("listening on %s again: %v", r.addr, err)
	}
	r.addr = ln.Addr().String()
	r.db, r.srv = db, srv
	r.hs = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	r.served = make(chan struct{})
	go func() {
		defer close(r.served)
		if err := r.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.t.Errorf("serving: %v", err)
		}
	}()
}

// stop shuts the server down as main does on SIGTERM, and closes the file.
func (r *restartable) stop() {
	r.t.Helper()
	r.srv.EndStreams()
	r.srv.StopHeld()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := r.hs.Shutdown(ctx); err != nil {
		r.t.Errorf("shutting down: %v", err)
	}
	<-r.served
	r.srv.Close()
	if err := r.db.Close(); err != nil {
		r.t.Errorf("closing the file: %v", err)
	}
	r.srv = nil
}

// restart stops the server and starts it again on the same file and
// address.
func (r *restartable) restart() {
	r.t.Helper()
	r.stop()
	r.start()
}

// call sends a request with a JSON body ("" for none) and decodes a JSON
// answer into out (nil to skip).
func (r *restartable) call(method, path, body string, out any, headers ...string) int {
	r.t.Helper()
	req, err := http.NewRequest(method, r.URL()+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

// TestRoomSurvivesRestartOnSQLite changes everything the presenter sets,
// restarts the server on the same file, and finds the room as it was: the
// chapter and its lab mode, step mode, the fault switches, the clock's
// offset and the count of resets.
func TestRoomSurvivesRestartOnSQLite(t *testing.T) {
	r := newRestartable(t, Config{})
	if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"new-key-per-retry"}`, nil); code != http.StatusOK {
		t.Fatalf("starting a chapter: %d", code)
	}
	if code := r.call(http.MethodPut, "/api/step", `{"on":true}`, nil); code != http.StatusOK {
		t.Fatalf("step mode on: %d", code)
	}
	if code := r.call(http.MethodPatch, "/api/faults", `{"server":{"delay_ms":300}}`, nil); code != http.StatusOK {
		t.Fatalf("a switch: %d", code)
	}
	if code := r.call(http.MethodPost, "/api/clock/advance", `{"seconds":90}`, nil); code != http.StatusOK {
		t.Fatalf("advancing the clock: %d", code)
	}
	before := r.srv.room.Load()
	if before.Lesson != "new-key-per-retry" || !before.Step || !before.Lab.Client.NewKeyPerRetry || before.Faults.Server.DelayMS != 300 ||
		before.ClockOffset < 90*time.Second || before.Resets == 0 {
		t.Fatalf("the room before the restart is not what was set: %+v", before)
	}

	for i := range 2 { // twice: loading the kept room again changes nothing
		r.restart()
		after := r.srv.room.Load()
		if after.Lesson != before.Lesson || after.Step != before.Step || after.Lab != before.Lab || after.Faults != before.Faults ||
			after.ClockOffset != before.ClockOffset || after.Resets != before.Resets || after.LessonRuns != before.LessonRuns {
			t.Fatalf("restart %d: the room is\n%+v\nwant\n%+v", i+1, after, before)
		}
		var st StepState
		if code := r.call(http.MethodGet, "/api/step", "", &st); code != http.StatusOK || !st.On {
			t.Fatalf("restart %d: GET /api/step: %d %+v, want step mode on", i+1, code, st)
		}
		if !r.srv.payments.steps.On() {
			t.Fatalf("restart %d: the room says step mode, the server does not hold payments", i+1)
		}
		var ls LessonsState
		if code := r.call(http.MethodGet, "/api/lessons", "", &ls); code != http.StatusOK || ls.Current != before.Lesson {
			t.Fatalf("restart %d: GET /api/lessons: %d, current %q, want %q", i+1, code, ls.Current, before.Lesson)
		}
	}
}

// TestStepModeAfterARestartIsTheSameOnBothStores turns step mode on,
// restarts the server, and finds it on: on SQLite (the room in the file)
// as on PostgreSQL (the room's row). A payment sent after the restart is
// held, not charged.
func TestStepModeAfterARestartIsTheSameOnBothStores(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		r := newRestartable(t, Config{})
		if code := r.call(http.MethodPut, "/api/step", `{"on":true}`, nil); code != http.StatusOK {
			t.Fatalf("step mode on: %d", code)
		}
		r.restart()
		assertHoldsAfterRestart(t, r.srv, r.URL())
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		open := func() (*Server, string) {
			clock := sim.NewClock(nil)
			pg, err := postgres.Open(context.Background(), url, postgres.Options{Now: clock.Now, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			srv := NewServer(Config{Ledger: pg, Peers: pg, Logger: log.New(io.Discard, "", 0)}, pg, clock)
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(func() { srv.StopHeld(); hs.Close(); srv.Close(); pg.Close() })
			return srv, hs.URL
		}
		first, _ := open()
		if err := first.payments.steps.Turn(true, "test"); err != nil {
			t.Fatal(err)
		}
		first.StopHeld()
		first.Close()
		second, url2 := open()
		assertHoldsAfterRestart(t, second, url2)
	})
}

// assertHoldsAfterRestart checks that srv, just started, has step mode
// on and holds a payment instead of charging it.
func assertHoldsAfterRestart(t *testing.T, srv *Server, base string) {
	t.Helper()
	if !srv.payments.steps.On() {
		t.Fatal("step mode is off after the restart")
	}
	sub := srv.hub.Subscribe(srv.hub.LastSeq())
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(`{"order_id":"R-1","amount_satang":100}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "after-restart")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		entries, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("no payment held after the restart: %v", err)
		}
		for _, e := range entries {
			if e.Kind == step.KindHeld {
				return
			}
			if e.Kind == live.Charged {
				t.Fatal("charged before the presenter stepped it")
			}
		}
	}
}

// TestSweepCountSurvivesARestartOnBothStores: a sweep closes a key the
// crash left started; after a restart, on SQLite (the room in the file)
// as on PostgreSQL (the room's row), the sweeper's report still counts
// it as closed in the room, and a reset starts the count again.
func TestSweepCountSurvivesARestartOnBothStores(t *testing.T) {
	send := func(t *testing.T, base, method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if path == "/v1/payments" {
			req.Header.Set("Idempotency-Key", "swept-1")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error()) // the crash drops the payment's connection
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	sweep := func(t *testing.T, base string) SweepReport {
		t.Helper()
		code, b := send(t, base, http.MethodPost, "/api/sweep", "")
		var rep SweepReport
		if code != http.StatusOK || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("POST /api/sweep: %d %s", code, b)
		}
		return rep
	}
	// leaveOneSwept crashes a payment midway and sweeps its key.
	leaveOneSwept := func(t *testing.T, base string) {
		t.Helper()
		if code, b := send(t, base, http.MethodPut, "/api/faults", `{"server":{"crash_midway":true}}`); code != http.StatusOK {
			t.Fatalf("PUT /api/faults: %d %s", code, b)
		}
		send(t, base, http.MethodPost, "/v1/payments", `{"order_id":"W-1","amount_satang":100}`)
		if code, b := send(t, base, http.MethodPost, "/api/clock/advance", `{"seconds":120}`); code != http.StatusOK {
			t.Fatalf("advancing the clock: %d %s", code, b)
		}
		if rep := sweep(t, base); len(rep.Closed) != 1 || rep.ClosedInRoom != 1 {
			t.Fatalf("the sweep of the crashed key: %+v, want 1 closed, 1 in the room", rep)
		}
	}
	// afterRestart checks the count on the restarted server, then resets.
	afterRestart := func(t *testing.T, base string) {
		t.Helper()
		if rep := sweep(t, base); len(rep.Closed) != 0 || rep.ClosedInRoom != 1 {
			t.Fatalf("after the restart: %+v, want none closed now and 1 in the room", rep)
		}
		if code, b := send(t, base, http.MethodPost, "/api/reset", ""); code != http.StatusOK {
			t.Fatalf("reset: %d %s", code, b)
		}
		if rep := sweep(t, base); rep.ClosedInRoom != 0 {
			t.Fatalf("after a reset: %+v, want 0 in the room", rep)
		}
	}
	t.Run("SQLite", func(t *testing.T) {
		r := newRestartable(t, Config{})
		leaveOneSwept(t, r.URL())
		r.restart()
		afterRestart(t, r.URL())
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		open := func() (*Server, string) {
			clock := sim.NewClock(nil)
			pg, err := postgres.Open(context.Background(), url, postgres.Options{Now: clock.Now, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			srv := NewServer(Config{Ledger: pg, Peers: pg, Logger: log.New(io.Discard, "", 0)}, pg, clock)
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(func() { hs.Close(); srv.Close(); pg.Close() })
			return srv, hs.URL
		}
		first, url1 := open()
		leaveOneSwept(t, url1)
		first.Close()
		_, url2 := open()
		afterRestart(t, url2)
	})
}

// TestWatchTicksSurviveARestartOnSQLite ticks two of a chapter's "Watch
// for" items with real payments, restarts the server on the same file,
// and finds the board and the checkout showing the same two ticks, by the
// same row; the chapter started again shows none.
func TestWatchTicksSurviveARestartOnSQLite(t *testing.T) {
	r := newRestartable(t, Config{})
	if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`, nil); code != http.StatusOK {
		t.Fatalf("starting a chapter: %d", code)
	}
	seenOn := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(r.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		page := string(b)
		row := ""
		if i := strings.Index(page, `class="watch-item seen"`); i >= 0 {
			if j := strings.Index(page[i:], `data-row="`); j >= 0 {
				row, _, _ = strings.Cut(page[i+j+len(`data-row="`):], `"`)
			}
		}
		if path == "/" {
			return strings.Count(page, `<span class="badge ok">seen</span>`), row
		}
		return strings.Count(page, `class="watch-item seen"`), row
	}
	sub := r.srv.hub.Subscribe(r.srv.hub.LastSeq())
	for _, key := range []string{"tick-1", "tick-2"} { // two keys, one order: charged twice
		if code := r.call(http.MethodPost, "/v1/payments", `{"order_id":"T-1","amount_satang":100}`, nil, "Idempotency-Key", key); code != http.StatusCreated {
			t.Fatalf("payment %s: %d", key, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var row string
	for {
		n, rw := seenOn("/board")
		if n == 2 {
			row = rw
			break
		}
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("the board shows %d items ticked, want 2: %v", n, err)
		}
	}
	if !strings.HasPrefix(row, "tl-rq_") {
		t.Fatalf("the first tick names row %q", row)
	}

	r.restart()
	if n, rw := seenOn("/board"); n != 2 || rw != row {
		t.Fatalf("after the restart the board shows %d items ticked (first by %q), want 2 (by %q)", n, rw, row)
	}
	if n, _ := seenOn("/"); n != 2 {
		t.Fatalf("after the restart the checkout shows %d items ticked, want 2", n)
	}
	if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`, nil); code != http.StatusOK {
		t.Fatalf("starting the chapter again: %d", code)
	}
	if n, _ := seenOn("/board"); n != 0 {
		t.Fatalf("the chapter started again shows %d items ticked", n)
	}
	r.restart()
	if n, _ := seenOn("/board"); n != 0 {
		t.Fatalf("the chapter started again shows %d items ticked after a restart", n)
	}
}
