package board

import (
	"errors"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// The presenter can take a row off the board, or every row of one
// student (the caller's scope), in one click: what a student put on the
// projector is gone from every page at once, and that student's next
// requests are not drawn either, until the room is reset. The books, the
// tables and the counters are not changed: hiding is the board's alone.

// ErrNoSuchRow is the answer to hiding a row the board does not show.
var ErrNoSuchRow = errors.New("the board shows no such row")

// hiddenRows are what the presenter hid.
type hiddenRows struct {
	rows   boundedMap[string, struct{}]
	scopes boundedMap[string, struct{}]
}

func newHiddenRows() hiddenRows {
	return hiddenRows{rows: newBoundedMap[string, struct{}](4096), scopes: newBoundedMap[string, struct{}](4096)}
}

// hides says whether e belongs to a hidden row or a hidden student.
func (h *hiddenRows) hides(e live.Event) bool {
	if e.Scope != "" {
		if _, ok := h.scopes.get(e.Scope); ok {
			return true
		}
	}
	if e.Request != "" {
		if _, ok := h.rows.get("tl-" + e.Request); ok {
			return true
		}
	}
	return false
}

// Hide takes the row with the DOM id rowID off the board; with student,
// every row of that row's caller, now and until a reset. It returns how
// many rows went.
func (p *Board) Hide(rowID string, student bool) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var row *views.TimelineRow
	for _, r := range p.rows {
		if r.ID == rowID {
			row = r
			break
		}
	}
	if row == nil {
		return 0, ErrNoSuchRow
	}
	gone := func(r *views.TimelineRow) bool { return r == row }
	if student && row.Scope != "" {
		p.hidden.scopes.put(row.Scope, struct{}{})
		gone = func(r *views.TimelineRow) bool { return r.Scope == row.Scope }
	} else {
		p.hidden.rows.put(row.ID, struct{}{})
	}
	var ops []templ.Component
	kept := p.rows[:0:0]
	for _, r := range p.rows {
		if gone(r) {
			ops = append(ops, views.FrameDelete(r.ID))
			continue
		}
		kept = append(kept, r)
	}
	p.rows = kept
	p.addFrameLocked(p.modelSeq, true, ops)
	return len(ops), nil
}
