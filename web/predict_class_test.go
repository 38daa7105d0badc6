package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
)

// TestVoteIsTheWholeClasss: two servers of one class (on PostgreSQL when
// the test has it, else one SQLite file with shared memory peers) hold
// one vote: a phone answers through one server and the other counts it,
// the vote closes on the second, a payment on the first grades it once,
// and the reveal on the second reaches the first.
func TestVoteIsTheWholeClasss(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "a", "b")
	a, b := envs[0], envs[1]
	if r := a.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"}); r.Status != http.StatusOK {
		t.Fatalf("start the chapter: %d %s", r.Status, r.Body)
	}
	waitUntil(t, "server b to follow the chapter", func() bool { return b.Server.room.Load().Lesson == "response-lost" })
	var opened PollState
	presenter := newPhone(t, a.URL)
	if s, body := presenter.do(http.MethodPost, "/api/poll/open", PollOpen{Question: 0}); s != http.StatusOK {
		t.Fatalf("open on a: %d %s", s, body)
	} else if err := json.Unmarshal(body, &opened); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "server b to hold the vote", func() bool { p := b.Server.room.Load().Poll; return p != nil && p.ID == opened.ID })

	onB, onA := newPhone(t, b.URL), newPhone(t, a.URL)
	if s, body := onB.answer(opened.ID, 1); s != http.StatusOK {
		t.Fatalf("answer through b: %d %s", s, body)
	}
	if s, body := onA.answer(opened.ID, 0); s != http.StatusOK {
		t.Fatalf("answer through a: %d %s", s, body)
	}
	waitUntil(t, "both servers to count two answers", func() bool {
		return a.Server.room.Load().Poll.Answered() == 2 && b.Server.room.Load().Poll.Answered() == 2
	})
	if s, body := newPhone(t, b.URL).do(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID}); s != http.StatusOK {
		t.Fatalf("close on b: %d %s", s, body)
	}
	waitUntil(t, "server a to close the vote", func() bool { return a.Server.room.Load().Poll.Phase == "closed" })

	key, body := uuid.NewString(), `{"order_id":"C-1","amount_satang":900}`
	_, _ = a.tryPay(key, body) // its response is lost (or Go's transport resends it, with the key)
	if r := a.pay(key, body); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry: %d %s", r.Status, r.Body)
	}
	waitUntil(t, "the vote graded on both servers", func() bool {
		pa, pb := a.Server.room.Load().Poll, b.Server.room.Load().Poll
		return pa.Outcome != nil && pb.Outcome != nil
	})
	if s, body := newPhone(t, b.URL).do(http.MethodPost, "/api/poll/reveal", PollRef{ID: opened.ID}); s != http.StatusOK {
		t.Fatalf("reveal on b: %d %s", s, body)
	}
	waitUntil(t, "server a to reveal", func() bool { return a.Server.room.Load().Poll.Phase == "revealed" })
	st := onA.poll()
	if fmt.Sprint(st.Split) != "[1 1 0 0]" || st.Outcome == nil || st.Outcome.Choice != 1 || st.Mine != 0 {
		t.Fatalf("through a after the reveal: %+v %+v", st, st.Outcome)
	}
}

// TestVoteSurvivesARestart: the vote is room state, kept in the file: a
// server restarted mid-vote finds the question, the answers, each phone's
// own answer, and takes a change of answer as before.
func TestVoteSurvivesARestart(t *testing.T) {
	r := newRestartable(t, Config{})
	if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`, nil); code != http.StatusOK {
		t.Fatalf("starting a chapter: %d", code)
	}
	var opened PollState
	if code := r.call(http.MethodPost, "/api/poll/open", `{"question":1}`, &opened); code != http.StatusOK {
		t.Fatalf("open: %d", code)
	}
	p1, p2 := newPhone(t, r.URL()), newPhone(t, r.URL())
	if s, body := p1.answer(opened.ID, 2); s != http.StatusOK {
		t.Fatalf("phone 1: %d %s", s, body)
	}
	if s, body := p2.answer(opened.ID, 0); s != http.StatusOK {
		t.Fatalf("phone 2: %d %s", s, body)
	}
	r.restart()
	st := p1.poll()
	if st.ID != opened.ID || st.Question != 1 || st.Phase != "open" || st.Answered != 2 || st.Mine != 2 || st.Split != nil {
		t.Fatalf("after the restart phone 1 sees %+v", st)
	}
	if s, body := p1.answer(opened.ID, 1); s != http.StatusOK {
		t.Fatalf("phone 1 changes its answer after the restart: %d %s", s, body)
	}
	if st := p2.poll(); st.Answered != 2 || st.Mine != 0 {
		t.Fatalf("after the change phone 2 sees %+v", st)
	}
}
