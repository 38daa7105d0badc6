package room

import (
	"fmt"
	"time"

	"paytwice/pay"
)

// Be the scheduler: on a chapter whose mistake is a race, step mode holds
// two or more requests of one order, and the class (or one student the
// presenter hands the step bar to) chooses which held request goes on
// next, until the order is charged twice. The puzzle is room state, like
// the vote: every server of the class shows the same one, and a restarted
// server finds it again. Whether it is solved is read from the books (the
// order's charges), never decided by a script of the right order.

// Puzzle is the class's "be the scheduler" puzzle on one order.
type Puzzle struct {
	// ID counts the puzzles started in the room.
	ID uint64 `json:"id"`
	// Lesson and Runs are the chapter and its run the puzzle belongs to.
	Lesson string `json:"lesson"`
	Runs   uint64 `json:"runs"`
	// Scope and OrderID are the order whose charges solve it; Subject is
	// how the board names it.
	Scope   string `json:"scope"`
	OrderID string `json:"order_id"`
	Subject string `json:"subject"`
	// Steps counts the steps taken on the puzzle's held requests (Next,
	// Finish or Play) since it started, by whoever held the step bar.
	Steps int `json:"steps"`
	// Play names the last Play counted as a step: each server that holds
	// some of the puzzle's requests counts the Play it lets them go on,
	// and the one step is counted once.
	Play string `json:"play,omitempty"`
	// PlayLetGo says a server let one of its requests go on that Play, so
	// the step happened; PlayTakenBack that the server that counted it
	// took it back, having found nothing of its own left to let go (its
	// requests went on by themselves meanwhile). Whichever comes first,
	// the Play ends counted once if any server let one go.
	PlayLetGo     bool `json:"play_let_go,omitempty"`
	PlayTakenBack bool `json:"play_taken_back,omitempty"`
	// Before is the order's charges in the books when the puzzle
	// started, which no held request made: the puzzle takes two more.
	Before int `json:"before,omitempty"`
	// Charges is the order's charges at the books' last answer (Before
	// until the first); Unknown says the books did not answer the last
	// count, so whether the held requests charged twice is not known
	// until a later count succeeds.
	Charges int  `json:"charges,omitempty"`
	Unknown bool `json:"unknown,omitempty"`
	// Solved is set once the books hold two charges for the order beyond
	// Before; SolvedSteps is the steps it took.
	Solved      bool `json:"solved,omitempty"`
	SolvedSteps int  `json:"solved_steps,omitempty"`
	// Released says why the held requests went on without the class
	// (step mode turned off, or the time limit let one go): the puzzle
	// is over, unsolved and with no score, whatever the books then hold,
	// since nobody scheduled the charges they show.
	Released string `json:"released,omitempty"`
	// Bar is the student the presenter gave the step bar to, nil while
	// only the presenter steps.
	Bar *StepBar `json:"bar,omitempty"`
}

// StepBar is one student's hold on the step bar: the presenter gave it,
// for the puzzle's held requests only, until Until at most.
type StepBar struct {
	// Session is the student's scope (the players' key); Player its
	// public id and Nick its nickname, as the board names it.
	Session string    `json:"session"`
	Player  string    `json:"player"`
	Nick    string    `json:"nick"`
	Until   time.Time `json:"until"`
}

// StepBarFor is how long a student keeps the step bar at most: a puzzle
// takes a few minutes, and a bar forgotten in a pocket goes back by
// itself.
const StepBarFor = 10 * time.Minute

// StartPuzzle replaces any puzzle with a new one on the order (scope,
// orderID) of the chapter the room runs, which the books hold before
// charges for already; the step bar goes back to the presenter.
func (s *State) StartPuzzle(scope, orderID, subject string, before int) {
	var id uint64 = 1
	if s.Puzzle != nil {
		id = s.Puzzle.ID + 1
	}
	s.Puzzle = &Puzzle{ID: id, Lesson: s.Lesson, Runs: s.LessonRuns, Scope: scope, OrderID: orderID, Subject: subject,
		Before: before, Charges: before}
}

// CurrentPuzzle is the room's puzzle if it belongs to the chapter run
// the class is on.
func (s State) CurrentPuzzle() (*Puzzle, bool) {
	p := s.Puzzle
	if p == nil || p.Lesson != s.Lesson || p.Runs != s.LessonRuns {
		return nil, false
	}
	return p, true
}

// errNoPuzzle is the refusal of an edit that needs a puzzle under way.
var errNoPuzzle = pay.Errorf(pay.EINVALID, "No puzzle is under way: the presenter starts one from a held request on the board.")

