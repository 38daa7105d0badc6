package lesson

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

// TestEveryChapterAsks: every chapter has a question whose choices each
// say which event shows them; every mistake chapter has a fix (its last
// lab patch), and asks first before the mistake shows (a question whose
// moment is not after the fix) and again after the fix (one asked
// "After “<the fix's label>”"); no question names a chapter that does
// not exist.
func TestEveryChapterAsks(t *testing.T) {
	book := Build(30 * time.Second)
	for _, ch := range book {
		if len(ch.Ask) == 0 {
			t.Errorf("%s asks nothing", ch.Slug)
		}
		if ch.Part == partMistakes {
			fix := ""
			for _, a := range ch.Actions {
				if a.ID == "lab-patch" {
					fix = a.Label
				}
			}
			afterFix := "After “" + fix + "”"
			switch {
			case fix == "":
				t.Errorf("%s is a mistake with no fix (no lab patch)", ch.Slug)
			case len(ch.Ask) < 2:
				t.Errorf("%s is a mistake but asks %d question(s): it must ask before the mistake shows and after the fix", ch.Slug, len(ch.Ask))
			case strings.HasPrefix(ch.Ask[0].When, afterFix):
				t.Errorf("%s first asks %q: it must ask before the mistake shows", ch.Slug, ch.Ask[0].When)
			case !slices.ContainsFunc(ch.Ask, func(q Question) bool { return strings.HasPrefix(q.When, afterFix) }):
				t.Errorf("%s asks nothing %s, the fix", ch.Slug, afterFix)
			}
		}
		for i, q := range ch.Ask {
			if q.Text == "" || q.When == "" || len(q.Choices) < 2 {
				t.Errorf("%s question %d: %+v", ch.Slug, i, q)
			}
			for j, c := range q.Choices {
				if c.Text == "" || c.Shows == nil {
					t.Errorf("%s question %d choice %d has no text or no event that shows it", ch.Slug, i, j)
				}
			}
		}
	}
	for at, q := range stepQuestions {
		if q.Text == "" || q.When == "" || len(q.Choices) < 2 {
			t.Errorf("step mode's question at %q: %+v", at, q)
		}
		for j, c := range q.Choices {
			if c.Text == "" || c.Shows == nil {
				t.Errorf("step mode's question at %q choice %d has no text or no event that shows it", at, j)
			}
		}
	}
	for slug := range questions {
		if _, _, ok := book.Find(slug); !ok {
			t.Errorf("questions for %q, which is no chapter", slug)
		}
	}
}

// TestVoteGradedByWhatTheServerDid: the check-then-insert race can go
// either way, and the vote's right answer is the way it went. The
// narrator reads the events from the hub in its own goroutine and writes
// the grade into the room; an event while the vote is still open grades
// nothing.
func TestVoteGradedByWhatTheServerDid(t *testing.T) {
	n, r := narrating(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n.Start(ctx)

	change := func(edit func(*room.State) error) {
		t.Helper()
		if _, _, err := r.Change(ctx, edit); err != nil {
			t.Fatal(err)
		}
	}
	// graded waits, bounded, for the room's vote to be graded.
	graded := func() *room.PollOutcome {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			st, _, changed := r.Watch()
			if st.Poll != nil && st.Poll.Outcome != nil {
				return st.Poll.Outcome
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("the vote was not graded: %+v", st.Poll)
				return nil
			}
		}
	}
	// ticked waits, bounded, for the room to hold an item the narrator
	// ticked in the run under way: it has read the events that ticked it.
	ticked := func() {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			st, _, changed := r.Watch()
			if slices.ContainsFunc(st.WatchedOf(st.LessonRuns), func(t Tick) bool { return t.Seen }) {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("the narrator did not tick: %+v", st.Watched)
			}
		}
	}
	ev := func(kind live.Kind, key, req string, status int) {
		n.hub.Publish(live.Event{Kind: kind, Scope: "s", Key: key, OrderID: "A-" + key, Request: req, Status: status})
	}

	cases := []struct {
		name   string
		events func(key string)
		want   int
	}{
		{"every request looked before any inserted: several charges", func(key string) {
			ev(live.Received, key, "rq_1"+key, 0)
			ev(live.Received, key, "rq_2"+key, 0)
			ev(live.Charged, key, "rq_1"+key, 0)
			ev(live.Charged, key, "rq_2"+key, 0)
		}, 0},
		{"the first inserted before the second looked: one charge, a 409", func(key string) {
			ev(live.Received, key, "rq_1"+key, 0)
			ev(live.Charged, key, "rq_1"+key, 0)
			ev(live.Received, key, "rq_2"+key, 0)
			ev(live.Conflict, key, "rq_2"+key, http.StatusConflict)
			ev(live.Completed, key, "rq_1"+key, http.StatusCreated)
		}, 1},
		{"one replayed while another still ran, which then charged: several charges", func(key string) {
			ev(live.Received, key, "rq_1"+key, 0)
			ev(live.Received, key, "rq_2"+key, 0)
			ev(live.Charged, key, "rq_1"+key, 0)
			ev(live.Completed, key, "rq_1"+key, http.StatusCreated)
			ev(live.Received, key, "rq_3"+key, 0)
			ev(live.Replayed, key, "rq_3"+key, http.StatusCreated)
			ev(live.Charged, key, "rq_2"+key, 0)
			ev(live.Completed, key, "rq_2"+key, http.StatusCreated)
		}, 0},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			change(func(s *room.State) error { s.SetLesson("check-then-insert"); s.OpenPoll(0, 2); return nil })
			_ = n.Version() // the narrator follows the new run
			id := r.Load().Poll.ID
			// While the vote is open, what happens grades nothing: two
			// charges of one key, which tick the chapter's first item.
			ev(live.Charged, "open", "rq_open", 0)
			ev(live.Charged, "open", "rq_open2", 0)
			ticked()
			if p := r.Load().Poll; p.Outcome != nil {
				t.Fatalf("an open vote was graded: %+v", p.Outcome)
			}
			change(func(s *room.State) error { return s.ClosePoll(id) })
			c.events(string(rune('a' + i)))
			o := graded()
			if o.Choice != c.want {
				t.Fatalf("graded %d (%s), want %d", o.Choice, o.Said, c.want)
			}
			if o.Row == "" || o.Said == "" {
				t.Fatalf("the grade names no row or says nothing: %+v", o)
			}
			// The count is the one at the event that answered: the
			// words say so, since the order's chip on the board counts
			// the charges that came after it too.
			if c.want == 0 && !strings.HasSuffix(o.Said, "; at that moment the books held 2 charges for the order, 2 for the key.") {
				t.Errorf("the grade says %q, want the count it read named as the count at that moment", o.Said)
			}
		})
	}
}

