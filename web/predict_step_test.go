package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/web/room"
)

// TestPredictStepModeQuestions: with step mode on and no chapter begun,
// the presenter asks the class, at each checkpoint of a real payment,
// what its next step will do; stepping it on closes the vote, and the
// request's own next event grades it. A second request with the same key
// held beside it shows that only the asked request's events grade its
// question: the first request's claim does not, its 409 does.
func TestPredictStepModeQuestions(t *testing.T) {
	t.Parallel()
	env := newStepEnv(t, Config{})
	board := newPhone(t, env.URL)
	phones := []*phone{newPhone(t, env.URL), newPhone(t, env.URL), newPhone(t, env.URL)}

	// ask opens the question on the held request, the three phones
	// answer, and Next (or Finish) steps it; it returns the vote's grade.
	ask := func(id, at string, answers [3]int, finish bool) *room.PollOutcome {
		t.Helper()
		s, b := board.do(http.MethodPost, "/api/poll/step", PollStep{Request: id})
		var opened PollState
		if s != http.StatusOK || json.Unmarshal(b, &opened) != nil || opened.Request != id || opened.At != at || opened.Phase != "open" {
			t.Fatalf("asking at %q: %d %s", at, s, b)
		}
		if !strings.HasPrefix(opened.Text, "Step mode, order ") {
			t.Fatalf("the question does not name the request's order: %q", opened.Text)
		}
		for i, p := range phones {
			if s, b := p.answer(opened.ID, answers[i]); s != http.StatusOK {
				t.Fatalf("phone %d at %q: %d %s", i, at, s, b)
			}
		}
		action := "/api/step/next"
		if finish {
			action = "/api/step/finish"
		}
		if r := env.api(http.MethodPost, action, fmt.Sprintf(`{"request":%q}`, id)); r.Status != http.StatusOK {
			t.Fatalf("stepping at %q: %d %s", at, r.Status, r.Body)
		}
		if st := phones[0].poll(); st.Phase != "closed" {
			t.Fatalf("stepping the request on left the vote %q", st.Phase)
		}
		if s, b := phones[1].answer(opened.ID, 0); s != http.StatusBadRequest {
			t.Fatalf("an answer once the step ran: %d %s", s, b)
		}
		deadline := time.After(waitUntilBound)
		for {
			cur, _, changed := env.Server.room.Watch()
			if p := cur.Poll; p != nil && p.ID == opened.ID && p.Outcome != nil {
				return p.Outcome
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("the question at %q was not graded: %+v", at, cur.Poll)
			}
		}
	}

	if s, b := board.do(http.MethodPost, "/api/poll/step", PollStep{Request: "no-such-request"}); s != http.StatusNotFound || !bytes.Contains(b, []byte("not held")) {
		t.Fatalf("asking about a request not held: %d %s", s, b)
	}

	paid := env.payAsync("step-q-1", "S-1")
	id := env.waitHeld("received")
	for _, c := range []struct {
		at, next string
		want     int
		said     string
	}{
		{"received", "key claimed", 0, "claimed the key"},
		{"key claimed", "before the gateway", 0, "step mode holds it at before the gateway"},
		{"before the gateway", "gateway answered", 0, "heard from the gateway: 200"},
		{"gateway answered", "saved", 0, "charged the gateway"},
	} {
		o := ask(id, c.at, [3]int{0, 1, 1}, false)
		if o.Choice != c.want || !strings.Contains(o.Said, c.said) {
			t.Fatalf("at %q graded %+v, want choice %d saying %q", c.at, o, c.want, c.said)
		}
		if got := env.waitHeld(c.next); got != id {
			t.Fatalf("held at %q: %s, want %s", c.next, got, id)
		}
	}
	s, b := board.do(http.MethodPost, "/api/poll/step", PollStep{Request: id})
	if s != http.StatusBadRequest || !bytes.Contains(b, []byte("nothing to predict")) {
		t.Fatalf("asking at %q: %d %s", "saved", s, b)
	}
	if r := env.api(http.MethodPost, "/api/poll/reveal", fmt.Sprintf(`{"id":%d}`, env.Server.room.Load().Poll.ID)); r.Status != http.StatusOK {
		t.Fatalf("reveal: %d %s", r.Status, r.Body)
	}
	if st := phones[2].poll(); fmt.Sprint(st.Split) != "[1 2 0]" || st.Outcome == nil || st.Outcome.Choice != 0 {
		t.Fatalf("the last step's reveal: %+v", st)
	}
	if r := env.api(http.MethodPost, "/api/step/finish", fmt.Sprintf(`{"request":%q}`, id)); r.Status != http.StatusOK {
		t.Fatalf("finish: %d %s", r.Status, r.Body)
	}
	wantStatus(t, paid, http.StatusCreated)

	// Two requests with one key, both held at "received": the question is
	// on the second. The first claims the key (no grade: another
	// request's step), then the second's own step is a 409.
	first := env.payAsync("step-q-2", "S-2")
	a := env.waitHeld("received")
	second := env.payAsync("step-q-2", "S-2")
	bID := env.waitHeld("received")
	s, b = board.do(http.MethodPost, "/api/poll/step", PollStep{Request: bID})
	if s != http.StatusOK {
		t.Fatalf("asking about the second request: %d %s", s, b)
	}
	if r := env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, a)); r.Status != http.StatusOK {
		t.Fatalf("stepping the first: %d %s", r.Status, r.Body)
	}
	if got := env.waitHeld("key claimed"); got != a {
		t.Fatalf("held at key claimed: %s, want %s", got, a)
	}
	if p := env.Server.room.Load().Poll; p.Outcome != nil {
		t.Fatalf("the first request's claim graded the question on the second: %+v", p.Outcome)
	}
	o := ask(bID, "received", [3]int{0, 1, 2}, true)
	if o.Choice != 1 || !strings.Contains(o.Said, "409") {
		t.Fatalf("the second request's step graded %+v, want the 409", o)
	}
	wantStatus(t, second, http.StatusConflict)
	if r := env.api(http.MethodPost, "/api/step/play", ""); r.Status != http.StatusOK {
		t.Fatalf("play: %d %s", r.Status, r.Body)
	}
	wantStatus(t, first, http.StatusCreated)
	if n := env.charges(); n != 2 {
		t.Fatalf("%d charges, want 2", n)
	}
	exp := env.get("/api/timeline.json")
	if !bytes.Contains(exp.Body, []byte("on the next step of order S-2")) {
		t.Fatalf("the export does not keep the step mode vote: %.1500s", exp.Body)
	}
}
