package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// Be the scheduler (room.Puzzle): on a chapter whose mistake is a race,
// the presenter starts a puzzle on the order of requests step mode holds;
// whoever holds the step bar (the presenter, or one student the presenter
// hands it to) chooses which held request goes on next, until the books
// show the held requests charged the order twice. Every step taken on the order's requests
// is counted; the judge reads the order's charges from the books after
// each charge of that order, never from a script of the right moves.

// puzzleHandlers are the puzzle's endpoints; each holds only what it uses.
type puzzleHandlers struct {
	room *room.Room[room.State]
	book lesson.Book
	// held is step mode's held requests, on every server of the class;
	// charges counts an order's charges in the books.
	held    func() step.State
	charges func(ctx context.Context, scope, orderID string) (int, error)
	// now is real time: the step bar's bound is a wall-clock one, which
	// the demo clock's warps do not move.
	now func() time.Time
}

func (s *Server) puzzleHandlers() puzzleHandlers {
	return puzzleHandlers{room: s.room, book: s.teaching.lessons, held: s.payments.steps.State, charges: orderChargeCount{s.db}.count, now: time.Now}
}

// orderChargeCount counts the charges the books hold for one order, the
// lab's unguarded table included (pay.Store's ChargesByOrder).
type orderChargeCount struct {
	books interface {
		ChargesByOrder(ctx context.Context, scope, orderID string) ([]pay.Charge, error)
	}
}

func (o orderChargeCount) count(ctx context.Context, scope, orderID string) (int, error) {
	chs, err := o.books.ChargesByOrder(ctx, scope, orderID)
	return len(chs), err
}

func (h puzzleHandlers) routes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/api/puzzle", h.handleGet)
	e.POST("/api/puzzle/start", h.handleStart, presenterOnly)
	e.POST("/api/puzzle/end", h.handleEnd, presenterOnly)
	e.POST("/api/puzzle/bar", h.handleBar, presenterOnly)
}

// PuzzleStart is the body of POST /api/puzzle/start: a held request,
// whose order the puzzle is on.
type PuzzleStart struct {
	Request string `json:"request"`
}

// PuzzleBar is the body of POST /api/puzzle/bar: the player (by the id
// the board gives it) to hand the step bar to, "" to take it back.
type PuzzleBar struct {
	Player string `json:"player"`
}

// PuzzleState is GET /api/puzzle and the answer of the puzzle's actions.
type PuzzleState struct {
	// On: a puzzle is under way in the chapter the class is on.
	On      bool   `json:"on"`
	ID      uint64 `json:"id,omitempty"`
	Goal    string `json:"goal,omitempty"`
	OrderID string `json:"order_id,omitempty"`
	Steps   int    `json:"steps"`
	// Charges is the order's charges at the books' last answer, Before
	// those it had when the puzzle started; Unknown says the books did
	// not answer the last count. Solved, once the books hold two charges
	// beyond Before: SolvedSteps is the steps it took.
	Charges     int  `json:"charges"`
	Before      int  `json:"before"`
	Unknown     bool `json:"unknown"`
	Solved      bool `json:"solved"`
	SolvedSteps int  `json:"solved_steps,omitempty"`
	// Released says why the puzzle ended unsolved, its held requests let
	// go by something other than the class's steps (step mode turned
	// off): no steps are scored, whatever the books hold.
	Released string `json:"released,omitempty"`
	// Bar names the student who holds the step bar ("" for the
	// presenter), until BarUntil; Mine says the asker holds it.
	Bar      string     `json:"bar,omitempty"`
	BarUntil *time.Time `json:"bar_until,omitempty"`
	Mine     bool       `json:"mine"`
}

func (h puzzleHandlers) state(st room.State, r *http.Request) PuzzleState {
	p, ok := st.CurrentPuzzle()
	if !ok {
		return PuzzleState{}
	}
	out := PuzzleState{On: true, ID: p.ID, OrderID: p.OrderID, Steps: p.Steps, Solved: p.Solved, Charges: p.Charges, Before: p.Before, Unknown: p.Unknown, SolvedSteps: p.SolvedSteps, Released: p.Released}
	if _, ch, ok := h.book.Find(p.Lesson); ok {
		out.Goal = ch.Puzzle
	}
	if _, bar, ok := st.BarHolder(h.now()); ok {
		until := bar.Until
		out.Bar, out.BarUntil = bar.Nick, &until
		_, out.Mine = st.MayStep(callerScope(r), h.now())
	}
	return out
}

func (h puzzleHandlers) handleGet(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, h.state(h.room.Load(), c.Request()))
}

