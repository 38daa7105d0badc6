package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/web/room"
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

// TestVoteGradeSurvivesARestart: the class votes, the vote closes, and a
// real burst of one key grades it; the server restarts before the reveal.
// The restarted server still refuses answers to the closed vote, shows no
// split until the reveal, and its reveal gives the split and the grade
// the burst gave before the restart (the grade is room state, not the
// narrator's memory), each phone's own answer kept.
func TestVoteGradeSurvivesARestart(t *testing.T) {
	r := newRestartable(t, Config{})
	if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"check-then-insert"}`, nil); code != http.StatusOK {
		t.Fatalf("starting the chapter: %d", code)
	}
	var opened PollState
	if code := r.call(http.MethodPost, "/api/poll/open", `{"question":0}`, &opened); code != http.StatusOK {
		t.Fatalf("open: %d", code)
	}
	phones := []*phone{newPhone(t, r.URL()), newPhone(t, r.URL()), newPhone(t, r.URL())}
	for i, choice := range []int{0, 1, 0} {
		if s, body := phones[i].answer(opened.ID, choice); s != http.StatusOK {
			t.Fatalf("phone %d: %d %s", i+1, s, body)
		}
	}
	ref := fmt.Sprintf(`{"id":%d}`, opened.ID)
	if code := r.call(http.MethodPost, "/api/poll/close", ref, nil); code != http.StatusOK {
		t.Fatalf("close: %d", code)
	}
	// The chapter's burst: ten requests with one key at once.
	key := uuid.NewString()
	statuses := make([]string, 10)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range statuses {
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodPost, r.URL()+"/v1/payments", strings.NewReader(`{"order_id":"R-1","amount_satang":700}`))
			if err != nil {
				statuses[i] = err.Error()
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			res, err := apiClient.Do(req)
			if err != nil {
				statuses[i] = err.Error()
				return
			}
			res.Body.Close()
			statuses[i] = fmt.Sprintf("%d %s", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
		})
	}
	close(start)
	wg.Wait()
	var graded room.PollOutcome
	deadline := time.After(waitUntilBound)
	for {
		cur, _, changed := r.srv.room.Watch()
		if p := cur.Poll; p != nil && p.ID == opened.ID && p.Outcome != nil {
			graded = *p.Outcome
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the vote was not graded; the burst got %v", statuses)
		}
	}
	t.Logf("the burst got %v: graded choice %d (%s)", statuses, graded.Choice, graded.Said)

	r.restart()
	if s, body := phones[1].answer(opened.ID, 0); s != http.StatusBadRequest || !strings.Contains(string(body), "closed") {
		t.Fatalf("an answer to the closed vote after the restart: %d %s", s, body)
	}
	if st := phones[0].poll(); st.ID != opened.ID || st.Answered != 3 || st.Mine != 0 || st.Split != nil || st.Outcome != nil {
		t.Fatalf("after the restart, before the reveal, phone 1 sees %+v", st)
	}
	if code := r.call(http.MethodPost, "/api/poll/reveal", ref, nil); code != http.StatusOK {
		t.Fatalf("reveal after the restart: %d", code)
	}
	st := phones[1].poll()
	if st.Phase != "revealed" || fmt.Sprint(st.Split) != "[2 1]" || st.Mine != 1 || st.Outcome == nil ||
		st.Outcome.Choice != graded.Choice || st.Outcome.Said != graded.Said {
		t.Fatalf("revealed after the restart: %+v %+v, want the split [2 1] and the grade %d (%s)", st, st.Outcome, graded.Choice, graded.Said)
	}
}
