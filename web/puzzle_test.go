package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/web/room"
)

// puzzleEnv is a server with a presenter token, on a chapter, with step
// mode on and a subscription to its events.
func puzzleEnv(t *testing.T, token, chapter string) *stepEnv {
	t.Helper()
	env := &stepEnv{testEnv: newTestEnv(t, Config{PresenterToken: token})}
	env.sub = env.Server.hub.Subscribe(env.Server.hub.LastSeq())
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: chapter}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("start %s: %d %s", chapter, r.Status, r.Body)
	}
	if r := env.send(http.MethodPut, "/api/step", map[string]bool{"on": true}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("step mode on: %d %s", r.Status, r.Body)
	}
	return env
}

// playerID is the public id of the student with the nickname.
func playerID(t *testing.T, env *stepEnv, nick string) string {
	t.Helper()
	for _, p := range env.Server.room.Load().Scores.Players {
		if p.Nick == nick {
			return p.ID
		}
	}
	t.Fatalf("no player %q", nick)
	return ""
}

// waitSolved waits, bounded, for the puzzle to be solved.
func waitSolved(t *testing.T, env *stepEnv) room.Puzzle {
	t.Helper()
	return waitPuzzle(t, env, "the puzzle was not solved", func(p room.Puzzle) bool { return p.Solved })
}

