package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// TestPuzzleStepModeOffIsNotSolved: on the check-then-insert chapter the
// presenter steps both held requests of one order past the key's lookup,
// then turns step mode off; the requests insert on their own and the
// books hold two charges, but the class scheduled nothing after those
// two steps: the puzzle ends saying step mode was turned off, not solved,
// with no steps scored, on the API, the board's panel and the export.
func TestPuzzleStepModeOffIsNotSolved(t *testing.T) {
	waitsOnRealClocks(t) // a server of its own, its requests held by step mode
	const token = "teach-sched-off"
	env := puzzleEnv(t, token, "check-then-insert")
	presenter := env.asPresenter(token)
	first := env.payAsync("sched-off", "P-1")
	a := env.waitHeld("received")
	second := env.payAsync("sched-off", "P-1")
	b := env.waitHeld("received")
	startAndStepPastTheLookup(t, env, presenter, a, b)
	if r := presenter(http.MethodPut, "/api/step", map[string]bool{"on": false}); r.Status != http.StatusOK {
		t.Fatalf("step mode off: %d %s", r.Status, r.Body)
	}
	wantStatus(t, first, http.StatusCreated)
	wantStatus(t, second, http.StatusCreated)
	wantReleasedNotSolved(t, env, token, room.StepModeOffReleased)
}

// waitTwoChargesJudged waits, bounded, until the judge, which counts the
// books after each charge, has seen the puzzle's order charged twice (or,
// wrongly, solved the puzzle), and returns the puzzle then.
func waitTwoChargesJudged(t *testing.T, env *stepEnv) room.Puzzle {
	t.Helper()
	return waitPuzzle(t, env, "the books' two charges never reached the puzzle", func(p room.Puzzle) bool {
		return p.Solved || p.Charges >= 2 && !p.Unknown
	})
}

// TestPuzzleTimeLimitIsNotSolved: on the check-then-insert chapter the
// presenter steps both held requests of one order past the key's lookup
// and steps no more; step mode's time limit (its timer replaced, so the
// test lets it pass at will) lets both go on by themselves and the books
// hold two charges, which nobody scheduled: the puzzle ends saying the
// time limit let a request go, not solved, with no steps scored, on the
// API, the board's panel and the export.
func TestPuzzleTimeLimitIsNotSolved(t *testing.T) {
	waitsOnRealClocks(t) // a server of its own, its requests held by step mode
	const token = "teach-sched-limit"
	env := puzzleEnv(t, token, "check-then-insert")
	limit := make(chan time.Time)
	env.Server.payments.steps.After = func(time.Duration) <-chan time.Time { return limit }
	presenter := env.asPresenter(token)
	first := env.payAsync("sched-limit", "P-1")
	a := env.waitHeld("received")
	second := env.payAsync("sched-limit", "P-1")
	b := env.waitHeld("received")
	startAndStepPastTheLookup(t, env, presenter, a, b)
	close(limit) // both holds reach the limit; neither is held again
	wantStatus(t, first, http.StatusCreated)
	wantStatus(t, second, http.StatusCreated)
	wantReleasedNotSolved(t, env, token, room.TimeLimitReleased)
}

// TestPuzzleClientGoneIsNotSolved: on the check-then-insert chapter the
// presenter steps both held requests of one order past the key's lookup;
// then the client of the second goes away (a tab closed) and it goes on
// by itself, and the presenter finishes the first: the books hold two
// charges, but the class scheduled only one of them, so the puzzle ends
// saying the client went away, not solved, with no steps scored.
func TestPuzzleClientGoneIsNotSolved(t *testing.T) {
	waitsOnRealClocks(t) // a server of its own, its requests held by step mode
	const token = "teach-sched-gone"
	env := puzzleEnv(t, token, "check-then-insert")
	presenter := env.asPresenter(token)
	first := env.payAsync("sched-gone", "P-1")
	a := env.waitHeld("received")
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.URL+"/v1/payments", strings.NewReader(`{"order_id":"P-1","amount_satang":129900}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "sched-gone")
	gone := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		gone <- err
	}()
	b := env.waitHeld("received")
	startAndStepPastTheLookup(t, env, presenter, a, b)
	hangUp()
	if err := <-gone; err == nil {
		t.Fatal("the second request was answered, not cut off by its client")
	}
	// It goes on by itself, once the puzzle knows (the hook runs before
	// the resumed event).
	env.waitOwn("the second request going on as its client went away", func(ev live.Event) bool {
		return ev.Kind == step.KindResumed && ev.Request == b && ev.Message == "the client went away"
	})
	if r := presenter(http.MethodPost, "/api/step/finish", StepTarget{Request: a}); r.Status != http.StatusOK {
		t.Fatalf("finish %s: %d %s", a, r.Status, r.Body)
	}
	wantStatus(t, first, http.StatusCreated)
	wantReleasedNotSolved(t, env, token, room.ClientGoneReleased)
}

// wantReleasedNotSolved waits until the books' two charges reach the
// puzzle and checks that it ended released for reason: not solved, no
// steps scored, on the puzzle's API, the board's panel and the export.
func wantReleasedNotSolved(t *testing.T, env *stepEnv, token, reason string) {
	t.Helper()
	p := waitTwoChargesJudged(t, env)
	if p.Solved || p.SolvedSteps != 0 || p.Released != reason || p.Charges != 2 {
		t.Fatalf("the puzzle: %+v, want released (%s), not solved, the books' 2 charges", p, reason)
	}
	if r := env.get("/api/puzzle"); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"solved":false`) || !strings.Contains(string(r.Body), reason) {
		t.Fatalf("the puzzle's API: %d %s", r.Status, r.Body)
	}
	board := env.get("/poll/live", PresenterHeader, token)
	if !strings.Contains(string(board.Body), "Not solved. "+reason+": the books hold 2 charges") || strings.Contains(string(board.Body), "Solved in") {
		t.Fatalf("the board's panel: %d %.3000s", board.Status, board.Body)
	}
	if exp := env.get("/api/timeline.json", PresenterHeader, token); !strings.Contains(string(exp.Body), "not solved: "+reason) || strings.Contains(string(exp.Body), "solved in") {
		t.Fatalf("the export: %.3000s", exp.Body)
	}
}

// startAndStepPastTheLookup starts the puzzle on the held request a's
// order and steps a, then b, past the key's lookup, where each waits
// again: the check-then-insert race set up, both about to insert.
func startAndStepPastTheLookup(t *testing.T, env *stepEnv, presenter func(method, path string, body any) response, a, b string) {
	t.Helper()
	if r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a}); r.Status != http.StatusOK {
		t.Fatalf("start the puzzle: %d %s", r.Status, r.Body)
	}
	for _, id := range []string{a, b} {
		if r := presenter(http.MethodPost, "/api/step/next", StepTarget{Request: id}); r.Status != http.StatusOK {
			t.Fatalf("next %s: %d %s", id, r.Status, r.Body)
		}
		if got := env.waitHeld("key looked up"); got != id {
			t.Fatalf("held at the lookup: %s, want %s", got, id)
		}
	}
}
