package board

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// sourceShares keep one caller's flood from taking the board: a caller
// (a browser session or a bearer token: the event's scope) that starts
// more requests a second than its share has the rest of them counted, not
// drawn one by one, in a row of its own; its events do not count towards
// busy mode either. So does one client address (the event's source) past
// a larger share: a student who sends every request under a new bearer
// token is one address all the same, and cannot put the board in busy
// mode for the class. Everybody else's requests are drawn as usual, and
// the tables and counters stay complete.
type sourceShares struct {
	meters map[string]*rateMeter
	// addresses meter the requests of each client address, whatever
	// their callers.
	addresses map[string]*rateMeter
	// muted are the requests not drawn, each with the row that counts
	// it, so that every event of one is treated alike.
	muted boundedMap[string, string]
	rows  map[string]*mutedRow
	// drawn is when the rows' held requests were last drawn, and armed
	// says a drawing of them is scheduled (drawHeld): one refresh for
	// every row at once, however many callers are over their share, not
	// one a row.
	drawn time.Time
	armed bool
}

// A caller's share of the board: requests started in the last second.
// A student double-clicking, or a page retrying, starts a few, the lab's
// burst ten at once; a script in a loop starts hundreds. The presenter's
// requests are never held back.
const (
	shareRequests = 40
	// shareBurst is the share within 200 ms: two of the lab's bursts,
	// and well under what puts the board in busy mode (busyEnterBurst).
	shareBurst = 20
	// An address's share: a class behind one address paying together
	// (thirty students pressing Pay in the same instant) stays within
	// it, and one address alone, at nine events a request at most, stays
	// under both ways into busy mode (busyEnter, busyEnterBurst).
	addressShareRequests = 60
	addressShareBurst    = 36
	// callerRowsPerAddress is how many callers of one address over their
	// share get a row each; the next ones are counted in the address's
	// row. A script that pays under many bearer tokens from one address
	// (or a load test) would otherwise fill the timeline with its rows,
	// pushing each other off it and drawing the tables anew each time.
	callerRowsPerAddress = 4
	shareRefresh         = 500 * time.Millisecond
	shareMaxMeters       = 4096
	// shareMaxRows bounds the callers' rows kept: a row is of use only
	// while the timeline (liveRows long) still shows it, so beyond this
	// the rows gone from the timeline are forgotten, then the ones drawn
	// longest ago. Without it every new bearer token over its share would
	// add a row until the next reset.
	shareMaxRows = 2 * liveRows
)

// addressRow is the key of an address's row among the callers' rows.
const addressRow = "address\x00"

type mutedRow struct {
	// address says the row counts an address's requests, not a caller's.
	address bool
	// source is the address of the caller whose requests a caller's row
	// counts (callerRowsPerAddress).
	source string
	row    *views.TimelineRow
	n      int // requests not drawn
	drawn  time.Time
	// held says muted events changed the model since the row was last
	// drawn.
	held bool
}

func newSourceShares() sourceShares {
	return sourceShares{meters: map[string]*rateMeter{}, addresses: map[string]*rateMeter{}, muted: newBoundedMap[string, string](4096), rows: map[string]*mutedRow{}}
}

// mute says whether e's request is beyond its caller's share or its
// address's, and names the row that counts it; p.mu is held.
func (s *sourceShares) mute(e live.Event, now time.Time) (string, bool) {
	if e.Request == "" || e.Scope == "" || e.Priority {
		return "", false
	}
	if row, ok := s.muted.get(e.Request); ok {
		return row, true
	}
	if e.Kind != live.Received {
		return "", false
	}
	m := meterOf(s.meters, e.Scope, now)
	m.add(now)
	row := ""
	switch {
	case m.perSecond(now) > shareRequests || m.recent(now) > shareBurst:
		row = e.Scope
		if e.Source != "" && s.rows[row] == nil && s.callerRows(e.Source) >= callerRowsPerAddress {
			row = addressRow + e.Source
		}
	case e.Source != "":
		a := meterOf(s.addresses, e.Source, now)
		a.add(now)
		if a.perSecond(now) > addressShareRequests || a.recent(now) > addressShareBurst {
			row = addressRow + e.Source
		}
	}
	if row == "" {
		return "", false
	}
	s.muted.put(e.Request, row)
	if r := s.rows[row]; r != nil {
		r.n++
		r.count()
	}
	return row, true
}

