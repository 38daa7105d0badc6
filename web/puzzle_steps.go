package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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

// target is the held request the action at r steps: id, or for the
// presenter the oldest held when id is "", and, for a student holding
// the step bar, the bound the server that holds it checks (the puzzle's
// order's requests only). A request this server's copy of the held lists
// does not show yet is left to its holder to check.
//
// A student names the request (the phone always does): "the oldest of
// the order" would be picked from this server's copy of the held lists,
// which on a cluster may lag the servers that hold them, so the step
// could go to a request other than the one the class chose.
func (ps puzzleSteps) target(r *http.Request, id string) (string, *step.Only, error) {
	p, student := solverOf(r)
	if !student {
		if id == "" {
			if held := ps.held().Held; len(held) > 0 {
				return held[0].Request, nil, nil
			}
		}
		return id, nil, nil
	}
	if id == "" {
		return "", nil, pay.Errorf(pay.EINVALID, "Name the held request to step, as {\"request\": \"rq_…\"}: with the step bar, each of the puzzle's held requests has its own Next and Finish.")
	}
	only := &step.Only{Scope: p.Scope, OrderID: p.OrderID,
		Refusal: fmt.Sprintf("The step bar is for the puzzle's %s only: the request %q is not one of its held requests.", p.Subject, pay.Truncate(id, 40))}
	for _, h := range ps.held().Held {
		if h.Request == id && (h.Scope != p.Scope || h.OrderID != p.OrderID) {
			return "", nil, pay.Errorf(pay.EFORBIDDEN, "%s", only.Refusal)
		}
	}
	// The server that holds it checks the student's bound; step mode says
	// why the presenter's cannot be stepped.
	return id, only, nil
}

// countHeldStep counts a step on the puzzle under way when the held
// request r, about to be stepped on by the server that holds it, is one
// of its order's (step.Config.CountStep). The room's own state decides,
// in the edit: this server's copy may not show a puzzle the presenter
// has just started elsewhere. undo takes the count back when nothing was
// let go.
func countHeldStep(rm *room.Room[room.State]) func(ctx context.Context, r step.HeldRequest) (undo func()) {
	return func(ctx context.Context, r step.HeldRequest) func() {
		return countOnPuzzle(ctx, rm, func(s *room.State, p *room.Puzzle) bool {
			return p.Scope == r.Scope && p.OrderID == r.OrderID && s.CountStep(p.ID)
		})
	}
}

// countHeldPlay counts the Play named play as one step on the puzzle
// under way when one of the requests held, about to go on the server
// that holds them, is one of its order's (step.Config.CountPlay): every
// server that holds some counts it, and the room counts it once. settle
// takes the count back when this server counted it and let none go
// (they went on by themselves), unless another server let one go; a
// server that let one go on a Play another counted says so, so that a
// count taken back before it is counted again.
func countHeldPlay(rm *room.Room[room.State]) func(ctx context.Context, play string, held []step.HeldRequest) (settle func(letGo bool)) {
	return func(ctx context.Context, play string, held []step.HeldRequest) func(bool) {
		var id uint64
		counted := false
		_, _, err := rm.Change(ctx, func(s *room.State) error {
			id, counted = 0, false
			p, ok := s.CurrentPuzzle()
			if !ok || !slices.ContainsFunc(held, func(r step.HeldRequest) bool { return p.Scope == r.Scope && p.OrderID == r.OrderID }) {
				return errNoCount
			}
			id, counted = p.ID, s.CountPlay(p.ID, play)
			if !counted {
				return errNoCount
			}
			return nil
		})
		if err != nil {
			counted = false // counted by another server, or not written
		}
		return func(letGo bool) {
			if id == 0 || letGo == counted {
				return // not the puzzle's, or the count stands as it is
			}
			_, _, _ = rm.Change(context.WithoutCancel(ctx), func(s *room.State) error {
				if letGo && s.PlayLetOneGo(id, play) || !letGo && s.UncountPlay(id, play) {
					return nil
				}
				return errNoCount
			})
		}
	}
}

// countOnPuzzle counts a step on the puzzle under way, in one change of
// the room, when count says so (and has counted it), and returns what
// takes that step back; with no puzzle or no count, an undo that does
// nothing.
func countOnPuzzle(ctx context.Context, rm *room.Room[room.State], count func(s *room.State, p *room.Puzzle) bool) (undo func()) {
	var id uint64
	if _, _, err := rm.Change(ctx, func(s *room.State) error {
		p, ok := s.CurrentPuzzle()
		if !ok || !count(s, p) {
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

// errNoCount is a room edit that found nothing to count: it writes
// nothing.
var errNoCount = errors.New("no puzzle step to count")

// releasedByStepOff ends the unsolved puzzle under way, if any, as
// released by step mode turning off (room.StepModeOffReleased), before
// step mode lets its held requests go: what they charge then is theirs,
// not the class's, so it solves nothing and scores nothing.
func (ps puzzleSteps) releasedByStepOff(ctx context.Context) error {
	_, _, err := ps.room.Change(ctx, func(s *room.State) error {
		if !s.ReleasePuzzle(room.StepModeOffReleased) {
			return errNoCount
		}
		return nil
	})
	if errors.Is(err, errNoCount) {
		return nil
	}
	return err
}

// releasedAlone ends the unsolved puzzle under way as released
// (room.TimeLimitReleased, room.ClientGoneReleased) when the held request
// r that goes on with nobody stepping it is one of its order's
// (step.Config.WentOnAlone), before r goes on: nobody scheduled what r
// charges then. The room's own state decides, as for a step's count. A
// room that cannot be written leaves the puzzle as it was; the request
// goes on all the same.
func releasedAlone(rm *room.Room[room.State], logf func(format string, args ...any)) func(ctx context.Context, r step.HeldRequest, why step.Alone) {
	return func(ctx context.Context, r step.HeldRequest, why step.Alone) {
		reason := room.TimeLimitReleased
		if why == step.AloneClientGone {
			reason = room.ClientGoneReleased
		}
		_, _, err := rm.Change(ctx, func(s *room.State) error {
			p, ok := s.CurrentPuzzle()
			if !ok || p.Scope != r.Scope || p.OrderID != r.OrderID || !s.ReleasePuzzle(reason) {
				return errNoCount
			}
			return nil
		})
		if err != nil && !errors.Is(err, errNoCount) {
			logf("puzzle: %s went on by itself (%s), but the puzzle could not be ended: %v", r.Request, reason, err)
		}
	}
}