// TestPuzzleStepBar: on the check-then-insert chapter, step mode holds
// two requests of one order; the presenter starts the puzzle and gives
// the step bar to one student, who orders the held requests so that both
// look the key up before either inserts it; the books then hold two
// charges for the order, and the puzzle is solved in the steps taken.
// Only the presenter gives, bounds and takes back the bar: a student
// without it gets a 403 that says who may step, the student with it may
// step the puzzle's requests only, and nothing else of step mode.
func TestPuzzleStepBar(t *testing.T) {
	waitsOnRealClocks(t) // a server of its own, its requests held by step mode
	const token = "teach-sched-1"
	env := puzzleEnv(t, token, "check-then-insert")
	presenter := env.asPresenter(token)
	mai, bo := newPhone(t, env.URL), newPhone(t, env.URL)
	for _, p := range []struct {
		ph   *phone
		nick string
	}{{mai, "Mai"}, {bo, "Bo"}} {
		if s, b := p.ph.do(http.MethodPost, "/api/poll/nickname", PollNickname{Nickname: p.nick}); s != http.StatusOK {
			t.Fatalf("%s's nickname: %d %s", p.nick, s, b)
		}
	}

	first := env.payAsync("sched-1", "P-1")
	a := env.waitHeld("received")
	second := env.payAsync("sched-1", "P-1")
	b := env.waitHeld("received")
	other := env.payAsync("sched-other", "P-2")
	c := env.waitHeld("received")

	if r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: c}); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "a race takes two") {
		t.Fatalf("a puzzle on an order held once: %d %s", r.Status, r.Body)
	}
	if s, body := mai.do(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a}); s != http.StatusForbidden {
		t.Fatalf("a student starts the puzzle: %d %s", s, body)
	}
	if r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a}); r.Status != http.StatusOK {
		t.Fatalf("start the puzzle: %d %s", r.Status, r.Body)
	}

	// Before the bar is given, a student gets a 403 that says who steps.
	s, body := mai.do(http.MethodPost, "/api/step/next", StepTarget{Request: a})
	if s != http.StatusForbidden || !strings.Contains(string(body), "Only the presenter steps held requests, or the student the presenter gives the step bar to") {
		t.Fatalf("a student without the bar: %d %s", s, body)
	}
	if s, body := mai.do(http.MethodPost, "/api/puzzle/bar", PuzzleBar{Player: playerID(t, env, "Mai")}); s != http.StatusForbidden {
		t.Fatalf("a student takes the bar: %d %s", s, body)
	}
	if r := presenter(http.MethodPost, "/api/puzzle/bar", PuzzleBar{Player: playerID(t, env, "Mai")}); r.Status != http.StatusOK {
		t.Fatalf("give Mai the bar: %d %s", r.Status, r.Body)
	}
	s, body = bo.do(http.MethodPost, "/api/step/next", StepTarget{Request: a})
	if s != http.StatusForbidden || !strings.Contains(string(body), "gave the step bar to Mai") {
		t.Fatalf("Bo, without the bar, while Mai holds it: %d %s", s, body)
	}
	// Bounded: the puzzle's order's requests only, and nothing but Next
	// and Finish.
	if s, body := mai.do(http.MethodPost, "/api/step/next", StepTarget{Request: c}); s != http.StatusForbidden || !strings.Contains(string(body), "only") {
		t.Fatalf("Mai steps another order's request: %d %s", s, body)
	}
	for _, path := range []string{"/api/step/play", "/api/step/aim"} {
		if s, body := mai.do(http.MethodPost, path, StepAim{Request: a, Fault: "crash_midway"}); s != http.StatusForbidden {
			t.Fatalf("Mai at %s: %d %s", path, s, body)
		}
	}
	var ps PuzzleState
	if s, body := mai.do(http.MethodGet, "/api/puzzle", nil); s != http.StatusOK || json.Unmarshal(body, &ps) != nil || !ps.Mine || ps.Bar != "Mai" || ps.Steps != 0 {
		t.Fatalf("Mai's view of the puzzle: %d %s", s, body)
	}

	// The scheduler's moves: both look the key up before either inserts.
	step := func(path, id, want string) {
		t.Helper()
		s, body := mai.do(http.MethodPost, path, StepTarget{Request: id})
		if s != http.StatusOK {
			t.Fatalf("Mai %s %s: %d %s", path, id, s, body)
		}
		if want != "" {
			if got := env.waitHeld(want); got != id {
				t.Fatalf("held at %q: %s, want %s", want, got, id)
			}
		}
	}
	step("/api/step/next", a, "key looked up")
	step("/api/step/next", b, "key looked up")
	if p := env.Server.room.Load().Puzzle; p.Solved || p.Steps != 2 {
		t.Fatalf("after two steps: %+v", p)
	}
	step("/api/step/finish", a, "")
	wantStatus(t, first, http.StatusCreated)
	step("/api/step/finish", b, "")
	wantStatus(t, second, http.StatusCreated)
	p := waitSolved(t, env)
	if p.SolvedSteps != 4 || p.Charges != 2 || p.Bar != nil {
		t.Fatalf("solved: %+v, want 4 steps and the books' 2 charges, the bar back with the presenter", p)
	}
	chs, err := env.Server.db.ChargesByOrder(context.Background(), p.Scope, "P-1")
	if err != nil || len(chs) != 2 {
		t.Fatalf("the books hold %d charges for P-1 (%v)", len(chs), err)
	}
	// Solved, the bar is the presenter's again.
	if s, body := mai.do(http.MethodPost, "/api/step/next", StepTarget{Request: c}); s != http.StatusForbidden {
		t.Fatalf("Mai after the puzzle: %d %s", s, body)
	}
	if s, body := mai.do(http.MethodGet, "/poll/live", nil); s != http.StatusOK || !strings.Contains(string(body), "Solved in 4 steps") {
		t.Fatalf("Mai's panel: %d %s", s, body)
	}
	exp := env.get("/api/timeline.json", PresenterHeader, token)
	if !strings.Contains(string(exp.Body), "solved in 4 step(s): the books hold 2 charges for the order") {
		t.Fatalf("the export does not keep the puzzle: %.3000s", exp.Body)
	}
	if r := presenter(http.MethodPost, "/api/step/play", nil); r.Status != http.StatusOK {
		t.Fatalf("play: %d %s", r.Status, r.Body)
	}
	wantStatus(t, other, http.StatusCreated)

	// Revocable: a new puzzle, the bar given, then taken back.
	third := env.payAsync("sched-2", "P-3")
	d := env.waitHeld("received")
	fourth := env.payAsync("sched-2", "P-3")
	env.waitHeld("received")
	if r := presenter(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: d}); r.Status != http.StatusOK {
		t.Fatalf("the second puzzle: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPost, "/api/puzzle/bar", PuzzleBar{Player: playerID(t, env, "Bo")}); r.Status != http.StatusOK {
		t.Fatalf("give Bo the bar: %d %s", r.Status, r.Body)
	}
	// Bo names the request: "the oldest of the order" would be this
	// server's pick, not the class's.
	if s, body := bo.do(http.MethodPost, "/api/step/next", StepTarget{}); s != http.StatusBadRequest || !strings.Contains(string(body), "Name the held request to step") {
		t.Fatalf("Bo steps with no request named: %d %s, want 400 asking for it", s, body)
	}
	if p := env.Server.room.Load().Puzzle; p.Steps != 0 {
		t.Fatalf("a step with no request named was counted: %+v", p)
	}
	if s, body := bo.do(http.MethodPost, "/api/step/next", StepTarget{Request: d}); s != http.StatusOK {
		t.Fatalf("Bo steps the order's first request: %d %s", s, body)
	}
	if r := presenter(http.MethodPost, "/api/puzzle/bar", PuzzleBar{}); r.Status != http.StatusOK {
		t.Fatalf("take the bar back: %d %s", r.Status, r.Body)
	}
	if s, body := bo.do(http.MethodPost, "/api/step/next", StepTarget{Request: d}); s != http.StatusForbidden {
		t.Fatalf("Bo once the bar was taken back: %d %s", s, body)
	}
	// A step that lets nothing go is not counted.
	if r := presenter(http.MethodPost, "/api/step/next", StepTarget{Request: "rq_gone"}); r.Status != http.StatusNotFound {
		t.Fatalf("stepping a request not held: %d %s", r.Status, r.Body)
	}
	if p := env.Server.room.Load().Puzzle; p.Steps != 1 {
		t.Fatalf("the second puzzle counts %d steps, want Bo's 1", p.Steps)
	}
	if r := presenter(http.MethodPost, "/api/puzzle/end", nil); r.Status != http.StatusOK || env.Server.room.Load().Puzzle != nil {
		t.Fatalf("end the puzzle: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPost, "/api/step/play", nil); r.Status != http.StatusOK {
		t.Fatalf("play: %d %s", r.Status, r.Body)
	}
	wantStatus(t, third, http.StatusCreated)
	r4 := wantAnswer(t, fourth)
	if r4.Status != http.StatusCreated && r4.Status != http.StatusConflict && r4.Status != http.StatusOK {
		t.Fatalf("the fourth request: %d %s", r4.Status, r4.Body)
	}
}

// wantAnswer waits, bounded, for an answer, whatever its status.
func wantAnswer(t *testing.T, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitUntilBound):
		t.Fatal("no answer")
	}
	return response{}
}