// meterOf is key's meter in meters, made when new; a full table first
// forgets the meters idle for a second.
func meterOf(meters map[string]*rateMeter, key string, now time.Time) *rateMeter {
	m := meters[key]
	if m == nil {
		if len(meters) >= shareMaxMeters {
			forgetIdle(meters, now)
		}
		m = &rateMeter{}
		meters[key] = m
	}
	return m
}

// forgetIdle drops the meters that counted nothing in the last second.
func forgetIdle(meters map[string]*rateMeter, now time.Time) {
	for k, m := range meters {
		if m.perSecond(now) == 0 {
			delete(meters, k)
		}
	}
}

// callerRows counts the callers' rows kept for the callers of address.
func (s *sourceShares) callerRows(address string) int {
	n := 0
	for _, r := range s.rows {
		if !r.address && r.source == address {
			n++
		}
	}
	return n
}

// reset forgets every row not drawn (a reset clears the timeline).
func (s *sourceShares) reset() { s.rows = map[string]*mutedRow{} }

// mutedFrame is what a muted event draws: the caller's row, new or
// refreshed, with the counters and the tables' changes (keyOps,
// chargeOps). A new row is drawn at once; after that the rows' held
// requests are drawn together, at most every shareRefresh (floodRefresh:
// less often with hundreds of pages open), whichever rows they are, and
// nothing in between: forty callers over their share cost the pages one
// refresh, not forty. p.mu is held.
func (p *Board) mutedFrame(e live.Event, key string, now time.Time) []templ.Component {
	s := &p.shares
	r := s.rows[key]
	var ops []templ.Component
	switch every := p.floodRefresh(shareRefresh); {
	case r != nil && now.Sub(s.drawn) < every:
		// Too soon to draw again: what this event changed goes out at the
		// end of the interval, by itself if nothing else comes, so that
		// the last requests of a burst reach the pages without waiting
		// for a later one. (A row pushed off the timeline meanwhile is
		// put back by its caller's next request after that.)
		r.held = true
		if !s.armed {
			s.armed = true
			p.cfg.After(every-now.Sub(s.drawn), p.drawHeld)
		}
		return nil
	case r == nil || !p.hasRow(r.row.ID):
		r, ops = p.newMutedRow(e, key)
	default:
		p.mutedText(r)
		ops = append(ops, views.StepView(r.row.Steps[0], true), views.Outcome(r.row.ID, r.row.Outcome, true))
	}
	r.drawn, r.held, s.drawn = now, false, now
	ops = append(ops, p.keyOps(false)...)
	ops = append(ops, p.chargeOps(false)...)
	return append(ops, p.countersOps(false)...)
}

// newMutedRow puts a row for key's requests at the top of the timeline,
// e the first it counts, and returns it with the fragments that draw the
// change. p.mu is held (or the board is not started yet).
func (p *Board) newMutedRow(e live.Event, key string) (*mutedRow, []templ.Component) {
	s := &p.shares
	if s.rows[key] == nil && len(s.rows) >= shareMaxRows {
		p.forgetMutedRows()
	}
	sum := sha256.Sum256([]byte(key))
	r := &mutedRow{n: 1, source: e.Source, row: &views.TimelineRow{ID: p.eventRowID("tl-share-"+hex.EncodeToString(sum[:6])+"-", e.Seq),
		Time: e.Time, Title: "One caller, too fast", Scope: e.Scope}}
	if strings.HasPrefix(key, addressRow) {
		// Many callers: hiding "the student" of this row means the
		// address's, which has no scope of its own.
		r.address = true
		r.row.Title, r.row.Scope = "One address, too fast", ""
	}
	s.rows[key] = r
	p.mutedText(r)
	return r, p.pushRow(r.row)
}