// handleStart starts a puzzle on the order of a held request: the
// chapter must have one, and step mode must hold two requests of the
// order or more, which the books have not charged twice already.
// puzzleChapters names the chapters that have a puzzle, as the lesson
// table says: “no idempotency key”, “check first, then insert” and “a
// lock in memory”.
func (h puzzleHandlers) puzzleChapters() string {
	var titles []string
	for _, ch := range h.book {
		if ch.Puzzle != "" {
			titles = append(titles, "“"+strings.TrimPrefix(ch.Title, "Mistake: ")+"”")
		}
	}
	if len(titles) < 2 {
		return strings.Join(titles, "")
	}
	return strings.Join(titles[:len(titles)-1], ", ") + " and " + titles[len(titles)-1]
}

func (h puzzleHandlers) handleStart(c echo.Context) error {
	var req PuzzleStart
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	ctx := c.Request().Context()
	st := h.room.Load()
	_, ch, ok := h.book.Find(st.Lesson)
	if !ok || ch.Puzzle == "" {
		return pay.Errorf(pay.EINVALID, "This chapter has no scheduler's puzzle: start one of %s.", h.puzzleChapters())
	}
	held := h.held().Held
	var first *step.HeldRequest
	for i := range held {
		if held[i].Request == req.Request {
			first = &held[i]
		}
	}
	if first == nil {
		return pay.Errorf(pay.ENOTFOUND, "The request %q is not held at a checkpoint now: turn step mode on, send the same order twice or more, then start the puzzle from one of its rows.", pay.Truncate(req.Request, 40))
	}
	if first.OrderID == "" {
		return pay.Errorf(pay.EINVALID, "The request %s has no order: the puzzle counts an order's charges.", first.Request)
	}
	same := 0
	for _, r := range held {
		if r.Scope == first.Scope && r.OrderID == first.OrderID {
			same++
		}
	}
	if same < 2 {
		return pay.Errorf(pay.EINVALID, "Step mode holds %d request of the order %s: a race takes two. Send the same order again (double-click Pay, or send 10 at once) while step mode is on.", same, printable(first.OrderID, 40))
	}
	// The charges the order has now are the puzzle's baseline: the held
	// requests must make two more. A held request past saving its
	// charge would hide its own in the baseline, so the puzzle starts
	// only while none of the order's is; the held requests are read
	// again after the books, as one may have moved meanwhile.
	before, err := h.charges(ctx, first.Scope, first.OrderID)
	if err != nil {
		return err
	}
	if r, ok := pastCharge(h.held().Held, first.Scope, first.OrderID); ok {
		return pay.Errorf(pay.EINVALID, "The request %s of the order %s is held at %q, past its charge: start the puzzle while the order's requests are held before they charge.", r.Request, printable(first.OrderID, 40), r.Checkpoint)
	}
	subject := "order " + printable(first.OrderID, 32)
	if _, _, err := h.room.Change(ctx, func(s *room.State) error {
		if s.Lesson != st.Lesson || s.LessonRuns != st.LessonRuns {
			return pay.Errorf(pay.ECONFLICT, "The class moved to another chapter meanwhile: start the puzzle again.")
		}
		s.StartPuzzle(first.Scope, first.OrderID, subject, before)
		return nil
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

// pastCharge is a held request of the order (scope, orderID) at a
// checkpoint where the charge it made, if any, is in the books already.
func pastCharge(held []step.HeldRequest, scope, orderID string) (step.HeldRequest, bool) {
	for _, r := range held {
		if r.Scope == scope && r.OrderID == orderID &&
			(r.Checkpoint == step.CheckSaved.String() || r.Checkpoint == step.CheckAnswered.String()) {
			return r, true
		}
	}
	return step.HeldRequest{}, false
}

func (h puzzleHandlers) handleEnd(c echo.Context) error {
	if _, _, err := h.room.Change(c.Request().Context(), (*room.State).EndPuzzle); err != nil {
		return err
	}
	return h.handleGet(c)
}

// handleBar hands the step bar to a student, or takes it back.
func (h puzzleHandlers) handleBar(c echo.Context) error {
	var req PuzzleBar
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	now := h.now()
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		if req.Player == "" {
			return s.TakeStepBar()
		}
		return s.GiveStepBar(req.Player, now)
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

// puzzleSummary is what the puzzle stands at, for the timeline's export.
func puzzleSummary(p *room.Puzzle) string {
	if p == nil {
		return "puzzle: none under way"
	}
	msg := fmt.Sprintf("puzzle %d on %s: %d step(s); %s", p.ID, p.Subject, p.Steps, p.Books())
	switch {
	case p.Solved:
		msg = fmt.Sprintf("puzzle %d on %s solved in %d step(s): %s", p.ID, p.Subject, p.SolvedSteps, p.Books())
	case p.Released != "":
		msg = fmt.Sprintf("puzzle %d on %s not solved: %s; %s", p.ID, p.Subject, p.Released, p.Books())
	case p.Unknown:
		msg = fmt.Sprintf("puzzle %d on %s: %d step(s); outcome unknown: the books did not answer", p.ID, p.Subject, p.Steps)
	}
	if p.Bar != nil {
		msg += "; a student holds the step bar"
	}
	return msg
}
