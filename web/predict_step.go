package web

import (
	"context"
	"errors"
	"unicode"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// handleStep opens step mode's question on a held request: what will its
// next step do? The question is the one for the checkpoint the request is
// held at; the request's own next event grades it.
func (h pollHandlers) handleStep(c echo.Context) error {
	var req PollStep
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	held, ok := h.heldRequest(req.Request)
	if !ok {
		return pay.Errorf(pay.ENOTFOUND, "The request %q is not held at a checkpoint now: ask while step mode holds it.", pay.Truncate(req.Request, 40))
	}
	q, ok := lesson.StepQuestion(held.Checkpoint)
	if !ok {
		return pay.Errorf(pay.EINVALID, "The request %s is held at %q: the step bar already says what it will answer, so there is nothing to predict.", held.Request, held.Checkpoint)
	}
	subject := heldSubject(held)
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		s.OpenStepPoll(held.Request, held.Checkpoint, subject, len(q.Choices))
		return nil
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

// heldRequest is the request step mode holds with the id, on any server.
func (h pollHandlers) heldRequest(id string) (step.HeldRequest, bool) {
	if id == "" {
		return step.HeldRequest{}, false
	}
	for _, r := range h.held().Held {
		if r.Request == id {
			return r, true
		}
	}
	return step.HeldRequest{}, false
}

// heldSubject is how the question names the held request: its order and
// which click of its page it is, short and printable, as the step bar
// names it.
func heldSubject(r step.HeldRequest) string {
	out := "order " + printable(r.OrderID, 32)
	if r.OrderID == "" {
		out = "request " + printable(r.Request, 32)
	}
	if r.Click != "" {
		out += ", click " + printable(r.Click, 8)
	}
	return out
}

// printable keeps at most n runes of s, each a printable one: a name a
// student chose is drawn as text, never as markup or control codes.
func printable(s string, n int) string {
	out := make([]rune, 0, min(len(s), n))
	for _, r := range s {
		if len(out) == n {
			break
		}
		if unicode.IsPrint(r) {
			out = append(out, r)
		}
	}
	return string(out)
}

// closeStepVote closes step mode's open question, if there is one: the
// presenter is stepping the race on, so the class has predicted.
func (s *Server) closeStepVote(ctx context.Context) {
	if p := s.room.Load().Poll; p == nil || p.Request == "" || p.Phase != room.PollOpen {
		return
	}
	_, _, _ = s.room.Change(ctx, func(st *room.State) error {
		if !st.CloseStepPoll() {
			return errNoStepVote
		}
		return nil
	})
}

// errNoStepVote is a room edit that found no step mode question open: it
// writes nothing.
var errNoStepVote = errors.New("no step mode question is open")