// drawHeld draws what the muted events changed since the rows were last
// drawn, when no later muted event did: the held rows still on the
// timeline, the tables' changes and the counters, as one refresh frame.
// In busy mode nothing is drawn here: the busy refreshes draw the
// counters, and leaving it the tables.
func (p *Board) drawHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.shares
	s.armed = false
	if p.closed || p.busy != nil {
		return
	}
	var held []*mutedRow
	for _, r := range s.rows {
		if r.held {
			held = append(held, r)
		}
	}
	if len(held) == 0 {
		return
	}
	// The rows drawn last first, then by id: the frame is the same
	// whatever order the map gave.
	slices.SortFunc(held, func(a, b *mutedRow) int {
		return cmp.Or(b.drawn.Compare(a.drawn), strings.Compare(a.row.ID, b.row.ID))
	})
	now := p.cfg.Wall()
	s.drawn = now
	var ops []templ.Component
	for _, r := range held {
		r.held, r.drawn = false, now
		if p.hasRow(r.row.ID) {
			p.mutedText(r)
			ops = append(ops, views.StepView(r.row.Steps[0], true), views.Outcome(r.row.ID, r.row.Outcome, true))
		}
	}
	ops = append(ops, p.keyOps(true)...)
	ops = append(ops, p.chargeOps(true)...)
	ops = append(ops, p.countersOps(true)...)
	p.addFrameLocked(p.modelSeq, true, ops)
}

// forgetMutedRows makes room for a caller's row: it forgets the rows the
// timeline no longer shows and, if that is not enough, the one drawn
// longest ago (its caller gets a new row if it floods again). p.mu is
// held.
func (p *Board) forgetMutedRows() {
	s := &p.shares
	shown := make(map[string]bool, len(p.rows))
	for _, r := range p.rows {
		shown[r.ID] = true
	}
	oldest := ""
	for scope, r := range s.rows {
		if !shown[r.row.ID] {
			delete(s.rows, scope)
			continue
		}
		if oldest == "" || r.drawn.Before(s.rows[oldest].drawn) {
			oldest = scope
		}
	}
	if len(s.rows) >= shareMaxRows && oldest != "" {
		delete(s.rows, oldest)
	}
}

func (p *Board) mutedText(r *mutedRow) {
	label := "This caller starts more than " + strconv.Itoa(shareRequests) + " requests a second (or " + strconv.Itoa(shareBurst) + " within 200 ms), its share of the board: the rest of its requests are counted here, not drawn one by one. Everyone else's are drawn as usual; the tables and counters below are complete."
	if r.address {
		label = "One address starts more than " + strconv.Itoa(addressShareRequests) + " requests a second (or " + strconv.Itoa(addressShareBurst) + " within 200 ms) under ever new callers, or has more than " + strconv.Itoa(callerRowsPerAddress) + " callers over their own share: past its share of the board, the rest of its requests are counted here, not drawn one by one. Everyone else's are drawn as usual; the tables and counters below are complete."
	}
	// A new slice: frames not yet rendered hold the old one.
	r.row.Steps = []views.Step{{ID: r.row.ID + "-note", From: views.LaneBrowser, To: views.LaneServer,
		Label: label,
		Badge: views.Badge{Text: "over its share", Tone: views.ToneWarn}}}
	r.count()
}

// count writes how many requests the row stands for, in the model; the
// page gets it with the row's next refresh.
func (r *mutedRow) count() {
	r.row.Outcome = views.Badge{Text: strconv.Itoa(r.n) + " requests not drawn", Tone: views.ToneWarn}
}

// hasRow says whether the timeline still shows the row id.
func (p *Board) hasRow(id string) bool {
	for _, r := range p.rows {
		if r.ID == id {
			return true
		}
	}
	return false
}
