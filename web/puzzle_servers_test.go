package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// TestPuzzleAcrossServers: "be the scheduler" with the class spread over
// two servers of one PostgreSQL database (with PAYTWICE_TEST_POSTGRES;
// else one SQLite file and shared memory peers). The two requests of the
// puzzle's order are held one on each server; the presenter starts the
// puzzle on the second server and steps through both servers, each request
// looking the key up before either inserts it. Both servers' rooms then
// say solved in the steps taken, with the charges the books hold for the
// order (two), and the books hold them.
func TestPuzzleAcrossServers(t *testing.T) {
	waitsOnRealClocks(t)
	const token = "teach-sched-servers"
	c := newClass(t)
	var s []*stepEnv
	for _, name := range []string{"s1", "s2"} {
		env := c.server(Config{Name: name, PresenterToken: token}, nil)
		st := env.Server.payments.steps
		st.After = func(time.Duration) <-chan time.Time { return nil } // holds end when the test says
		waitUntil(t, "the step commands to be listened to", st.Listening)
		s = append(s, &stepEnv{testEnv: env, sub: env.Server.hub.Subscribe(env.Server.hub.LastSeq())})
	}
	presenter := func(e *stepEnv, method, path string, body any) response {
		t.Helper()
		r := e.send(method, path, body, PresenterHeader, token)
		if r.Status != http.StatusOK {
			t.Fatalf("%s %s on %s: %d %s", method, path, e.Server.cfg.Name, r.Status, r.Body)
		}
		return r
	}
	presenter(s[0], http.MethodPut, "/api/lessons/current", LessonChange{Slug: "check-then-insert"})
	presenter(s[0], http.MethodPut, "/api/step", map[string]bool{"on": true})
	s[1].waitStepMode(true)

	// One order, paid twice with one key: once through each server.
	first := s[0].payAsync("sched-servers", "PS-1")
	a := s[0].waitHeldHere("received")
	second := s[1].payAsync("sched-servers", "PS-1")
	b := s[1].waitHeldHere("received")
	s[1].waitListed(a, "received")
	s[0].waitListed(b, "received")

	presenter(s[1], http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a})
	waitPuzzleOn := func(e *stepEnv, what string, ok func(p *room.Puzzle) bool) room.Puzzle {
		t.Helper()
		var p *room.Puzzle
		waitUntil(t, what+" on "+e.Server.cfg.Name, func() bool {
			p = e.Server.room.Load().Puzzle
			return ok(p)
		})
		return *p
	}
	waitPuzzleOn(s[0], "the puzzle", func(p *room.Puzzle) bool { return p != nil && !p.Solved })

	// The scheduler's moves, each sent to the server that does not hold
	// the request: both look the key up before either inserts. Before
	// each, that server's copy of the other's held list misses the
	// request, as when an announcement built before its hold arrives
	// after its held event: the step is counted all the same, by the
	// server that holds the request.
	stepElsewhere := func(e *stepEnv, path, id string) {
		t.Helper()
		e.Server.payments.steps.Heard(live.Event{Kind: step.KindResumed, Request: id})
		presenter(e, http.MethodPost, path, StepTarget{Request: id})
	}
	stepElsewhere(s[1], "/api/step/next", a)
	if got := s[0].waitHeldHere("key looked up"); got != a {
		t.Fatalf("held at the look-up on s1: %s, want %s", got, a)
	}
	stepElsewhere(s[0], "/api/step/next", b)
	if got := s[1].waitHeldHere("key looked up"); got != b {
		t.Fatalf("held at the look-up on s2: %s, want %s", got, b)
	}
	if p := waitPuzzleOn(s[0], "two steps counted", func(p *room.Puzzle) bool { return p != nil && p.Steps == 2 }); p.Solved {
		t.Fatalf("solved after two steps, before any charge: %+v", p)
	}
	stepElsewhere(s[1], "/api/step/finish", a)
	wantStatus(t, first, http.StatusCreated)
	stepElsewhere(s[0], "/api/step/finish", b)
	wantStatus(t, second, http.StatusCreated)

	for _, e := range s {
		p := waitPuzzleOn(e, "the puzzle solved", func(p *room.Puzzle) bool { return p != nil && p.Solved })
		if p.SolvedSteps != 4 || p.Charges != 2 {
			t.Errorf("%s's room: %+v, want solved in 4 steps with the books' 2 charges", e.Server.cfg.Name, p)
		}
	}
	p := *s[0].Server.room.Load().Puzzle
	chs, err := c.ChargesByOrder(context.Background(), p.Scope, "PS-1")
	if err != nil || len(chs) != 2 {
		t.Fatalf("the books hold %d charges for PS-1 (%v), want the two the puzzle counts", len(chs), err)
	}
	exp := s[1].get("/api/timeline.json", PresenterHeader, token)
	if want := fmt.Sprintf("solved in %d step(s): the books hold 2 charges for the order", p.SolvedSteps); !strings.Contains(string(exp.Body), want) {
		t.Errorf("s2's export does not say %q", want)
	}
}

