package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/web/room"
)

// phone is one student's browser: its own cookie jar, so its own session.
type phone struct {
	t   *testing.T
	url string
	c   *http.Client
}

func newPhone(t *testing.T, url string) *phone {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &phone{t: t, url: url, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
}

func (p *phone) do(method, path string, body any) (int, []byte) {
	p.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, p.url+path, rd)
	if err != nil {
		p.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := p.c.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(res.Body)
	return res.StatusCode, buf.Bytes()
}

func (p *phone) poll() PollState {
	p.t.Helper()
	status, body := p.do(http.MethodGet, "/api/poll", nil)
	var st PollState
	if status != http.StatusOK || json.Unmarshal(body, &st) != nil {
		p.t.Fatalf("GET /api/poll: %d %s", status, body)
	}
	return st
}

func (p *phone) answer(id uint64, choice int) (int, []byte) {
	p.t.Helper()
	return p.do(http.MethodPost, "/api/poll/answer", PollAnswer{ID: id, Choice: choice})
}

// TestPredictThenObserve: a class of three phones answers the
// response-lost chapter's question over real HTTP, one changes its mind,
// the board counts three answers and shows no split, the vote closes,
// then a real payment loses its response and its retry is replayed: the
// server's own events grade the vote, and the reveal shows the split
// beside what the server did.
func TestPredictThenObserve(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	board := newPhone(t, env.URL)
	if s, b := board.do(http.MethodPost, "/api/poll/open", PollOpen{Question: 0}); s != http.StatusBadRequest || !bytes.Contains(b, []byte("Start a chapter first")) {
		t.Fatalf("a question with no chapter: %d %s", s, b)
	}
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"}); r.Status != http.StatusOK {
		t.Fatalf("start the chapter: %d %s", r.Status, r.Body)
	}
	if s, b := board.do(http.MethodPost, "/api/poll/open", PollOpen{Question: 7}); s != http.StatusBadRequest {
		t.Fatalf("question 7 of a chapter with one: %d %s", s, b)
	}
	s, b := board.do(http.MethodPost, "/api/poll/open", PollOpen{Question: 0})
	var opened PollState
	if s != http.StatusOK || json.Unmarshal(b, &opened) != nil || opened.Phase != "open" || len(opened.Choices) != 4 {
		t.Fatalf("open: %d %s", s, b)
	}

	phones := []*phone{newPhone(t, env.URL), newPhone(t, env.URL), newPhone(t, env.URL)}
	for i, choice := range []int{0, 1, 0} {
		if s, b := phones[i].answer(opened.ID, choice); s != http.StatusOK {
			t.Fatalf("phone %d answers: %d %s", i, s, b)
		}
	}
	if s, b := phones[0].answer(opened.ID, 1); s != http.StatusOK {
		t.Fatalf("phone 0 changes its answer: %d %s", s, b)
	}
	if s, b := phones[1].answer(opened.ID, 9); s != http.StatusBadRequest || !bytes.Contains(b, []byte("no choice 10")) {
		t.Fatalf("a choice that does not exist: %d %s", s, b)
	}
	st := phones[0].poll()
	if st.Answered != 3 || st.Mine != 1 || st.Split != nil || st.Outcome != nil {
		t.Fatalf("before the reveal, phone 0 sees %+v", st)
	}
	s, b = board.do(http.MethodGet, "/poll/live?board=1", nil)
	if s != http.StatusOK || !bytes.Contains(b, []byte("3 answers")) || bytes.Contains(b, []byte("poll-count")) {
		t.Fatalf("the board before the reveal: %d %s", s, b)
	}

	if s, b := board.do(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID}); s != http.StatusOK {
		t.Fatalf("close: %d %s", s, b)
	}
	if s, b := phones[2].answer(opened.ID, 1); s != http.StatusBadRequest || !bytes.Contains(b, []byte("closed")) {
		t.Fatalf("an answer after the close: %d %s", s, b)
	}

	// The step, for real: the response of the first payment is lost; the
	// retry with the same key is answered from the key.
	// The step, for real: the response of the first payment is lost.
	// Go's transport resends a POST that carries an Idempotency-Key when
	// the connection closes unanswered, as a client that retries with
	// the same key does; either way the answer that arrives is the saved
	// 201, replayed.
	key, body := uuid.NewString(), `{"order_id":"A-1","amount_satang":1500}`
	if r, err := env.tryPay(key, body); err == nil && (r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true") {
		t.Fatalf("the response-lost fault let the first answer through: %d %s", r.Status, r.Body)
	}
	if r := env.pay(key, body); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry: %d %v %s", r.Status, r.Header, r.Body)
	}
	deadline := time.After(waitUntilBound)
	for {
		cur, _, changed := env.Server.room.Watch()
		if cur.Poll != nil && cur.Poll.Outcome != nil {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the vote was not graded by the payment: %+v", cur.Poll)
		}
	}
	if st := phones[1].poll(); st.Split != nil || st.Outcome != nil {
		t.Fatalf("graded but not revealed, a phone sees %+v", st)
	}

	if s, b := board.do(http.MethodPost, "/api/poll/reveal", PollRef{ID: opened.ID}); s != http.StatusOK {
		t.Fatalf("reveal: %d %s", s, b)
	}
	st = phones[2].poll()
	if fmt.Sprint(st.Split) != "[1 2 0 0]" || st.Outcome == nil || st.Outcome.Choice != 1 || !strings.Contains(st.Outcome.Said, "replayed the saved 201") ||
		!strings.Contains(st.Outcome.Said, "at that moment the books held 1 charge for the order") {
		t.Fatalf("after the reveal: %+v %+v", st, st.Outcome)
	}
	if st.Mine != 0 {
		t.Fatalf("phone 2's own answer: %d", st.Mine)
	}
	s, b = board.do(http.MethodGet, "/poll/live?board=1", nil)
	if s != http.StatusOK || !bytes.Contains(b, []byte(`poll-choice right`)) || !bytes.Contains(b, []byte("replayed the saved 201")) {
		t.Fatalf("the board after the reveal: %d %s", s, b)
	}
	var live PollLive
	_ = json.Unmarshal(b, &live)
	if s, _ := board.do(http.MethodGet, fmt.Sprintf("/poll/live?board=1&v=%d", live.V), nil); s != http.StatusNoContent {
		t.Fatalf("the board asked again with the version it shows: %d", s)
	}
	if r := env.Server.room.Load(); r.Poll.Phase != room.PollRevealed {
		t.Fatalf("the room holds %+v", r.Poll)
	}
	// The timeline's export keeps what the vote stood at.
	exp := env.get("/api/timeline.json")
	if exp.Status != http.StatusOK || !bytes.Contains(exp.Body, []byte(`split [1 2 0 0]; the server showed choice 2: The server replayed the saved 201`)) {
		t.Fatalf("the export: %d %.2000s", exp.Status, exp.Body)
	}
}

