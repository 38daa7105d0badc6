package room

import (
	"testing"
	"time"
)

// TestStepBarIsBoundedAndRevocable: the step bar goes to one player of
// the scores, for StepBarFor at most, and back to the presenter when the
// time is up, when the presenter takes it, when the puzzle is solved or
// the chapter changes, and when the student's nickname is hidden or
// given up; a hidden player cannot be given it.
func TestStepBarIsBoundedAndRevocable(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	lim := DefaultPollLimits
	fresh := func(t *testing.T) (State, string) {
		t.Helper()
		s := Defaults()
		s.SetLesson("check-then-insert")
		if err := s.SetNick("session:mai", "addr", "Mai", lim); err != nil {
			t.Fatal(err)
		}
		if err := s.SetNick("session:bo", "addr", "Bo", lim); err != nil {
			t.Fatal(err)
		}
		if err := s.GiveStepBar(PlayerID("session:mai"), now); err != errNoPuzzle {
			t.Fatalf("a bar with no puzzle: %v", err)
		}
		s.StartPuzzle("anonymous", "P-1", "order P-1", 0)
		if err := s.GiveStepBar(PlayerID("session:mai"), now); err != nil {
			t.Fatal(err)
		}
		return s, "session:mai"
	}
	t.Run("the holder steps until the bound, nobody else does", func(t *testing.T) {
		s, mai := fresh(t)
		if _, ok := s.MayStep(mai, now.Add(StepBarFor-time.Second)); !ok {
			t.Fatal("Mai cannot step before the bound")
		}
		if _, ok := s.MayStep("session:bo", now); ok {
			t.Fatal("Bo steps with Mai's bar")
		}
		if _, ok := s.MayStep(mai, now.Add(StepBarFor)); ok {
			t.Fatal("Mai still steps once the bound is reached")
		}
	})
	t.Run("taken back, solved, or a new chapter: the bar is the presenter's", func(t *testing.T) {
		for name, end := range map[string]func(s *State){
			"taken back": func(s *State) {
				if err := s.TakeStepBar(); err != nil {
					t.Fatal(err)
				}
			},
			"solved": func(s *State) {
				s.CountStep(s.Puzzle.ID)
				if !s.BooksCount(s.Puzzle.ID, 2) || !s.Puzzle.Solved || s.Puzzle.SolvedSteps != 1 {
					t.Fatalf("solve: %+v", s.Puzzle)
				}
			},
			"a new chapter":       func(s *State) { s.SetLesson("lock-in-memory") },
			"the nickname hidden": func(s *State) { s.HidePlayer(PlayerID("session:mai"), true) },
			"the nickname given up": func(s *State) {
				if err := s.SetNick("session:mai", "addr", "", lim); err != nil {
					t.Fatal(err)
				}
			},
		} {
			s, mai := fresh(t)
			end(&s)
			if _, ok := s.MayStep(mai, now); ok {
				t.Errorf("%s: Mai still steps", name)
			}
		}
	})
	t.Run("a hidden player is not given the bar, nor one that does not exist", func(t *testing.T) {
		s, _ := fresh(t)
		s.HidePlayer(PlayerID("session:bo"), true)
		if err := s.GiveStepBar(PlayerID("session:bo"), now); err == nil {
			t.Fatal("a hidden player got the bar")
		}
		if err := s.GiveStepBar("nobody", now); err == nil {
			t.Fatal("nobody got the bar")
		}
	})
	t.Run("a step counted for nothing is taken back, never below zero, never once solved", func(t *testing.T) {
		s, _ := fresh(t)
		id := s.Puzzle.ID
		if s.UncountStep(id) {
			t.Fatal("uncounted below zero")
		}
		s.CountStep(id)
		s.CountStep(id)
		s.UncountStep(id)
		if s.Puzzle.Steps != 1 {
			t.Fatalf("%d steps", s.Puzzle.Steps)
		}
		if s.BooksCount(id, 1); s.Puzzle.Solved {
			t.Fatal("one charge solved the puzzle")
		}
		s.BooksCount(id, 3)
		if s.CountStep(id) || s.UncountStep(id) || s.Puzzle.SolvedSteps != 1 || s.Puzzle.Charges != 3 {
			t.Fatalf("a solved puzzle's count moved: %+v", s.Puzzle)
		}
	})
}

