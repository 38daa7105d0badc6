package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestPredictNicknamesAndScores: students pick nicknames (or none); a
// nickname is bounded, printable, unique in the class, and drawn as text;
// the server's grade of a real payment scores those with a nickname, and
// the scores run on from vote to vote; the board shows the scores only
// once the presenter wants it, and the
// presenter can take one nickname off the board, which a new nickname
// does not undo. A student can change nothing else that others see.
func TestPredictNicknamesAndScores(t *testing.T) {
	t.Parallel()
	const token = "teach-5e2a"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter := env.asPresenter(token)
	ann, bo, anon := newPhone(t, env.URL), newPhone(t, env.URL), newPhone(t, env.URL)
	viewer := newPhone(t, env.URL) // the projector's browser, no token

	nick := func(p *phone, name string) (int, string) {
		t.Helper()
		s, b := p.do(http.MethodPost, "/api/poll/nickname", PollNickname{Nickname: name})
		return s, string(b)
	}
	if s, b := nick(ann, "  <b>Ann</b>&  "); s != http.StatusOK || !strings.Contains(b, `"nickname":"\u003cb\u003eAnn\u003c/b\u003e\u0026"`) {
		t.Fatalf("Ann's nickname: %d %s", s, b)
	}
	for _, c := range []struct{ name, nick, says string }{
		{"the same nickname in other letters", "<B>ANN</B>&", "called"},
		{"too long", strings.Repeat("x", 21), "at most 20"},
		{"a line break", "Bo\nBo", "no line breaks"},
		{"a right-to-left override", "Bo\u202eoB", "formatting"},
	} {
		s, b := nick(bo, c.nick)
		if s < 400 || s >= 500 || !strings.Contains(b, c.says) {
			t.Errorf("%s: %d %s", c.name, s, b)
		}
	}
	if s, b := nick(bo, "Bo"); s != http.StatusOK {
		t.Fatalf("Bo's nickname: %d %s", s, b)
	}
	for _, path := range []string{"/api/poll/scores", "/api/poll/hide"} {
		if s, b := ann.do(http.MethodPost, path, map[string]any{}); s != http.StatusForbidden {
			t.Fatalf("a student at %s: %d %s", path, s, b)
		}
	}

	if r := presenter(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"}); r.Status != http.StatusOK {
		t.Fatalf("start the chapter: %d %s", r.Status, r.Body)
	}
	// vote asks the chapter's question, takes the answers, closes the vote
	// and has a real payment of order grade it: its response lost, its
	// retry replayed, which is choice 1.
	vote := func(order string, answers map[*phone]int) {
		t.Helper()
		r := presenter(http.MethodPost, "/api/poll/open", PollOpen{Question: 0})
		var opened PollState
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &opened) != nil {
			t.Fatalf("open: %d %s", r.Status, r.Body)
		}
		for p, choice := range answers {
			if s, b := p.answer(opened.ID, choice); s != http.StatusOK {
				t.Fatalf("answer: %d %s", s, b)
			}
		}
		if r := presenter(http.MethodPost, "/api/poll/close", PollRef{ID: opened.ID}); r.Status != http.StatusOK {
			t.Fatalf("close: %d %s", r.Status, r.Body)
		}
		key, body := uuid.NewString(), `{"order_id":"`+order+`","amount_satang":1500}`
		_, _ = env.tryPay(key, body)
		if r := env.pay(key, body); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retry: %d %s", r.Status, r.Body)
		}
		deadline := time.After(waitUntilBound)
		for {
			cur, _, changed := env.Server.room.Watch()
			if cur.Poll != nil && cur.Poll.ID == opened.ID && cur.Poll.Outcome != nil {
				if cur.Poll.Outcome.Choice != 1 {
					t.Fatalf("graded %+v", cur.Poll.Outcome)
				}
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("not graded: %+v", cur.Poll)
			}
		}
	}
	// Ann and the anonymous student say the saved 201 (right), Bo a
	// second charge.
	vote("SC-1", map[*phone]int{ann: 1, bo: 0, anon: 1})
	if st := ann.poll(); st.Right != 1 || st.Scored != 1 {
		t.Fatalf("Ann's score: %+v", st)
	}
	if st := bo.poll(); st.Right != 0 || st.Scored != 1 {
		t.Fatalf("Bo's score: %+v", st)
	}
	if st := anon.poll(); st.Nickname != "" || st.Scored != 0 {
		t.Fatalf("the anonymous student is scored: %+v", st)
	}

	boardHTML := func() string {
		t.Helper()
		s, b := viewer.do(http.MethodGet, "/poll/live?board=1", nil)
		var l PollLive
		if s != http.StatusOK || json.Unmarshal(b, &l) != nil {
			t.Fatalf("the board's panel: %d %s", s, b)
		}
		return l.HTML
	}
	if h := boardHTML(); strings.Contains(h, "poll-scores") || strings.Contains(h, "Ann") {
		t.Fatalf("the board shows scores before the presenter asked: %s", h)
	}
	if r := presenter(http.MethodPost, "/api/poll/scores", PollScores{Shown: true}); r.Status != http.StatusOK {
		t.Fatalf("show the scores: %d %s", r.Status, r.Body)
	}
	h := boardHTML()
	first, second := strings.Index(h, "&lt;b&gt;Ann&lt;/b&gt;&amp;"), strings.Index(h, ">Bo<")
	if first < 0 || second < first || strings.Contains(h, "<b>Ann") || !strings.Contains(h, "1 right of 1") || !strings.Contains(h, "0 right of 1") {
		t.Fatalf("the board's scores (Ann first, escaped, then Bo): %s", h)
	}
	if strings.Contains(h, "data-poll-hide") {
		t.Fatal("a viewer without the token has the presenter's Hide buttons")
	}
	// The scores run on: a second vote, Ann wrong and Bo right this time,
	// makes each 1 right of 2 on the board and on their own phones.
	vote("SC-2", map[*phone]int{ann: 0, bo: 1, anon: 1})
	if h := boardHTML(); strings.Count(h, "1 right of 2") != 2 || strings.Contains(h, "of 1") {
		t.Fatalf("the board's scores after a second vote (Ann and Bo 1 right of 2): %s", h)
	}
	for name, p := range map[string]*phone{"Ann": ann, "Bo": bo} {
		if st := p.poll(); st.Right != 1 || st.Scored != 2 {
			t.Fatalf("%s's score after a second vote: %+v, want 1 right of 2", name, st)
		}
	}

	var annID string
	for _, p := range env.Server.room.Load().Scores.Players {
		if strings.Contains(p.Nick, "Ann") {
			annID = p.ID
		}
	}
	if r := presenter(http.MethodPost, "/api/poll/hide", PollHide{Player: "nobody", Hidden: true}); r.Status != http.StatusNotFound {
		t.Fatalf("hiding nobody: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPost, "/api/poll/hide", PollHide{Player: annID, Hidden: true}); r.Status != http.StatusOK {
		t.Fatalf("hide Ann: %d %s", r.Status, r.Body)
	}
	if s, b := nick(ann, "Anna"); s != http.StatusOK {
		t.Fatalf("Ann renames herself: %d %s", s, b)
	}
	if h := boardHTML(); strings.Contains(h, "Ann") || !strings.Contains(h, ">Bo<") {
		t.Fatalf("hidden, then renamed, Ann is back on the board: %s", h)
	}
	if st := ann.poll(); st.Nickname != "Anna" || st.Right != 1 {
		t.Fatalf("Ann's own view: %+v", st)
	}
	if s, b := nick(bo, ""); s != http.StatusOK {
		t.Fatalf("Bo gives up his nickname: %d %s", s, b)
	}
	if h := boardHTML(); strings.Contains(h, ">Bo<") {
		t.Fatalf("Bo is still listed: %s", h)
	}
	exp := env.get("/api/timeline.json", PresenterHeader, token)
	if !bytes.Contains(exp.Body, []byte("scores: 1 nickname(s), shown on the board")) || bytes.Contains(exp.Body, []byte("Anna")) {
		t.Fatalf("the export: %s", regexp.MustCompile(`"message":"(vote|scores)[^"]*"`).FindAll(exp.Body, -1))
	}
}
