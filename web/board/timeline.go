package board

import (
	"net/http"
	"strconv"

	"github.com/a-h/templ"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
)

// apply updates the model with one event and keeps the frame that moves
// a page from the state before it to the state after it (none when busy
// mode draws nothing for it).
func (p *Board) apply(e live.Event) {
	var faults *views.FaultSwitches
	if e.Kind == live.Switched || e.Kind == live.Reset {
		f := p.currentSwitches()
		faults = &f
	}
	var pruned []views.KeyRow
	if e.Kind == live.Pruned {
		pruned = p.loadKeys()
	}
	switch e.Kind {
	case live.Gap:
		// Other servers' events were lost on the way here: what the tables
		// and counters show comes from the database again, and the next
		// frame redraws every panel. (An event applied again meanwhile is
		// harmless: keys and charges are upserted by id.)
		p.load(p.cfg.Ctx)
		p.mu.Lock()
		p.fullNext = true
		p.mu.Unlock()
	case live.Reset:
		// The tables after a reset are what the books hold after it, not
		// nothing: another server whose hold for the reset reached its
		// bound may have charged once the tables were emptied, and its
		// events, drawn before the reset's when its batch came first, are
		// not drawn again. The reset below empties the timeline and the
		// counters of requests; the tables and the charges come from the
		// books.
		p.load(p.cfg.Ctx)
	}
	now := p.cfg.Wall()

	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.advanceLocked(e.Seq)
	// A caller over its share of the board is counted, not drawn, and
	// does not make the board busy for everyone (shares.go).
	arrived := now
	if !e.Arrived.IsZero() && e.Arrived.Before(now) {
		arrived = e.Arrived
	}
	mutedRow, muted := p.shares.mute(e, arrived)
	if !muted {
		p.rate.add(now) // under mu: the busy ticker reads it too
	}
	// The presenter's own requests are drawn one by one even in busy
	// mode: they are few, and the presenter's board must show each of
	// them while the class makes the room busy.
	drawnWhileBusy := e.Priority
	u := &update{p: p, e: e, quiet: (p.busy != nil && !drawnWhileBusy) || muted, hidden: p.hidden.hides(e)}
	if u.quiet {
		p.quietN.Add(1)
	}
	before := p.counters
	if faults != nil {
		p.faults = *faults
	}
	switch e.Kind {
	case live.Reset:
		p.rows = nil // the tables were loaded from the books above
		p.shares.reset()
		p.hidden = newHiddenRows()
		p.counters = views.Counters{Charges: p.counters.Charges}
		p.leaveBusy()
		p.fullNext = true
	case live.Pruned:
		if u.quiet {
			p.keysQuiet()
		}
		p.keys = nil
		for i := range pruned {
			p.keys = append(p.keys, &pruned[i])
		}
		u.keysChanged = true
	}
	u.narrate()
	p.modelSeq = e.Seq

	var mark []templ.Component
	if p.marksRoom(e) {
		mark = []templ.Component{roomMark}
	}
	if e.Kind == WorkshopKind || e.Kind == WorkshopSavedKind {
		mark = append(mark, workshopMark)
	}
	switch {
	case p.fullNext:
		p.fullNext = false
		p.countersDrawnLocked()
		p.keysDrawn()
		p.chargesDrawn()
		p.addFrameLocked(e.Seq, false, append(p.fullFrameLocked(), mark...))
		return
	case muted && p.busy == nil:
		p.addOwnedFrameLocked(e.Seq, false, ownerOf(e, mark, faults), append(p.mutedFrame(e, mutedRow, now), mark...))
		return
	case p.busy == nil && e.Kind != live.Reset && !drawnWhileBusy && (p.rate.perSecond(now) > busyEnter || p.rate.recent(now) > busyEnterBurst):
		// (A presenter's event is drawn; the next of anyone else's
		// enters busy mode.)
		p.addFrameLocked(e.Seq, false, append(p.enterBusy(e, now), mark...))
		return
	case p.busy != nil && !drawnWhileBusy:
		if e.Kind == live.Received {
			p.busyReqs++
		}
		if faults != nil {
			mark = append(mark, views.FaultFields(p.faults, true), views.ActiveFaults(p.faults, true))
		}
		p.addFrameLocked(e.Seq, false, mark)
		return
	}

	if u.keysChanged {
		p.keysDrawn()
		u.add(redrawOf("keys-body", inTable(views.KeysBody(p.snapshotKeysLocked(), p.cfg.Clock.Now(), true))))
	}
	u.add(p.counterOps(before)...)
	if faults != nil {
		u.add(views.FaultFields(p.faults, true), views.ActiveFaults(p.faults, true))
	}
	u.add(mark...)
	p.addOwnedFrameLocked(e.Seq, false, ownerOf(e, mark, faults), u.ops)
}

// ownerOf is the caller whose pages alone need e's frame at once: a
// student's payment step, which the other phones may show a class round
// later (frame.owner). Everything else every page needs at once: the
// presenter's requests, what changes the room (a switch, a reset, a
// lesson's or the lab's mark), a gap, a prune.
func ownerOf(e live.Event, mark []templ.Component, faults *views.FaultSwitches) string {
	if e.Scope == "" || e.Priority || len(mark) > 0 || faults != nil {
		return ""
	}
	switch e.Kind {
	case live.Reset, live.Switched, live.Gap, live.Pruned:
		return ""
	}
	return e.Scope
}