// TestPersonalDataKeyAsksAgainAfterTheFix: the personal-data chapter has
// a fix (“Use a random key”, which turns the lab's e-mail key off) and
// asks after it too, graded by what the server did: the new order charged
// under a random key of its own is the first choice; a 422 for a key that
// is still the customer's address the second.
func TestPersonalDataKeyAsksAgainAfterTheFix(t *testing.T) {
	book := Build(30 * time.Second)
	_, ch, ok := book.Find("personal-data-key")
	if !ok {
		t.Fatal("no personal-data-key chapter")
	}
	var fix *Action
	for i, a := range ch.Actions {
		if a.ID == "lab-patch" {
			fix = &ch.Actions[i]
		}
	}
	if fix == nil || !fix.Presenter || len(ch.Ask) < 2 {
		t.Fatalf("the chapter's fix %+v, %d questions: want a presenter's lab patch and a question after it", fix, len(ch.Ask))
	}
	var patch room.LabSettings
	patch.Client.PersonalDataKey = true
	if err := json.Unmarshal([]byte(fix.Arg), &patch); err != nil || patch.Client.PersonalDataKey {
		t.Fatalf("the fix %s leaves the e-mail key on (%v)", fix.Arg, err)
	}

	n, r := narrating(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n.Start(ctx)
	change := func(edit func(*room.State) error) {
		t.Helper()
		if _, _, err := r.Change(ctx, edit); err != nil {
			t.Fatal(err)
		}
	}
	graded := func() *room.PollOutcome {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			st, _, changed := r.Watch()
			if st.Poll != nil && st.Poll.Outcome != nil {
				return st.Poll.Outcome
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("the vote was not graded: %+v", st.Poll)
				return nil
			}
		}
	}
	for _, c := range []struct {
		name string
		ev   live.Event
		want int
	}{
		{"the new order charged under a random key", live.Event{Kind: live.Charged, Scope: "s", Key: "3f9c2a71-5b1e-4c1d-9a53-0f6e2c1d8b47", OrderID: "B-2", Request: "rq_b2"}, 0},
		{"the customer's address still the key", live.Event{Kind: live.Mismatch, Scope: "s", Key: "mai@example.com", OrderID: "B-3", Request: "rq_b3", Status: http.StatusUnprocessableEntity}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			change(func(s *room.State) error {
				s.SetLesson("personal-data-key")
				s.OpenPoll(1, len(ch.Ask[1].Choices))
				return nil
			})
			_ = n.Version() // the narrator follows the new run
			id := r.Load().Poll.ID
			change(func(s *room.State) error { return s.ClosePoll(id) })
			n.hub.Publish(c.ev)
			if o := graded(); o.Choice != c.want {
				t.Fatalf("graded %d (%s), want %d (%s)", o.Choice, o.Said, c.want, ch.Ask[1].Choices[c.want].Text)
			}
		})
	}
}
