package board

import (
	"sync/atomic"
	"time"

	"paytwice/views"
	"paytwice/web/live"
)

// A board that no page has asked for in a while (Config.RestAfter) rests:
// it goes on reading the hub, but of each event it keeps only the
// counters of answers and the place in the room's order, and draws
// nothing, keeps no key or charge row and makes no frame. With several
// servers on one database every server's board takes every server's
// events; a server whose pages are all closed (or that only ever serves
// the API) then no longer spends its share of the cores on drawing the
// others' payments for nobody.
//
// The first page that asks again (Snapshot, Stream) wakes it: the board
// reads the tables and the charges from the books again, as a board does
// at its start, and draws its timeline from the hub's kept events, so the
// page shows exactly what the books hold. The counters of answers went
// on counting while it rested: a server's board cannot read the other
// servers' answers from the books (answer_counts.go in web says why), so
// it counts them from their events, which costs a table look-up each.
// The frames made before the rest stay in the ring but no page resumes
// from them across it: a page whose last event is older than the wake is
// drawn whole (resumeLocked, resumePlaceLocked), never resumed over the
// events nobody drew.

// restState is what the board knows of its rest; mu guards it but for
// the counts.
type restState struct {
	resting bool
	// wanted is when a page last asked for the board: a snapshot taken,
	// a stream opened or closed (on Config.Wall).
	wanted time.Time
	// wokeAt and wokePlace are the event, and its place in the room's
	// order, at which the board last woke and loaded the books again: a
	// page that has seen less is drawn whole.
	wokeAt    uint64
	wokePlace live.Place
	// rests and wakes count the board's rests and wakes, counted the
	// events it counted without drawing them (RestStats).
	rests, wakes, counted atomic.Uint64
}

// RestStats are a board's rests: how often it rested and woke, and how
// many events it took while resting, counted and not drawn.
type RestStats struct {
	Resting               bool
	Rests, Wakes, Counted uint64
}

// RestStats says how the board has rested so far.
func (p *Board) RestStats() RestStats {
	p.mu.Lock()
	resting := p.rest.resting
	p.mu.Unlock()
	return RestStats{Resting: resting, Rests: p.rest.rests.Load(), Wakes: p.rest.wakes.Load(), Counted: p.rest.counted.Load()}
}

// wantedLocked notes that a page asked for the board now.
func (p *Board) wantedLocked() { p.rest.wanted = p.cfg.Wall() }

// restIfUnwatched puts the board to rest when no stream is open and no
// page has asked for it for Config.RestAfter. The caller holds applying,
// so no load of the model is under way.
func (p *Board) restIfUnwatched() {
	if p.cfg.RestAfter <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rest.resting || p.closed || p.viewers.Load() > 0 || p.cfg.Wall().Sub(p.rest.wanted) < p.cfg.RestAfter {
		return
	}
	p.rest.resting = true
	p.rest.rests.Add(1)
	// Busy mode's ticker stops with it: nobody reads its totals.
	p.leaveBusy()
}

// resting says whether the board rests. The caller holds applying.
func (p *Board) resting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rest.resting
}

// count is take for a resting board: the event moves the board's place
// and its counters of answers, as take would, and nothing else. The
// caller holds applying.
func (p *Board) count(e *live.Entry) {
	if e.Echo {
		p.echoedTo = max(p.echoedTo, e.Own)
	}
	skip := p.cfg.Ordered != nil && p.cfg.Ordered(e) || e.Echo && p.countedOwn(e.Own)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.modelSeq = e.Seq
	p.advanceLocked(e.Seq)
	if skip {
		return // drawn at its echo, or loaded from the books at the start
	}
	if !e.Place.IsZero() {
		if !e.Place.After(p.place) {
			p.placeFrom = p.frames
		}
		p.place = e.Place
	}
	if e.Kind == live.Reset {
		// As apply does; the tables come from the books on waking.
		p.rows = nil
		p.shares.reset()
		p.hidden = newHiddenRows()
		p.counters = views.Counters{Charges: p.counters.Charges}
	}
	countAnswers(&p.counters, lineOf(e.Event).effect)
}

// wake notes that a page asks for the board and, if it rests, brings it
// up to date from the books before the page is drawn from it.
func (p *Board) wake() {
	p.mu.Lock()
	p.wantedLocked()
	resting := p.rest.resting
	p.mu.Unlock()
	if !resting {
		return
	}
	p.applying.Lock()
	defer p.applying.Unlock()
	if !p.resting() {
		return // another page woke it meanwhile
	}
	// No event is applied meanwhile (applying): the model is at modelSeq,
	// and the books hold every charge up to it, and perhaps some after,
	// which their events then do not count again (model.load).
	p.load(p.cfg.Ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows = nil
	p.shares.reset()
	// This server's own events whose echo is still to come are drawn by
	// it, as on a board that never rested; drawn now as well, their rows
	// would show each step twice. (They carry the time they arrived
	// here; the other servers' events do not.)
	p.drawKept(p.modelSeq, func(e *live.Event) bool {
		return p.cfg.Ordered != nil && !e.Arrived.IsZero() && e.Seq > p.echoedTo && p.cfg.Ordered(&live.Entry{Event: *e})
	})
	p.steps = StepBar(p.cfg.Steps)
	p.rest.wokeAt, p.rest.wokePlace = p.modelSeq, p.place
	p.placeFrom = p.frames
	p.fullNext = true
	p.redrawn, p.resynced = nil, [whys]*redrawing{}
	p.rest.resting = false
	p.rest.wakes.Add(1)
	p.wantedLocked()
}