// TestPuzzleBarAndPlayAcrossServers: the student holding the step bar,
// and the presenter's Play, are decided by the server that holds the
// request, not by the receiving server's copy of the other's held list,
// which here misses the request before each step (as when an
// announcement built before a hold arrives after its held event). The
// student's step of the puzzle's request is let go and counted; of
// another order's, refused by its holder; Play, sent to a server that
// holds none of the puzzle's requests, is counted once, by the holder.
func TestPuzzleBarAndPlayAcrossServers(t *testing.T) {
	waitsOnRealClocks(t)
	const token = "teach-sched-bar-servers"
	c := newClass(t)
	var s []*stepEnv
	for _, name := range []string{"s1", "s2"} {
		env := c.server(Config{Name: name, PresenterToken: token}, nil)
		st := env.Server.payments.steps
		st.After = func(time.Duration) <-chan time.Time { return nil } // holds end when the test says
		waitUntil(t, "the step commands to be listened to", st.Listening)
		s = append(s, &stepEnv{testEnv: env, sub: env.Server.hub.Subscribe(env.Server.hub.LastSeq())})
	}
	presenter := func(e *stepEnv, method, path string, body any) response {
		t.Helper()
		r := e.send(method, path, body, PresenterHeader, token)
		if r.Status != http.StatusOK {
			t.Fatalf("%s %s on %s: %d %s", method, path, e.Server.cfg.Name, r.Status, r.Body)
		}
		return r
	}
	forget := func(e *stepEnv, id string) {
		e.Server.payments.steps.Heard(live.Event{Kind: step.KindResumed, Request: id})
	}
	presenter(s[0], http.MethodPut, "/api/lessons/current", LessonChange{Slug: "check-then-insert"})
	presenter(s[0], http.MethodPut, "/api/step", map[string]bool{"on": true})
	s[1].waitStepMode(true)
	mai := newPhone(t, s[1].URL)
	if st, b := mai.do(http.MethodPost, "/api/poll/nickname", PollNickname{Nickname: "Mai"}); st != http.StatusOK {
		t.Fatalf("Mai's nickname: %d %s", st, b)
	}

	first := s[0].payAsync("bar-servers", "PB-1")
	a := s[0].waitHeldHere("received")
	other := s[0].payAsync("bar-servers-other", "PB-2")
	o := s[0].waitHeldHere("received")
	second := s[1].payAsync("bar-servers", "PB-1")
	b := s[1].waitHeldHere("received")
	s[1].waitListed(a, "received")
	s[0].waitListed(b, "received")
	presenter(s[1], http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: a})
	presenter(s[1], http.MethodPost, "/api/puzzle/bar", PuzzleBar{Player: playerID(t, s[1], "Mai")})
	waitPuzzle := func(e *stepEnv, what string, ok func(p *room.Puzzle) bool) room.Puzzle {
		t.Helper()
		var p *room.Puzzle
		waitUntil(t, what+" on "+e.Server.cfg.Name, func() bool {
			p = e.Server.room.Load().Puzzle
			return ok(p)
		})
		return *p
	}
	waitPuzzle(s[0], "the puzzle", func(p *room.Puzzle) bool { return p != nil && p.Bar != nil })

	// Mai, on s2, steps requests s1 holds and s2's copy misses. With no
	// request named, s2's copy would pick b, its own, which the class did
	// not choose: refused, nothing stepped.
	forget(s[1], a)
	if st, body := mai.do(http.MethodPost, "/api/step/next", StepTarget{}); st != http.StatusBadRequest || !strings.Contains(string(body), "Name the held request to step") {
		t.Fatalf("Mai steps with no request named: %d %s, want 400 asking for it", st, body)
	}
	if p := s[1].Server.room.Load().Puzzle; p.Steps != 0 {
		t.Fatalf("a step with no request named was counted: %+v", p)
	}
	forget(s[1], o)
	if st, body := mai.do(http.MethodPost, "/api/step/next", StepTarget{Request: o}); st != http.StatusForbidden || !strings.Contains(string(body), "step bar is for the puzzle's") {
		t.Fatalf("Mai steps another order's request held on s1: %d %s", st, body)
	}
	forget(s[1], a)
	if st, body := mai.do(http.MethodPost, "/api/step/next", StepTarget{Request: a}); st != http.StatusOK {
		t.Fatalf("Mai steps the puzzle's request held on s1: %d %s", st, body)
	}
	if got := s[0].waitHeldHere("key looked up"); got != a {
		t.Fatalf("held at the look-up on s1: %s, want %s", got, a)
	}
	forget(s[0], b)
	presenter(s[0], http.MethodPost, "/api/step/next", StepTarget{Request: b})
	if got := s[1].waitHeldHere("key looked up"); got != b {
		t.Fatalf("held at the look-up on s2: %s, want %s", got, b)
	}
	waitPuzzle(s[0], "two steps counted", func(p *room.Puzzle) bool { return p != nil && p.Steps == 2 })
	forget(s[1], a)
	presenter(s[1], http.MethodPost, "/api/step/finish", StepTarget{Request: a})
	wantStatus(t, first, http.StatusCreated)

	// Play on s1, which holds another order's request only and whose
	// copy misses s2's: s2 counts it, once.
	forget(s[0], b)
	presenter(s[0], http.MethodPost, "/api/step/play", nil)
	wantStatus(t, second, http.StatusCreated)
	wantStatus(t, other, http.StatusCreated)
	for _, e := range s {
		p := waitPuzzle(e, "the puzzle solved", func(p *room.Puzzle) bool { return p != nil && p.Solved })
		if p.SolvedSteps != 4 || p.Charges != 2 {
			t.Errorf("%s's room: %+v, want solved in 4 steps with the books' 2 charges", e.Server.cfg.Name, p)
		}
	}
}