// TestClearScores: every score goes back to nothing; the nicknames and
// the hidden flags stay.
func TestClearScores(t *testing.T) {
	s := Defaults()
	if err := s.SetNick("session:mai", "addr", "Mai", DefaultPollLimits); err != nil {
		t.Fatal(err)
	}
	s.SetLesson("response-lost")
	s.OpenPoll(0, 2)
	if err := s.Answer(s.Poll.ID, "session:mai", "addr", 1, DefaultPollLimits); err != nil {
		t.Fatal(err)
	}
	_ = s.ClosePoll(s.Poll.ID)
	s.GradePoll(s.Poll.ID, PollOutcome{Choice: 1, Said: "x"})
	s.HidePlayer(PlayerID("session:mai"), true)
	before := s.Scores
	if p, _ := s.Player("session:mai"); p.Right != 1 || p.Graded != 1 {
		t.Fatalf("before: %+v", p)
	}
	s.ClearScores()
	if p, _ := s.Player("session:mai"); p.Right != 0 || p.Graded != 0 || p.Nick != "Mai" || !p.Hidden {
		t.Fatalf("after: %+v", p)
	}
	if p := before.Players["session:mai"]; p.Right != 1 {
		t.Fatal("the old snapshot changed: the room's states are immutable")
	}
}

// TestPuzzleCountsFromItsStart: a puzzle on an order the books held one
// charge for already is solved by two more, not by one; books that do
// not answer leave the outcome unknown until a count succeeds.
func TestPuzzleCountsFromItsStart(t *testing.T) {
	s := Defaults()
	s.SetLesson("check-then-insert")
	s.StartPuzzle("anonymous", "P-1", "order P-1", 1)
	id := s.Puzzle.ID
	s.CountStep(id)
	if !s.BooksSilent(id) || !s.Puzzle.Unknown || s.BooksSilent(id) {
		t.Fatalf("the books did not answer: %+v", s.Puzzle)
	}
	if !s.BooksCount(id, 2) || s.Puzzle.Solved || s.Puzzle.Unknown || s.Puzzle.Charges != 2 {
		t.Fatalf("one charge beyond the start's one: %+v", s.Puzzle)
	}
	if got := s.Puzzle.Books(); got != "the books hold 2 charges for the order, 1 of them from the held requests" {
		t.Fatalf("the board's line: %q", got)
	}
	s.CountStep(id)
	if !s.BooksCount(id, 3) || !s.Puzzle.Solved || s.Puzzle.SolvedSteps != 2 {
		t.Fatalf("two charges beyond the start's one: %+v", s.Puzzle)
	}
	if s.BooksSilent(id) || s.Puzzle.Unknown {
		t.Fatalf("a solved puzzle became unknown: %+v", s.Puzzle)
	}
}

// TestPuzzleReleasedIsNotSolved: a puzzle whose held requests step mode
// let go on its own (turned off) ends unsolved, with no score, however
// many charges the books then hold; it takes no more steps and no step
// bar, and a solved puzzle is not released after.
func TestPuzzleReleasedIsNotSolved(t *testing.T) {
	s := Defaults()
	s.SetLesson("check-then-insert")
	s.StartPuzzle("anonymous", "P-1", "order P-1", 0)
	id := s.Puzzle.ID
	s.CountStep(id)
	if !s.ReleasePuzzle(StepModeOffReleased) || s.ReleasePuzzle(StepModeOffReleased) || s.Puzzle.Released != StepModeOffReleased {
		t.Fatalf("released by step mode off: %+v", s.Puzzle)
	}
	if s.CountStep(id) || s.Puzzle.Steps != 1 {
		t.Fatalf("a released puzzle counted a step: %+v", s.Puzzle)
	}
	if !s.BooksCount(id, 2) || s.Puzzle.Solved || s.Puzzle.SolvedSteps != 0 || s.Puzzle.Charges != 2 || !s.Puzzle.Over() {
		t.Fatalf("the books' two charges after release: %+v", s.Puzzle)
	}
	if s.BooksCount(id, 2) {
		t.Fatalf("the same count changed a released puzzle again: %+v", s.Puzzle)
	}
	if err := s.GiveStepBar("anyone", time.Now()); err == nil {
		t.Fatalf("the step bar given on a released puzzle")
	}

	s.StartPuzzle("anonymous", "P-2", "order P-2", 0)
	id = s.Puzzle.ID
	s.CountStep(id)
	s.BooksCount(id, 2)
	if !s.Puzzle.Solved || s.ReleasePuzzle(StepModeOffReleased) || s.Puzzle.Released != "" {
		t.Fatalf("a solved puzzle released after: %+v", s.Puzzle)
	}
}
