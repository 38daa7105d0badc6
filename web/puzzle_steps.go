package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// Step mode's actions during a puzzle: who may step held requests, which
// of them a student holding the step bar may step, and the count of the
// steps taken on the puzzle's order.

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

// count counts Play as one step for the puzzle under way, if one of ids
// is one of its order's held requests, before the step runs: the charge
// the step makes then finds it counted. undo takes it back when nothing
// was let go. Next and Finish are counted by the server that holds the
// request (countHeldStep).
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

// countHeldStep counts a step on the puzzle under way when the held
// request r, about to be stepped on by the server that holds it, is one
// of its order's (step.Config.CountStep). The room's own state decides,
// in the edit: this server's copy may not show a puzzle the presenter
// has just started elsewhere. undo takes the count back when nothing was
// let go.
func countHeldStep(rm *room.Room[room.State]) func(ctx context.Context, r step.HeldRequest) (undo func()) {
	return func(ctx context.Context, r step.HeldRequest) func() {
		var id uint64
		if _, _, err := rm.Change(ctx, func(s *room.State) error {
			p, ok := s.CurrentPuzzle()
			if !ok || p.Scope != r.Scope || p.OrderID != r.OrderID || !s.CountStep(p.ID) {
				return errNoCount
			}
			id = p.ID
			return nil
		}); err != nil {
			return func() {}
		}
		return func() {
			_, _, _ = rm.Change(context.WithoutCancel(ctx), func(s *room.State) error {
				if !s.UncountStep(id) {
					return errNoCount
				}
				return nil
			})
		}
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
