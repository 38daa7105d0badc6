package room

import (
	"context"
	"fmt"
	"testing"

	"paytwice/pay"
)

// TestPollRules: one ballot per session, changed freely while the vote
// is open and never after; the box bounded in all and per address; an
// open vote not graded, a closed one graded once; a vote of a chapter
// the class has left refused. Every change goes through a room on memory
// peers, as a server on its own runs it.
func TestPollRules(t *testing.T) {
	ctx := context.Background()
	r := New(Memory(), "test-id", "", Defaults, func(_, _ State) {}, t.Logf)
	change := func(edit func(*State) error) error {
		_, _, err := r.Change(ctx, edit)
		return err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	refused := func(err error, code pay.Code) {
		t.Helper()
		if err == nil || pay.ErrorCode(err) != code {
			t.Fatalf("got %v, want a refusal %s", err, code)
		}
	}
	lim := PollLimits{Ballots: 4, PerAddress: 2}

	refused(change(func(s *State) error { return s.Answer(1, "a", "x", 0, lim) }), pay.EINVALID)
	must(change(func(s *State) error { s.SetLesson("response-lost"); s.OpenPoll(0, 4); return nil }))
	id := r.Load().Poll.ID

	must(change(func(s *State) error { return s.Answer(id, "phone-1", "addr-1", 0, lim) }))
	must(change(func(s *State) error { return s.Answer(id, "phone-1", "addr-1", 1, lim) }))
	must(change(func(s *State) error { return s.Answer(id, "phone-2", "addr-1", 1, lim) }))
	if p := r.Load().Poll; p.Answered() != 2 || fmt.Sprint(p.Split()) != "[0 2 0 0]" {
		t.Fatalf("two phones, one of which changed its answer: %d answered, split %v", p.Answered(), p.Split())
	}
	refused(change(func(s *State) error { return s.Answer(id, "phone-3", "addr-1", 0, lim) }), pay.EBUSY)
	refused(change(func(s *State) error { return s.Answer(id, "phone-3", "addr-2", 4, lim) }), pay.EINVALID)
	refused(change(func(s *State) error { return s.Answer(id, "phone-3", "addr-2", -1, lim) }), pay.EINVALID)
	must(change(func(s *State) error { return s.Answer(id, "phone-3", "addr-2", 2, lim) }))
	must(change(func(s *State) error { return s.Answer(id, "phone-4", "addr-3", 3, lim) }))
	refused(change(func(s *State) error { return s.Answer(id, "phone-5", "addr-4", 3, lim) }), pay.EBUSY)
	refused(change(func(s *State) error { return s.Answer(id+1, "phone-1", "addr-1", 0, lim) }), pay.EINVALID)

	if st := r.Load(); st.GradePoll(id, PollOutcome{Choice: 1}) {
		t.Fatal("an open vote was graded: the class must predict before the server shows the outcome")
	}
	must(change(func(s *State) error { return s.ClosePoll(id) }))
	refused(change(func(s *State) error { return s.Answer(id, "phone-1", "addr-1", 2, lim) }), pay.EINVALID)
	if got := r.Load().Poll.Split(); fmt.Sprint(got) != "[0 2 1 1]" {
		t.Fatalf("after the close the split is %v", got)
	}
	must(change(func(s *State) error {
		if !s.GradePoll(id, PollOutcome{Choice: 1, Said: "replayed"}) {
			return fmt.Errorf("a closed vote was not graded")
		}
		if s.GradePoll(id, PollOutcome{Choice: 0}) {
			return fmt.Errorf("a graded vote was graded again")
		}
		return nil
	}))
	must(change(func(s *State) error { return s.RevealPoll(id) }))
	if p := r.Load().Poll; p.Phase != PollRevealed || p.Outcome == nil || p.Outcome.Choice != 1 {
		t.Fatalf("after the reveal: %+v", p)
	}

	must(change(func(s *State) error { s.SetLesson("response-lost"); return nil }))
	if r.Load().Poll != nil {
		t.Fatal("a vote outlived its chapter's run")
	}
	refused(change(func(s *State) error { return s.Answer(id, "phone-1", "addr-1", 0, lim) }), pay.EINVALID)
}