// puzzleAt is the current puzzle if it is puzzle id (0: whichever),
// copied for an edit.
func (s *State) puzzleAt(id uint64) (Puzzle, error) {
	p, ok := s.CurrentPuzzle()
	if !ok {
		return Puzzle{}, errNoPuzzle
	}
	if id != 0 && p.ID != id {
		return Puzzle{}, pay.Errorf(pay.EINVALID, "That puzzle has been replaced by another one.")
	}
	return *p, nil
}

// CountStep counts one step taken on puzzle id while it is unsolved; it
// reports whether it counted one. It is counted before the step runs,
// so that the charge the step makes finds it counted.
func (s *State) CountStep(id uint64) bool {
	p, err := s.puzzleAt(id)
	if err != nil || p.Solved || p.Released != "" {
		return false
	}
	p.Steps++
	s.Puzzle = &p
	return true
}

// CountPlay counts the Play named play as one step on puzzle id while
// it is unsolved, unless another server counted it already; it reports
// whether it counted one.
func (s *State) CountPlay(id uint64, play string) bool {
	if p, ok := s.CurrentPuzzle(); ok && p.Play == play {
		return false
	}
	if !s.CountStep(id) {
		return false
	}
	s.Puzzle.Play, s.Puzzle.PlayLetGo, s.Puzzle.PlayTakenBack = play, false, false
	return true
}

// UncountPlay takes back the step counted for the Play named play on
// puzzle id, by the server that counted it and let nothing go, unless
// another server has let one go on it (or the puzzle is solved); it
// reports whether it took it back.
func (s *State) UncountPlay(id uint64, play string) bool {
	p, err := s.puzzleAt(id)
	if err != nil || p.Play != play || p.PlayLetGo || p.PlayTakenBack || !s.UncountStep(id) {
		return false
	}
	s.Puzzle.PlayTakenBack = true
	return true
}

// PlayLetOneGo records that a server let a request go on the Play named
// play, which another server counted: a count taken back meanwhile is
// counted again, and none is taken back after. It reports whether the
// puzzle changed.
func (s *State) PlayLetOneGo(id uint64, play string) bool {
	p, err := s.puzzleAt(id)
	if err != nil || p.Play != play || p.PlayLetGo {
		return false
	}
	if p.PlayTakenBack && !s.CountStep(id) {
		return false
	}
	s.Puzzle.PlayLetGo, s.Puzzle.PlayTakenBack = true, false
	return true
}

// UncountStep takes back a step counted for a step that did not happen
// (nothing was held to let go), unless the puzzle is solved meanwhile.
func (s *State) UncountStep(id uint64) bool {
	p, err := s.puzzleAt(id)
	if err != nil || p.Solved || p.Steps == 0 {
		return false
	}
	p.Steps--
	s.Puzzle = &p
	return true
}

// BooksCount records the books' count of puzzle id's order's charges
// while it is unsolved: the outcome is known again, and two charges
// beyond Before solve it with the steps taken by then. It reports
// whether the puzzle changed.
func (s *State) BooksCount(id uint64, charges int) bool {
	p, err := s.puzzleAt(id)
	if err != nil || p.Solved || (p.Charges == charges && !p.Unknown && (charges < p.Before+2 || p.Released != "")) {
		return false
	}
	p.Charges, p.Unknown = charges, false
	if charges >= p.Before+2 && p.Released == "" {
		p.Solved, p.SolvedSteps, p.Bar = true, p.Steps, nil
	}
	s.Puzzle = &p
	return true
}

// StepModeOffReleased is why a puzzle ends when step mode is turned off
// under it: its held requests go on by themselves.
const StepModeOffReleased = "Step mode was turned off: the requests ran on their own"

// TimeLimitReleased is why a puzzle ends when one of its held requests
// waits out step mode's time limit: it goes on by itself, and what it
// charges is nobody's step.
const TimeLimitReleased = "The time limit let a held request go: it ran on its own"

// ClientGoneReleased is why a puzzle ends when the client of one of its
// held requests goes away (a tab closed): the request goes on by itself.
const ClientGoneReleased = "The client of a held request went away: it ran on its own"

// ReleasePuzzle ends the unsolved puzzle under way, if any, because its
// held requests go on without the class, for the reason why
// (StepModeOffReleased, TimeLimitReleased, ClientGoneReleased): it is
// not solved and scores nothing, whatever the books hold after; the step
// bar goes back to the presenter. It is recorded before the requests go
// on, so that their charges find it. It reports whether the puzzle
// changed.
func (s *State) ReleasePuzzle(why string) bool {
	p, err := s.puzzleAt(0)
	if err != nil || p.Solved || p.Released != "" {
		return false
	}
	p.Released, p.Bar = why, nil
	s.Puzzle = &p
	return true
}