// TestLockQuestionGradedOnTheOutcome: the lock in memory's question is
// graded once every request of the key has answered, on the charges the
// books then hold, not on the first answer that looks like a choice. On
// two servers in one process (the lab's "Two servers"), three requests of
// one key: the second, on server B, looks the key up and waits; the
// first, on server A, charges; the third, on A again, waits for A's lock
// and replays the first's 201, which alone would say "one charge, the
// other replays"; then the second inserts and charges too. The grade is
// "two charges or more", as the books say.
func TestLockQuestionGradedOnTheOutcome(t *testing.T) {
	t.Parallel()
	const token = "teach-lock-1"
	env := puzzleEnv(t, token, "lock-in-memory")
	presenter := env.asPresenter(token)
	if r := presenter(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"servers": 2, "check_gap_ms": 0}}); r.Status != http.StatusOK {
		t.Fatalf("two servers: %d %s", r.Status, r.Body)
	}
	var opened PollState
	if r := presenter(http.MethodPost, "/api/poll/open", PollOpen{Question: 1}); r.Status != http.StatusOK || json.Unmarshal(r.Body, &opened) != nil {
		t.Fatalf("ask: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID}); r.Status != http.StatusOK {
		t.Fatalf("close: %d %s", r.Status, r.Body)
	}
	var answers []<-chan response
	var ids []string
	for range 3 {
		answers = append(answers, env.payAsync("lock-burst", "L-1"))
		ids = append(ids, env.waitHeld("received"))
	}
	next := func(path, id string) {
		t.Helper()
		if r := presenter(http.MethodPost, path, StepTarget{Request: id}); r.Status != http.StatusOK {
			t.Fatalf("%s %s: %d %s", path, id, r.Status, r.Body)
		}
	}
	next("/api/step/next", ids[1])
	if got := env.waitHeld("key looked up"); got != ids[1] {
		t.Fatalf("held at key looked up: %s, want the second request %s", got, ids[1])
	}
	next("/api/step/finish", ids[0])
	wantStatus(t, answers[0], http.StatusCreated)
	next("/api/step/finish", ids[2])
	if r := wantStatus(t, answers[2], http.StatusCreated); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the third request was not a replay of the first: %v %s", r.Header, r.Body)
	}
	next("/api/step/finish", ids[1])
	wantStatus(t, answers[1], http.StatusCreated)

	deadline := time.After(waitUntilBound)
	for {
		cur, _, changed := env.Server.room.Watch()
		if p := cur.Poll; p != nil && p.Outcome != nil {
			if p.Outcome.Choice != 0 || !strings.Contains(p.Outcome.Said, ", 2 for the key.") {
				t.Fatalf("graded %+v, want choice 0 (two charges), as the books say", p.Outcome)
			}
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the question was not graded: %+v", cur.Poll)
		}
	}
	loose, err := env.Server.db.LabLooseCharges(context.Background())
	n := 0
	for _, ch := range loose {
		if ch.OrderID == "L-1" {
			n++
		}
	}
	if err != nil || n != 2 {
		t.Fatalf("the books hold %d charges for L-1 (%v), want 2", n, err)
	}
}

