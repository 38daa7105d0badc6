package board

import (
	"net/http"
	"strconv"
	"strings"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
)

// narrate applies the event's line: in busy mode its effect only.
func (u *update) narrate() {
	l := lineOf(u.e)
	if !u.quiet {
		u.draw(l)
	}
	u.change(l.effect)
	if l.stepBar && !u.quiet {
		u.drawSteps()
	}
}

// draw draws the event's line in its row.
func (u *update) draw(l line) {
	u.explain = l.explain
	var r *views.TimelineRow
	if l.row != "" {
		r = u.rowFor(u.text(l.row))
		if l.attempt {
			r.Attempt = u.e.Attempt
		}
	}
	for _, a := range l.arrows {
		s := u.step1(a)
		if a.id != "" {
			s.ID = r.ID + a.id
		}
		u.step(r, s)
	}
	if l.draw != nil {
		l.draw(u, r)
	}
	if a := l.answer; a != nil {
		u.respond(r, u.text(a.label), u.badge(a.badge))
	}
	if l.outcome != nil {
		u.outcome(r, u.badge(*l.outcome))
	}
}

// step1 is an arrow of the table with the event's fields in its texts.
func (u *update) step1(a arrow) views.Step {
	return views.Step{From: a.from, To: a.to, Label: u.text(a.label), Lost: a.lost, Badge: u.badge(a.badge)}
}

func (u *update) badge(b badge) views.Badge {
	if b.text == "" {
		return views.Badge{}
	}
	if b.tone == toneOfStatus {
		b.tone = codeTone(u.e.Status)
	}
	return views.Badge{Text: u.text(b.text), Tone: b.tone}
}

// text fills in the event's fields.
func (u *update) text(s string) string {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return s
	}
	var b strings.Builder
	for i >= 0 {
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteString(u.field(s[i+1 : i+j]))
		s = s[i+j+1:]
		i = strings.IndexByte(s, '{')
	}
	b.WriteString(s)
	return b.String()
}

// field is one of the event's fields as a text says it.
func (u *update) field(name string) string {
	e := u.e
	switch name {
	case "status":
		return strconv.Itoa(e.Status)
	case "statusText":
		return http.StatusText(e.Status)
	case "statusLine":
		return statusLine(e.Status)
	case "message":
		if e.Kind == live.Undelivered {
			return plain(e.Message, shownReason) // a page's own words
		}
		return e.Message
	case "order":
		return shortOrderID(e.OrderID)
	case "kind":
		return string(e.Kind)
	}
	return "{" + name + "}"
}

// change makes the event's changes to the tables and counters.
func (u *update) change(f effect) {
	if f == 0 {
		return
	}
	p, e := u.p, u.e
	countAnswers(&p.counters, f)
	if f&chargeAdded != 0 {
		p.addCharge(u, e.Charge)
	}
	switch {
	case f&keyStarted != 0:
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusStarted, 0 })
	case f&keyDone != 0:
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusDone, e.Status })
	case f&keyDoneCreated != 0:
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusDone, http.StatusCreated })
	}
	if f&keyHit != 0 {
		p.hitKey(u)
	}
	if f&keyGone != 0 {
		p.removeKey(u)
	}
}

// loseAnswer replaces the answer's arrow, if drawn, by one that never
// arrives.
func (u *update) loseAnswer(r *views.TimelineRow) {
	e := u.e
	lost := views.Step{ID: r.ID + "-resp", From: S, To: B, Lost: true, Title: e.Message,
		Label: strconv.Itoa(e.Status) + " never arrives", Badge: views.Badge{Text: "lost response", Tone: views.ToneBad}}
	for i := range r.Steps {
		if r.Steps[i].ID == lost.ID {
			r.Steps[i] = lost
			u.add(views.StepView(lost, true))
			return
		}
	}
	u.step(r, lost)
}

// resumed takes a held request's pause off its row, and says why it goes
// on when the event says.
func (u *update) resumed(*views.TimelineRow) {
	e := u.e
	id := "tl-" + e.Request
	for _, r := range u.p.rows {
		if r.ID != id {
			continue
		}
		for i, s := range r.Steps {
			if s.ID == id+"-held" {
				r.Steps = append(r.Steps[:i:i], r.Steps[i+1:]...)
				u.add(views.FrameDelete(s.ID))
				break
			}
		}
		if e.Message != "" {
			u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "released", Tone: views.ToneMute}})
		}
	}
}

// countAnswers adds the event's answers (its effect f) to the counters:
// a resting board (rest.go) counts them as a drawing one does.
func countAnswers(c *views.Counters, f effect) {
	if f&countRequest != 0 {
		c.Requests++
	}
	if f&countRejected != 0 {
		c.Rejected++
	}
	if f&countLost != 0 {
		c.Lost++
	}
	if f&countReplay != 0 {
		c.Replays++
	}
	if f&countConflict != 0 {
		c.Conflicts++
	}
	if f&countMismatch != 0 {
		c.Mismatches++
	}
}
