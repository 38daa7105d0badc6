package board

import (
	"slices"
	"strconv"
	"strings"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// canAsk says whether the class can be asked about a request held at the
// checkpoint named at.
func canAsk(at string) bool {
	_, ok := lesson.StepQuestion(at)
	return ok
}

// The step bar: the requests step mode holds, as the board draws them.

// StepBar is the step bar as the board draws it.
func StepBar(st *step.Stepper) views.StepBar {
	s := st.State()
	v := views.StepBar{On: s.On}
	for _, h := range s.Held {
		if h.Faults == nil {
			// Another server's request: its events tell only where it is.
			h.Faults = step.AimableAt(h.Checkpoint)
		}
		who := views.ScopeLabel(h.Scope)
		if h.Server != "" {
			who += " on " + h.Server
		}
		v.Held = append(v.Held, views.HeldRow{Request: h.Request, RowID: "tl-" + h.Request, Checkpoint: h.Checkpoint, Answer: heldAnswerText(h.Answer), Click: clickText(h.Click),
			CanLose: slices.Contains(h.Faults, "response_lost"), CanCrash: slices.Contains(h.Faults, "crash_midway"),
			OrderID: shortOrderID(h.OrderID), Who: who, CanAsk: canAsk(h.Checkpoint)})
	}
	return v
}

// drawSteps redraws what changed in the step bar since the frames last
// drew it, so that what a held event costs each viewer does not grow with
// the requests held: the head when the list empties or fills, and each
// held row added, changed or gone, by its id. The whole bar is redrawn
// when step mode is turned on or off, and the whole list when that is
// shorter than its changes (Play) or when a row must go elsewhere than
// the end (another server's request that was held earlier).
func (u *update) drawSteps() {
	prev, next := u.p.steps, StepBar(u.p.cfg.Steps)
	u.p.steps = next
	u.add(stepBarChanges(prev, next)...)
}

// stepBarChanges are the fragments that turn the step bar prev into next.
func stepBarChanges(prev, next views.StepBar) []templ.Component {
	if prev.On != next.On {
		return []templ.Component{views.StepBarView(next, true)}
	}
	var ops []templ.Component
	if (len(prev.Held) == 0) != (len(next.Held) == 0) {
		ops = append(ops, views.StepHead(next, true))
	}
	was := make(map[string]views.HeldRow, len(prev.Held))
	for _, h := range prev.Held {
		was[h.Request] = h
	}
	is := make(map[string]bool, len(next.Held))
	var changed, added []views.HeldRow
	for _, h := range next.Held {
		is[h.Request] = true
		if old, ok := was[h.Request]; !ok {
			added = append(added, h)
		} else if old != h {
			changed = append(changed, h)
		}
	}
	// Rows are only added at the end: the rows of prev still there must
	// lead next's, in the same order.
	var gone []string
	inOrder, i := true, 0
	for _, h := range prev.Held {
		if !is[h.Request] {
			gone = append(gone, h.Request)
			continue
		}
		if next.Held[i].Request != h.Request {
			inOrder = false
		}
		i++
	}
	if !inOrder || len(gone)+len(changed)+len(added) > len(next.Held) {
		return append(ops, views.HeldList(next.Held, true))
	}
	for _, id := range gone {
		ops = append(ops, views.FrameDelete(views.HeldRowID(id)))
	}
	for _, h := range changed {
		ops = append(ops, views.HeldRowView(h, true))
	}
	if len(added) > 0 {
		ops = append(ops, views.FrameHeldRows(added))
	}
	return ops
}

// clickText names a page's click as the step bar writes it: "click 2",
// "click 2, retry 1"; "" for a request no page numbered.
func clickText(click string) string {
	if click == "" {
		return ""
	}
	n, retry, ok := strings.Cut(click, ".")
	if !ok {
		return "click " + n
	}
	return "click " + n + ", retry " + retry
}

// heldAnswerText is an HTTP status as the step bar writes it, "" for none.
func heldAnswerText(status int) string {
	if status == 0 {
		return ""
	}
	return strconv.Itoa(status)
}