// counterOps redraws the counters that changed since before.
func (p *Board) counterOps(before views.Counters) []templ.Component {
	var ops []templ.Component
	was, now := views.CounterTiles(before), views.CounterTiles(p.counters)
	for i := range now {
		if now[i].N != was[i].N {
			ops = append(ops, redrawOf(now[i].ID, views.TileCount(now[i].ID, now[i].N, true)))
		}
	}
	if p.counters.Charges != before.Charges {
		ops = append(ops, p.orderOps(false)...)
	}
	return ops
}

// update is the work of applying one event; p.mu is held.
type update struct {
	p     *Board
	e     live.Event
	quiet bool // busy mode: update the model, draw nothing
	// hidden: the presenter hid the event's row or student (hide.go):
	// the tables and counters are drawn, the row is not.
	hidden      bool
	ops         []templ.Component
	keysChanged bool
	// explain: the event's message says more than its arrows' labels,
	// which carry it as a tooltip (narrate.go).
	explain bool
}

// add queues fragments for the frame. In busy mode it drops them: the
// busiest callers check u.quiet first and make none, which allocates.
func (u *update) add(ops ...templ.Component) {
	if !u.quiet {
		u.ops = append(u.ops, ops...)
	}
}

// rowFor finds the event's row, or starts one (at the top) if it has none.
func (u *update) rowFor(title string) *views.TimelineRow {
	p, e := u.p, u.e
	id := p.eventRowID("tl-ev", e.Seq)
	if e.Request != "" {
		id = "tl-" + e.Request
		for _, r := range p.rows {
			if r.ID == id {
				return r
			}
		}
	}
	r := &views.TimelineRow{ID: id, Time: e.Time, Title: title, Server: e.Server, Key: e.Key, PersonalData: pay.PersonalData(e.Key), OrderID: shortOrderID(e.OrderID), Amount: e.Amount, Scope: e.Scope}
	if u.quiet || u.hidden {
		return r // busy or hidden: not drawn, not kept
	}
	u.add(p.pushRow(r)...)
	return r
}

// eventRowID names the timeline row of event seq of this server's life,
// an event that is not a request's: a page that moves to another server
// of the room keeps the rows the first one drew, and the same number
// there is another event.
func (p *Board) eventRowID(prefix string, seq uint64) string {
	return prefix + p.cfg.Hub.Epoch() + "-" + strconv.FormatUint(seq, 10)
}

// pushRow puts r at the top of the timeline and returns its frames: the
// new row, and the oldest row's delete when the timeline was full.
func (p *Board) pushRow(r *views.TimelineRow) []templ.Component {
	p.rows = append([]*views.TimelineRow{r}, p.rows...)
	ops := []templ.Component{views.FrameNewRow(*r)}
	if len(p.rows) > liveRows {
		old := p.rows[len(p.rows)-1]
		p.rows = p.rows[:len(p.rows)-1]
		ops = append(ops, views.FrameDelete(old.ID))
	}
	return ops
}

// step appends an arrow to the row.
func (u *update) step(r *views.TimelineRow, s views.Step) {
	if s.Title == "" && u.explain {
		s.Title = u.e.Message
	}
	if u.quiet || u.hidden || len(r.Steps) >= liveSteps {
		return
	}
	r.Steps = append(r.Steps, s)
	u.add(views.FrameStep(r.ID, s))
}

// respond draws the answer travelling back to the browser; a later "lost"
// event replaces it. An answer to a checkout page is drawn as sent, not
// arrived, until the page says it got it (delivered).
func (u *update) respond(r *views.TimelineRow, label string, b views.Badge) {
	s := views.Step{ID: r.ID + "-resp", From: views.LaneServer, To: views.LaneBrowser, Label: label, Badge: b}
	switch {
	case r.Attempt == "" || r.Received:
	case r.NotReceived != "":
		s = notReceived(s, r.NotReceived)
	default:
		s.Sent = true
	}
	u.step(r, s)
}

// notReceived is an answer the page says never reached it.
func notReceived(s views.Step, why string) views.Step {
	s.Sent, s.Lost = false, true
	s.Label = s.Badge.Text + " " + s.Label + " never reached the browser: " + why
	s.Badge = views.Badge{Text: "not delivered", Tone: views.ToneBad}
	return s
}

// delivered applies a page's word on whether an attempt's answer reached
// it to the attempt's row: the answer's arrow arrives, or ends in a
// cross. A word on a row no longer shown, or from another scope than
// the request's, changes nothing.
func (u *update) delivered(*views.TimelineRow) {
	p, e := u.p, u.e
	var r *views.TimelineRow
	for _, row := range p.rows {
		if row.Attempt == e.Attempt && row.Scope == e.Scope {
			r = row
			break
		}
	}
	if r == nil || r.Received || r.NotReceived != "" {
		return
	}
	if e.Kind == live.Delivered {
		r.Received = true
	} else {
		r.NotReceived = plain(e.Message, shownReason)
	}
	for i, st := range r.Steps {
		if st.ID != r.ID+"-resp" || st.Lost {
			continue
		}
		if e.Kind == live.Delivered {
			st.Sent = false
		} else {
			st = notReceived(st, plain(e.Message, shownReason))
		}
		r.Steps[i] = st
		u.add(views.StepView(st, true))
	}
}

func (u *update) outcome(r *views.TimelineRow, b views.Badge) {
	r.Outcome = b
	if u.hidden {
		return
	}
	u.add(redrawOf(r.ID+"-out", views.Outcome(r.ID, b, true)))
}

func statusLine(status int) string {
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// tally is the model's side of an event in busy mode: the counters and the

func codeTone(status int) views.Tone {
	switch {
	case status < 300:
		return views.ToneOK
	case status == http.StatusConflict || status == http.StatusTooManyRequests:
		return views.ToneWarn
	}
	return views.ToneBad
}

// upsertKey changes the event's key row, inserting it at the top if the
