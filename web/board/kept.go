package board

import "paytwice/web/live"

// drawKeptLocked draws the hub's kept timeline (what GET /api/timeline.json
// lists) up to event upTo into the timeline's rows. A board starts on
// first use: the payments made through the API before any page was open
// are in the books, the counters and the export, and a board that drew
// only the events after its start would show an empty timeline beside
// them. The tables and counters came from the books and the tally
// already, so only the rows are drawn here, as the board that saw each
// event would have drawn it; the events after upTo come from the hub as
// usual, so none is drawn twice. Callers hold p.mu.
func (p *Board) drawKeptLocked(upTo uint64) {
	for _, e := range p.cfg.Hub.Kept() {
		if e.Seq > upTo {
			break // oldest first: the rest came after the start
		}
		if e.Kind == live.Reset {
			p.rows = nil // a reset empties the timeline, as apply does
		}
		u := &update{p: p, e: e}
		u.draw(lineOf(e))
	}
}
