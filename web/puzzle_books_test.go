package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/room"
)

// silentBooks is the server's store whose count of an order's charges
// fails while silent is set, as a locked or gone database does: the
// payments themselves go on.
type silentBooks struct {
	Store
	silent *atomic.Bool
}

func (s silentBooks) ChargesByOrder(ctx context.Context, scope, orderID string) ([]pay.Charge, error) {
	if s.silent.Load() {
		return nil, errors.New("database is locked")
	}
	return s.Store.ChargesByOrder(ctx, scope, orderID)
}

// waitPuzzle waits, bounded, for the room's puzzle to be as want says.
func waitPuzzle(t *testing.T, env *stepEnv, what string, want func(room.Puzzle) bool) room.Puzzle {
	t.Helper()
	deadline := time.After(waitUntilBound)
	for {
		cur, _, changed := env.Server.room.Watch()
		if p := cur.Puzzle; p != nil && want(*p) {
			return *p
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s: the puzzle is %+v", what, cur.Puzzle)
		}
	}
}

// TestPuzzleCountsItsOwnCharges: a puzzle started on an order the books
// already hold one finished charge for is not solved when one held
// request charges it (two charges in the books, one from the puzzle);
// the board words its line from the books. When the books do not answer
// the judge's count, the board says the outcome is unknown, never "not
// solved", until a later count succeeds, which solves it: the held
// requests charged the order twice.
func TestPuzzleCountsItsOwnCharges(t *testing.T) {
	waitsOnRealClocks(t) // a server and books of its own
	const token = "teach-books-1"
	var silent atomic.Bool
	mc := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	clock := sim.NewClock(mc.Now)
	db := MustOpenDB(t, clock.Now)
	srv := NewServer(Config{PresenterToken: token, Logger: log.New(io.Discard, "", 0), Ledger: db}, silentBooks{Store: db, silent: &silent}, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	env := &stepEnv{testEnv: &testEnv{t: t, tb: t, URL: hs.URL, DB: db, Server: srv, Clock: mc, HTTP: hs}}
	env.sub = srv.hub.Subscribe(srv.hub.LastSeq())
	presenter := env.asPresenter(token)
	if r := presenter(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "check-then-insert"}); r.Status != http.StatusOK {
		t.Fatalf("the chapter: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPut, "/api/step", map[string]bool{"on": true}); r.Status != http.StatusOK {
		t.Fatalf("step mode on: %d %s", r.Status, r.Body)
	}
	finish := func(id string) {
		t.Helper()
		if r := presenter(http.MethodPost, "/api/step/finish", StepTarget{Request: id}); r.Status != http.StatusOK {
			t.Fatalf("finish %s: %d %s", id, r.Status, r.Body)
		}
	}
	next := func(id string) {
		t.Helper()
		if r := presenter(http.MethodPost, "/api/step/next", StepTarget{Request: id}); r.Status != http.StatusOK {
			t.Fatalf("next %s: %d %s", id, r.Status, r.Body)
		}
		if got := env.waitHeld("key looked up"); got != id {
			t.Fatalf("held at key looked up: %s, want %s", got, id)
		}
	}
	board := func() string {
		t.Helper()
		r := env.get("/poll/live?board=1")
		var l PollLive
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &l) != nil {
			t.Fatalf("the board's panel: %d %s", r.Status, r.Body)
		}
		return l.HTML
	}

	// An earlier, finished charge of the order.
	earlier := env.payAsync("books-early", "B-1")
	finish(env.waitHeld("received"))
	wantStatus(t, earlier, http.StatusCreated)

	first := env.payAsync("books-race", "B-1")
	a := env.waitHeld("received")
	second := env.payAsync("books-race", "B-1")
	b := env.waitHeld("received")
	var ps PuzzleState
	if r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a}); r.Status != http.StatusOK || json.Unmarshal(r.Body, &ps) != nil || ps.Before != 1 || ps.Charges != 1 {
		t.Fatalf("start the puzzle on an order charged once: %d %s", r.Status, r.Body)
	}
	next(a)
	next(b)
	finish(a)
	wantStatus(t, first, http.StatusCreated)
	p := waitPuzzle(t, env, "the books counted the first held request's charge", func(p room.Puzzle) bool { return p.Charges == 2 })
	if p.Solved {
		t.Fatalf("one held request's charge solved the puzzle: %+v", p)
	}
	if h := board(); !strings.Contains(h, "the books hold 2 charges for the order, 1 of them from the held requests") || strings.Contains(h, "Solved") {
		t.Fatalf("the board after one charge from the held requests: %s", h)
	}

	// The books do not answer the count of the second's charge.
	silent.Store(true)
	finish(b)
	wantStatus(t, second, http.StatusCreated)
	p = waitPuzzle(t, env, "the books did not answer", func(p room.Puzzle) bool { return p.Unknown })
	if p.Solved || p.Charges != 2 {
		t.Fatalf("with the books silent: %+v", p)
	}
	if h := board(); !strings.Contains(h, "outcome unknown: the books did not answer") || strings.Contains(h, "have not charged it twice") {
		t.Fatalf("the board with the books silent: %s", h)
	}
	if r := env.get("/api/puzzle"); r.Status != http.StatusOK || json.Unmarshal(r.Body, &ps) != nil || !ps.Unknown || ps.Solved {
		t.Fatalf("GET /api/puzzle with the books silent: %d %s", r.Status, r.Body)
	}
	exp := env.get("/api/timeline.json", PresenterHeader, token)
	if !strings.Contains(string(exp.Body), "outcome unknown: the books did not answer") {
		t.Fatalf("the export with the books silent: %.3000s", exp.Body)
	}

	// The books answer again: the order's next charge is counted with
	// the second's, and the held requests' two solve the puzzle.
	silent.Store(false)
	third := env.payAsync("books-late", "B-1")
	finish(env.waitHeld("received"))
	wantStatus(t, third, http.StatusCreated)
	p = waitSolved(t, env)
	if p.Unknown || p.Charges != 4 || p.SolvedSteps != 5 {
		t.Fatalf("solved: %+v, want the books' 4 charges in 5 steps", p)
	}
	if h := board(); !strings.Contains(h, "Solved in 5 steps: the books hold 4 charges for the order, 3 of them from the held requests") || strings.Contains(h, "outcome unknown") {
		t.Fatalf("the board once the books answer: %s", h)
	}
	if chs, err := db.ChargesByOrder(context.Background(), p.Scope, "B-1"); err != nil || len(chs) != 4 {
		t.Fatalf("the books hold %d charges for B-1 (%v)", len(chs), err)
	}
}
