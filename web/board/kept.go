package board

import "paytwice/web/live"

// drawKept draws the hub's kept timeline (what GET /api/timeline.json
// lists) up to event upTo into the timeline's rows. A board starts on
// first use: the payments made through the API before any page was open
// are in the books, the counters and the export, and a board that drew
// only the events after its start would show an empty timeline beside
// them. The tables and counters came from the books and the tally
// already, so only the rows are drawn here, as the board that saw each
// event would have drawn it: a caller over its share of the board (by
// the time each event arrived) is one row that counts its requests, as
// a running board shows it, not drawn payment by payment. The events
// after upTo come from the hub as usual, so none is drawn twice.
//
// It runs before the board is started (Start), when nothing else can
// reach it, and so holds no lock, or when a resting board wakes (rest.go),
// with mu held and no viewer to keep waiting: the kept timeline is up to
// 32,768 events.
//
// skip, unless nil, leaves out the events it reports: on waking, this
// server's own events whose echo has not come yet, which their echo draws.
func (p *Board) drawKept(upTo uint64, skip func(e *live.Event) bool) {
	for _, e := range p.cfg.Hub.Kept() {
		if e.Seq > upTo {
			break // oldest first: the rest came after the start
		}
		if skip != nil && skip(&e) {
			continue
		}
		if e.Kind == live.Reset {
			// A reset empties the timeline, as apply does.
			p.rows = nil
			p.shares.reset()
		}
		arrived := e.Arrived
		if arrived.IsZero() {
			arrived = e.Time
		}
		if key, muted := p.shares.mute(e, arrived); muted {
			if r := p.shares.rows[key]; r == nil || !p.hasRow(r.row.ID) {
				p.newMutedRow(e, key)
			}
			continue
		}
		u := &update{p: p, e: e, hidden: p.hidden.hides(e)} // what the presenter hid stays hidden on waking
		u.draw(lineOf(e))
	}
}
