package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
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
	out := PuzzleState{On: true, ID: p.ID, OrderID: p.OrderID, Steps: p.Steps, Solved: p.Solved, Charges: p.Charges, Before: p.Before, Unknown: p.Unknown, SolvedSteps: p.SolvedSteps}
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

// stepperOnly lets the presenter step held requests, and the student who
// holds the step bar of the puzzle under way; anyone else gets a 403 that
// says who may. A student's request must come from the student's own
// pages: a cookie sent by another site's page does not count, as for the
// presenter's.
func (ps puzzleSteps) stepperOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		ok, wait, err := ps.presenterAuth(r)
		if err != nil {
			return err
		}
		if wait > 0 {
			return tooManyGuesses(c, wait)
		}
		if ok {
			return next(c)
		}
		st := ps.room.Load()
		if p, ok := st.MayStep(callerScope(r), time.Now()); ok && !crossSite(r) {
			c.SetRequest(r.WithContext(context.WithValue(r.Context(), solverKey{}, *p)))
			return next(c)
		}
		if _, bar, held := st.BarHolder(time.Now()); held {
			return pay.Errorf(pay.EFORBIDDEN, "The presenter gave the step bar to %s for the puzzle: only they and the presenter may step held requests now.", printable(bar.Nick, room.MaxNick))
		}
		return pay.Errorf(pay.EFORBIDDEN, "Only the presenter steps held requests, or the student the presenter gives the step bar to for a puzzle: this browser does not hold it.")
	}
}

// solverKey marks a request of the student who holds the step bar: its
// value is the puzzle the bar is for.
type solverKey struct{}

// solverOf is the puzzle r's student holds the step bar for, if r is a
// student's (stepperOnly).
func solverOf(r *http.Request) (room.Puzzle, bool) {
	p, ok := r.Context().Value(solverKey{}).(room.Puzzle)
	return p, ok
}

// puzzleSteps is what step mode's actions do for the puzzle: which held
// request a student may step, and the count of the steps taken.
type puzzleSteps struct {
	room *room.Room[room.State]
	held func() step.State
	// presenterAuth recognises the presenter, who may always step
	// (presenter.go).
	presenterAuth func(r *http.Request) (ok bool, wait time.Duration, err error)
}

// target is the held request the action at r steps: id, or the oldest
// held when id is "". A student holding the step bar steps the
// puzzle's order's requests only.
func (ps puzzleSteps) target(r *http.Request, id string) (string, error) {
	p, student := solverOf(r)
	held := ps.held().Held
	for _, h := range held {
		mine := h.Scope == p.Scope && h.OrderID == p.OrderID
		if student && !mine {
			continue
		}
		if id == "" || h.Request == id {
			return h.Request, nil
		}
	}
	if student {
		if id == "" {
			return "", pay.Errorf(pay.ENOTFOUND, "No request of the puzzle's %s is held at a checkpoint now.", p.Subject)
		}
		return "", pay.Errorf(pay.EFORBIDDEN, "The step bar is for the puzzle's %s only: the request %q is not one of its held requests.", p.Subject, pay.Truncate(id, 40))
	}
	// The presenter's: step mode says why it cannot be stepped.
	return id, nil
}

// count counts a step on the held request id for the puzzle under way,
// if id is one of its order's, before the step runs: the charge the step
// makes then finds it counted. undo takes it back when nothing was let
// go.
func (ps puzzleSteps) count(ctx context.Context, ids ...string) (undo func()) {
	st := ps.room.Load()
	p, ok := st.CurrentPuzzle()
	if !ok || p.Solved {
		return func() {}
	}
	mine := false
	for _, h := range ps.held().Held {
		for _, id := range ids {
			if h.Request == id && h.Scope == p.Scope && h.OrderID == p.OrderID {
				mine = true
			}
		}
	}
	if !mine {
		return func() {}
	}
	id := p.ID
	if _, _, err := ps.room.Change(ctx, func(s *room.State) error {
		if !s.CountStep(id) {
			return errNoCount
		}
		return nil
	}); err != nil {
		return func() {}
	}
	return func() {
		_, _, _ = ps.room.Change(context.WithoutCancel(ctx), func(s *room.State) error {
			if !s.UncountStep(id) {
				return errNoCount
			}
			return nil
		})
	}
}

// errNoCount is a room edit that found nothing to count: it writes
// nothing.
var errNoCount = errors.New("no puzzle step to count")

// allHeld names every held request, for Play's count.
func allHeld(st step.State) []string {
	out := make([]string, 0, len(st.Held))
	for _, h := range st.Held {
		out = append(out, h.Request)
	}
	return out
}

// puzzleJudge reads the events, and after each charge of the order of the
// puzzle under way asks the books how many charges the order has: two
// more than it had at the start solve the puzzle, with the steps counted
// by then; books that do not answer leave its outcome unknown. Every server of
// a class runs one; the first to write the room solves it.
type puzzleJudge struct {
	room    *room.Room[room.State]
	hub     *live.Hub
	charges func(ctx context.Context, scope, orderID string) (int, error)
	logf    func(format string, args ...any)
	start   sync.Once
}

// Start reads the events from now on until ctx ends; a second call does
// nothing. The server calls it at the room's first puzzle.
func (j *puzzleJudge) Start(ctx context.Context) {
	j.start.Do(func() {
		sub := j.hub.Subscribe(j.hub.LastSeq())
		go j.run(ctx, sub)
	})
}

func (j *puzzleJudge) run(ctx context.Context, sub *live.Subscription) {
	for {
		entries, err := sub.Next(ctx)
		if errors.Is(err, live.ErrTooSlow) {
			// Events were skipped: ask the books once, as a charge might
			// have been among them.
			sub = j.hub.Subscribe(j.hub.LastSeq())
			j.judge(ctx, "", "", true)
			continue
		}
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Kind == live.Charged || (e.Kind == live.Swept && e.Sweep == live.SweepCharged) {
				j.judge(ctx, e.Scope, e.OrderID, false)
			}
		}
	}
}

// judgeTimeout bounds the books' answer for one charge.
const judgeTimeout = 5 * time.Second

// judge asks the books for the charges of the puzzle's order, when the
// charge seen (scope, orderID) is of that order (or any, for anyway).
func (j *puzzleJudge) judge(ctx context.Context, scope, orderID string, anyway bool) {
	p, ok := j.room.Load().CurrentPuzzle()
	if !ok || p.Solved || (!anyway && (scope != p.Scope || orderID != p.OrderID)) {
		return
	}
	// The room is written with a bound of its own: books that timed out
	// are still said on the board.
	read, cancel := context.WithTimeout(ctx, judgeTimeout)
	n, err := j.charges(read, p.Scope, p.OrderID)
	cancel()
	ctx, cancel = context.WithTimeout(ctx, judgeTimeout)
	defer cancel()
	id := p.ID
	if err != nil {
		// The board says the outcome is unknown until a count succeeds;
		// the order's next charge asks again.
		j.logf("puzzle %d: counting the charges of its order: %v", id, err)
		_, _, _ = j.room.Change(ctx, func(s *room.State) error {
			if !s.BooksSilent(id) {
				return errNoCount
			}
			return nil
		})
		return
	}
	_, _, _ = j.room.Change(ctx, func(s *room.State) error {
		if !s.BooksCount(id, n) {
			return errNoCount
		}
		return nil
	})
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
	case p.Unknown:
		msg = fmt.Sprintf("puzzle %d on %s: %d step(s); outcome unknown: the books did not answer", p.ID, p.Subject, p.Steps)
	}
	if p.Bar != nil {
		msg += "; a student holds the step bar"
	}
	return msg
}