// TestRaceQuestionGradedByWhatHappened: the check-then-insert chapter's
// question can go either way; a real burst of ten requests with one key
// grades it, before and after the constraints are put back, and the grade
// always agrees with the answers the burst got (how many fresh 201s, each
// one a charge).
func TestRaceQuestionGradedByWhatHappened(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	board := newPhone(t, env.URL)
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "check-then-insert"}); r.Status != http.StatusOK {
		t.Fatalf("start the chapter: %d %s", r.Status, r.Body)
	}
	ask := func(q int) *room.PollOutcome {
		t.Helper()
		var opened PollState
		s, b := board.do(http.MethodPost, "/api/poll/open", PollOpen{Question: q})
		if s != http.StatusOK || json.Unmarshal(b, &opened) != nil {
			t.Fatalf("open %d: %d %s", q, s, b)
		}
		if s, b := board.do(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID}); s != http.StatusOK {
			t.Fatalf("close: %d %s", s, b)
		}
		rs := env.burst(10, uuid.NewString(), fmt.Sprintf(`{"order_id":"B-%d","amount_satang":700}`, q))
		fresh := 0
		for _, r := range rs {
			if r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") != "true" {
				fresh++
			}
		}
		deadline := time.After(waitUntilBound)
		for {
			cur, _, changed := env.Server.room.Watch()
			if p := cur.Poll; p != nil && p.ID == opened.ID && p.Outcome != nil {
				want := 1
				if fresh >= 2 {
					want = 0
				}
				if p.Outcome.Choice != want {
					t.Fatalf("question %d: %d fresh 201s, but graded choice %d (%s)", q, fresh, p.Outcome.Choice, p.Outcome.Said)
				}
				return p.Outcome
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("question %d was not graded; the burst got %s", q, statusList(rs))
			}
		}
	}
	if o := ask(0); o.Choice != 0 {
		t.Fatalf("with no constraints the burst was graded %+v", o)
	}
	if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": room.LabCheckThenInsertConstrained}}); r.Status != http.StatusOK {
		t.Fatalf("put the constraints back: %d %s", r.Status, r.Body)
	}
	if o := ask(1); o.Choice != 1 {
		t.Fatalf("with the constraints back the burst was graded %+v", o)
	}
}

// TestNoKeyQuestionsGradedByTheDoubleClick: the no-key chapter asks
// before the mistake and after the fix; a real double-click (two
// requests with one key, 800 ms of delay) grades the first "two charges"
// and, with the key back, the second by the refusal the second click got.
func TestNoKeyQuestionsGradedByTheDoubleClick(t *testing.T) {
	waitsOnRealClocks(t)
	env := newTestEnv(t, Config{})
	board := newPhone(t, env.URL)
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "no-key"}); r.Status != http.StatusOK {
		t.Fatalf("start the chapter: %d %s", r.Status, r.Body)
	}
	ask := func(q int, order string) (*room.PollOutcome, []response) {
		t.Helper()
		var opened PollState
		s, b := board.do(http.MethodPost, "/api/poll/open", PollOpen{Question: q})
		if s != http.StatusOK || json.Unmarshal(b, &opened) != nil {
			t.Fatalf("open %d: %d %s", q, s, b)
		}
		if s, b := board.do(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID}); s != http.StatusOK {
			t.Fatalf("close: %d %s", s, b)
		}
		rs := env.burst(2, uuid.NewString(), `{"order_id":"`+order+`","amount_satang":500}`)
		deadline := time.After(waitUntilBound)
		for {
			cur, _, changed := env.Server.room.Watch()
			if p := cur.Poll; p != nil && p.ID == opened.ID && p.Outcome != nil {
				return p.Outcome, rs
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("question %d was not graded; the double-click got %s", q, statusList(rs))
			}
		}
	}
	if o, rs := ask(0, "N-1"); o.Choice != 0 || countStatus(rs, http.StatusCreated) != 2 {
		t.Fatalf("no key: graded %+v, the clicks got %s", o, statusList(rs))
	}
	if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": room.LabCorrect}}); r.Status != http.StatusOK {
		t.Fatalf("put the key back: %d %s", r.Status, r.Body)
	}
	o, rs := ask(1, "N-2")
	want := 2 // the second click waited and got the saved 201
	if countStatus(rs, http.StatusConflict) == 1 {
		want = 1
	}
	if o.Choice != want {
		t.Fatalf("key back: the clicks got %s, graded %+v", statusList(rs), o)
	}
}