// TestBoardUnhidesAndClearsScores: only the presenter clears the scores
// and puts a hidden nickname back; the presenter's board lists the hidden
// nicknames with a button to show each again, which a viewer's does not.
func TestBoardUnhidesAndClearsScores(t *testing.T) {
	t.Parallel()
	const token = "teach-clear-1"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter := env.asPresenter(token)
	mai := newPhone(t, env.URL)
	if s, b := mai.do(http.MethodPost, "/api/poll/nickname", PollNickname{Nickname: "Mai"}); s != http.StatusOK {
		t.Fatalf("nickname: %d %s", s, b)
	}
	if r := presenter(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"}); r.Status != http.StatusOK {
		t.Fatalf("chapter: %d %s", r.Status, r.Body)
	}
	var opened PollState
	if r := presenter(http.MethodPost, "/api/poll/open", PollOpen{Question: 0}); r.Status != http.StatusOK || json.Unmarshal(r.Body, &opened) != nil {
		t.Fatalf("open: %d %s", r.Status, r.Body)
	}
	if s, b := mai.answer(opened.ID, 1); s != http.StatusOK {
		t.Fatalf("answer: %d %s", s, b)
	}
	presenter(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID})
	// The server's own grade comes from a payment's events (other tests);
	// here the score only has to exist.
	if _, _, err := env.Server.room.Change(context.Background(), func(s *room.State) error {
		s.GradePoll(opened.ID, room.PollOutcome{Choice: 1, Said: "the books"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st := mai.poll(); st.Right != 1 || st.Scored != 1 {
		t.Fatalf("Mai's score: %+v", st)
	}
	id := playerID(t, &stepEnv{testEnv: env}, "Mai")
	for _, path := range []string{"/api/poll/scores/clear", "/api/poll/hide"} {
		if s, b := mai.do(http.MethodPost, path, PollHide{Player: id, Hidden: false}); s != http.StatusForbidden {
			t.Fatalf("a student at %s: %d %s", path, s, b)
		}
	}
	if r := presenter(http.MethodPost, "/api/poll/hide", PollHide{Player: id, Hidden: true}); r.Status != http.StatusOK {
		t.Fatalf("hide: %d %s", r.Status, r.Body)
	}
	board := func(headers ...string) string {
		t.Helper()
		r := env.get("/poll/live?board=1", headers...)
		var l PollLive
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &l) != nil {
			t.Fatalf("the board's panel: %d %s", r.Status, r.Body)
		}
		return l.HTML
	}
	if h := board(PresenterHeader, token); !strings.Contains(h, `data-poll-unhide="`+id+`"`) || !strings.Contains(h, "data-poll-clear") {
		t.Fatalf("the presenter's board has no way back for Mai, or to clear: %s", h)
	}
	if h := board(); strings.Contains(h, "data-poll-unhide") || strings.Contains(h, "Mai") {
		t.Fatalf("a viewer's board: %s", h)
	}
	if r := presenter(http.MethodPost, "/api/poll/hide", PollHide{Player: id, Hidden: false}); r.Status != http.StatusOK {
		t.Fatalf("show Mai again: %d %s", r.Status, r.Body)
	}
	if h := board(PresenterHeader, token); strings.Contains(h, "data-poll-unhide") || !strings.Contains(h, ">Mai<") {
		t.Fatalf("Mai is not back on the board: %s", h)
	}
	if r := presenter(http.MethodPost, "/api/poll/scores/clear", nil); r.Status != http.StatusOK {
		t.Fatalf("clear: %d %s", r.Status, r.Body)
	}
	if st := mai.poll(); st.Nickname != "Mai" || st.Right != 0 || st.Scored != 0 {
		t.Fatalf("Mai after the clear: %+v", st)
	}
}

// TestStepQuestionAtKeyLookedUp: a request of the lab's check-then-insert
// held at "key looked up" can be asked about; with the constraints back,
// two requests both past their look-up, the first inserts and goes on,
// and the question asked on the second is graded by its own INSERT, which
// the key table's primary key refuses with a 500.
func TestStepQuestionAtKeyLookedUp(t *testing.T) {
	t.Parallel()
	env := newStepEnv(t, Config{})
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "check-then-insert"}); r.Status != http.StatusOK {
		t.Fatalf("chapter: %d %s", r.Status, r.Body)
	}
	if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": room.LabCheckThenInsertConstrained, "check_gap_ms": 0}}); r.Status != http.StatusOK {
		t.Fatalf("constraints back: %d %s", r.Status, r.Body)
	}
	env.Server.payments.steps.Turn(true, "test")
	first := env.payAsync("looked-1", "K-1")
	a := env.waitHeld("received")
	second := env.payAsync("looked-1", "K-1")
	b := env.waitHeld("received")
	for _, id := range []string{a, b} {
		if r := env.api(http.MethodPost, "/api/step/next", `{"request":"`+id+`"}`); r.Status != http.StatusOK {
			t.Fatalf("next %s: %d %s", id, r.Status, r.Body)
		}
		if got := env.waitHeld("key looked up"); got != id {
			t.Fatalf("held at key looked up: %s, want %s", got, id)
		}
	}
	board := newPhone(t, env.URL)
	var opened PollState
	s, body := board.do(http.MethodPost, "/api/poll/step", PollStep{Request: b})
	if s != http.StatusOK || json.Unmarshal(body, &opened) != nil || opened.At != "key looked up" || len(opened.Choices) != 2 {
		t.Fatalf("asking at key looked up: %d %s", s, body)
	}
	if r := env.api(http.MethodPost, "/api/step/finish", `{"request":"`+a+`"}`); r.Status != http.StatusOK {
		t.Fatalf("finish the first: %d %s", r.Status, r.Body)
	}
	wantStatus(t, first, http.StatusCreated)
	if r := env.api(http.MethodPost, "/api/step/finish", `{"request":"`+b+`"}`); r.Status != http.StatusOK {
		t.Fatalf("finish the second: %d %s", r.Status, r.Body)
	}
	wantStatus(t, second, http.StatusInternalServerError)
	deadline := time.After(waitUntilBound)
	for {
		cur, _, changed := env.Server.room.Watch()
		if p := cur.Poll; p != nil && p.Outcome != nil {
			if p.Outcome.Choice != 1 {
				t.Fatalf("graded %+v, want the constraint's refusal", p.Outcome)
			}
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("not graded: %+v", cur.Poll)
		}
	}
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}