// Over reports whether the puzzle has ended, solved or released.
func (p Puzzle) Over() bool { return p.Solved || p.Released != "" }

// BooksSilent records that the books did not answer a count of puzzle
// id's order's charges: until one succeeds, its outcome is unknown. It
// reports whether the puzzle changed.
func (s *State) BooksSilent(id uint64) bool {
	p, err := s.puzzleAt(id)
	if err != nil || p.Solved || p.Unknown {
		return false
	}
	p.Unknown = true
	s.Puzzle = &p
	return true
}

// Books says what the books held for the order at their last answer,
// as the board words it.
func (p Puzzle) Books() string {
	if p.Before == 0 || p.Charges < p.Before {
		return fmt.Sprintf("the books hold %d %s for the order", p.Charges, chargesWord(p.Charges))
	}
	return fmt.Sprintf("the books hold %d %s for the order, %d of them from the held requests", p.Charges, chargesWord(p.Charges), p.Charges-p.Before)
}

func chargesWord(n int) string {
	if n == 1 {
		return "charge"
	}
	return "charges"
}

// EndPuzzle ends the puzzle, solved or not; the step bar goes back to
// the presenter.
func (s *State) EndPuzzle() error {
	if _, ok := s.CurrentPuzzle(); !ok {
		return errNoPuzzle
	}
	s.Puzzle = nil
	return nil
}

// GiveStepBar hands the step bar of the puzzle under way to the player
// with the public id, until now+StepBarFor; whoever held it before
// loses it.
func (s *State) GiveStepBar(player string, now time.Time) error {
	p, err := s.puzzleAt(0)
	if err != nil {
		return err
	}
	if p.Solved {
		return pay.Errorf(pay.EINVALID, "The puzzle is solved: start another one before you hand the step bar on.")
	}
	if p.Released != "" {
		return pay.Errorf(pay.EINVALID, "The puzzle is over (%s): start another one before you hand the step bar on.", p.Released)
	}
	for session, pl := range s.playerMap() {
		if pl.ID != player {
			continue
		}
		if pl.Hidden {
			return pay.Errorf(pay.EINVALID, "%q is hidden from the board: show the nickname again before you give it the step bar.", pl.Nick)
		}
		p.Bar = &StepBar{Session: session, Player: pl.ID, Nick: pl.Nick, Until: now.Add(StepBarFor)}
		s.Puzzle = &p
		return nil
	}
	return pay.Errorf(pay.ENOTFOUND, "No student goes by the player id %q: a student picks a nickname on the phone first.", pay.Truncate(player, 20))
}

// TakeStepBar gives the step bar back to the presenter.
func (s *State) TakeStepBar() error {
	p, err := s.puzzleAt(0)
	if err != nil {
		return err
	}
	if p.Bar == nil {
		return pay.Errorf(pay.EINVALID, "Only the presenter holds the step bar already.")
	}
	p.Bar = nil
	s.Puzzle = &p
	return nil
}

// BarHolder is the step bar of the puzzle under way while a student
// holds it at now.
func (s State) BarHolder(now time.Time) (*Puzzle, *StepBar, bool) {
	p, ok := s.CurrentPuzzle()
	if !ok || p.Over() || p.Bar == nil || !now.Before(p.Bar.Until) {
		return nil, nil, false
	}
	return p, p.Bar, true
}

// MayStep reports whether session holds the step bar at now, and the
// puzzle it holds it for.
func (s State) MayStep(session string, now time.Time) (*Puzzle, bool) {
	p, bar, ok := s.BarHolder(now)
	if !ok || session == "" || bar.Session != session {
		return nil, false
	}
	// A student whose nickname the presenter hid, or who took it away,
	// no longer holds the bar.
	if pl, ok := s.Player(session); !ok || pl.Hidden || pl.ID != bar.Player {
		return nil, false
	}
	return p, true
}

// ClearScores sets every player's score back to nothing; nicknames, and
// which of them are hidden, stay.
func (s *State) ClearScores() {
	if len(s.playerMap()) == 0 {
		return
	}
	next := Scores{Shown: s.Scores.Shown, Players: make(map[string]Player, len(s.Scores.Players))}
	for k, v := range s.Scores.Players {
		v.Right, v.Graded = 0, 0
		next.Players[k] = v
	}
	s.Scores = &next
}
