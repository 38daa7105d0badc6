package board

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// sourceShares keep one caller's flood from taking the board: a caller
// (a browser session or a bearer token: the event's scope) that starts
// more requests a second than its share has the rest of them counted, not
// drawn one by one, in a row of its own; its events do not count towards
// busy mode either. Everybody else's requests are drawn as usual, and
// the tables and counters stay complete.
type sourceShares struct {
	meters map[string]*rateMeter
	// muted are the requests not drawn, so that every event of one is
	// treated alike.
	muted boundedMap[string, struct{}]
	rows  map[string]*mutedRow
}

// A caller's share of the board: requests started in the last second.
// A student double-clicking, or a page retrying, starts a few, the lab's
// burst ten at once; a script in a loop starts hundreds. The presenter's
// requests are never held back.
const (
	shareRequests = 40
	// shareBurst is the share within 200 ms: two of the lab's bursts,
	// and well under what puts the board in busy mode (busyEnterBurst).
	shareBurst     = 20
	shareRefresh   = 500 * time.Millisecond
	shareMaxMeters = 4096
	// shareMaxRows bounds the callers' rows kept: a row is of use only
	// while the timeline (liveRows long) still shows it, so beyond this
	// the rows gone from the timeline are forgotten, then the ones drawn
	// longest ago. Without it every new bearer token over its share would
	// add a row until the next reset.
	shareMaxRows = 2 * liveRows
)

type mutedRow struct {
	row   *views.TimelineRow
	n     int // requests not drawn
	drawn time.Time
}

func newSourceShares() sourceShares {
	return sourceShares{meters: map[string]*rateMeter{}, muted: newBoundedMap[string, struct{}](4096), rows: map[string]*mutedRow{}}
}

// mute says whether e's request is beyond its caller's share; p.mu is
// held.
func (s *sourceShares) mute(e live.Event, now time.Time) bool {
	if e.Request == "" || e.Scope == "" || e.Priority {
		return false
	}
	if _, ok := s.muted.get(e.Request); ok {
		return true
	}
	if e.Kind != live.Received {
		return false
	}
	m := s.meters[e.Scope]
	if m == nil {
		if len(s.meters) >= shareMaxMeters {
			s.forgetIdle(now)
		}
		m = &rateMeter{}
		s.meters[e.Scope] = m
	}
	m.add(now)
	if m.perSecond(now) <= shareRequests && m.recent(now) <= shareBurst {
		return false
	}
	s.muted.put(e.Request, struct{}{})
	if r := s.rows[e.Scope]; r != nil {
		r.n++
		r.count()
	}
	return true
}

// forgetIdle drops the meters that counted nothing in the last second.
func (s *sourceShares) forgetIdle(now time.Time) {
	for k, m := range s.meters {
		if m.perSecond(now) == 0 {
			delete(s.meters, k)
		}
	}
}

// reset forgets every row not drawn (a reset clears the timeline).
func (s *sourceShares) reset() { s.rows = map[string]*mutedRow{} }

// mutedFrame is what a muted event draws: the caller's row, new or
// refreshed, with the counters and the key table, at most every
// shareRefresh per caller; nothing in between. p.mu is held.
func (p *Board) mutedFrame(e live.Event, now time.Time) []templ.Component {
	s := &p.shares
	r := s.rows[e.Scope]
	var ops []templ.Component
	if r == nil || !p.hasRow(r.row.ID) {
		if r == nil && len(s.rows) >= shareMaxRows {
			p.forgetMutedRows()
		}
		sum := sha256.Sum256([]byte(e.Scope))
		r = &mutedRow{n: 1, row: &views.TimelineRow{ID: "tl-share-" + hex.EncodeToString(sum[:6]) + "-" + strconv.FormatUint(e.Seq, 10),
			Time: e.Time, Title: "One caller, too fast", Scope: e.Scope}}
		s.rows[e.Scope] = r
		p.mutedText(r)
		p.rows = append([]*views.TimelineRow{r.row}, p.rows...)
		ops = append(ops, views.FrameNewRow(*r.row))
		if len(p.rows) > liveRows {
			old := p.rows[len(p.rows)-1]
			p.rows = p.rows[:len(p.rows)-1]
			ops = append(ops, views.FrameDelete(old.ID))
		}
	} else if now.Sub(r.drawn) < shareRefresh {
		return nil
	} else {
		p.mutedText(r)
		ops = append(ops, views.StepView(r.row.Steps[0], true), views.Outcome(r.row.ID, r.row.Outcome, true))
	}
	r.drawn = now
	return append(ops, inTable(views.KeysBody(p.snapshotKeysLocked(), p.cfg.Clock.Now(), true)),
		views.CountersView(p.countersLocked(), true))
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
	// A new slice: frames not yet rendered hold the old one.
	r.row.Steps = []views.Step{{ID: r.row.ID + "-note", From: views.LaneBrowser, To: views.LaneServer,
		Label: "This caller starts more than " + strconv.Itoa(shareRequests) + " requests a second (or " + strconv.Itoa(shareBurst) + " within 200 ms), its share of the board: the rest of its requests are counted here, not drawn one by one. Everyone else's are drawn as usual; the tables and counters below are complete.",
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
