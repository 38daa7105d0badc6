package web

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"paytwice/web/room"
)

// TestPuzzleOnTheNoKeyChapter: the chapter with no key has its puzzle
// too. Step mode holds two requests of one order; the presenter starts the
// puzzle and lets the later one finish first, then the earlier: with no
// key read, each goes to the gateway and the books hold two charges, so
// the puzzle is solved in those two steps, as the books say. A chapter
// whose mistake no order of requests shows has no puzzle, and the refusal
// names those that have one.
func TestPuzzleOnTheNoKeyChapter(t *testing.T) {
	waitsOnRealClocks(t)
	const token = "teach-sched-nokey"
	env := puzzleEnv(t, token, "no-key")
	presenter := env.asPresenter(token)
	first := env.payAsync("nokey-1", "N-1")
	a := env.waitHeld("received")
	second := env.payAsync("nokey-1", "N-1")
	b := env.waitHeld("received")
	if r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a}); r.Status != http.StatusOK {
		t.Fatalf("start the puzzle: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPost, "/api/step/finish", StepTarget{Request: b}); r.Status != http.StatusOK {
		t.Fatalf("finish the later request: %d %s", r.Status, r.Body)
	}
	wantStatus(t, second, http.StatusCreated)
	if p := waitPuzzle(t, env, "the books counted the later request's charge", func(p room.Puzzle) bool { return p.Charges == 1 }); p.Solved {
		t.Fatalf("after one request's charge: %+v, want it not solved", p)
	}
	if r := presenter(http.MethodPost, "/api/step/finish", StepTarget{Request: a}); r.Status != http.StatusOK {
		t.Fatalf("finish the earlier request: %d %s", r.Status, r.Body)
	}
	wantStatus(t, first, http.StatusCreated)
	p := waitSolved(t, env)
	if p.SolvedSteps != 2 || p.Charges != 2 {
		t.Fatalf("solved: %+v, want 2 steps and the books' 2 charges", p)
	}
	chs, err := env.Server.db.ChargesByOrder(context.Background(), p.Scope, "N-1")
	if err != nil || len(chs) != 2 {
		t.Fatalf("the books hold %d charges for N-1 (%v)", len(chs), err)
	}

	if r := presenter(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "retry-every-4xx"}); r.Status != http.StatusOK {
		t.Fatalf("next chapter: %d %s", r.Status, r.Body)
	}
	r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "“no idempotency key”, “check first, then insert” and “a lock in memory”") {
		t.Fatalf("a puzzle on a chapter without one: %d %s, want 400 naming the chapters that have one", r.Status, r.Body)
	}
}
