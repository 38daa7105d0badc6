package room

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestNicknamesBoundedAndScored: the nicknames of a class are bounded in
// all and per address like the ballots; a student with one is scored by
// each graded vote, one without is not; the scores survive the room's
// stored copy (its JSON) and a reset.
func TestNicknamesBoundedAndScored(t *testing.T) {
	lim := PollLimits{Ballots: 4, PerAddress: 2}
	s := Defaults()
	s.SetLesson("response-lost")
	for i := range 2 {
		if err := s.SetNick(fmt.Sprintf("s%d", i), "net-a", fmt.Sprintf("A%d", i), lim); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetNick("s2", "net-a", "A2", lim); err == nil {
		t.Fatal("a third nickname from one address was taken")
	}
	if err := s.SetNick("s0", "net-a", "A0 again", lim); err != nil {
		t.Fatalf("renaming is not a new nickname: %v", err)
	}
	for i := 2; i < 4; i++ {
		if err := s.SetNick(fmt.Sprintf("s%d", i), "net-b", fmt.Sprintf("B%d", i), lim); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetNick("s9", "net-c", "C", lim); err == nil {
		t.Fatal("a fifth nickname was taken in a class of four")
	}

	s.OpenPoll(0, 3)
	id := s.Poll.ID
	for session, choice := range map[string]int{"s0": 2, "s1": 1, "anon": 2} {
		if err := s.Answer(id, session, "net-a", choice, DefaultPollLimits); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ClosePoll(id); err != nil {
		t.Fatal(err)
	}
	if !s.GradePoll(id, PollOutcome{Choice: 2}) || s.GradePoll(id, PollOutcome{Choice: 1}) {
		t.Fatal("graded not exactly once")
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.Reset()
	for session, want := range map[string][2]int{"s0": {1, 1}, "s1": {0, 1}, "s2": {0, 0}} {
		p, ok := back.Player(session)
		if !ok || p.Right != want[0] || p.Graded != want[1] {
			t.Errorf("%s: %+v, want %d right of %d", session, p, want[0], want[1])
		}
	}
	if _, ok := back.Player("anon"); ok {
		t.Error("a student with no nickname has a score")
	}
}
