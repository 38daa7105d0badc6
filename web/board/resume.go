package board

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// resumeLocked finds where a viewer that has seen every event up to seq
// continues: after frame n. ok is false when frames it needs are gone
// (or were never made): it must be redrawn. A refresh frame shares its
// seq with the event before it, so one with seq itself is sent again:
// refreshes only set totals, and sending one twice is harmless.
func (p *Board) resumeLocked(seq uint64) (n uint64, ok bool) {
	if p.closed || seq > p.modelSeq || seq < p.lostSeq || seq == p.lostSeq && p.lostFresh || seq < p.rest.wokeAt {
		return 0, false
	}
	held := p.held()
	first := sort.Search(held, func(i int) bool {
		f := p.at(i)
		return f.seq > seq || f.seq == seq && f.refresh
	})
	if first == held {
		return p.frames, true
	}
	return p.at(first).n - 1, true
}

// movedInLocked is, for a page resumed from another server's frames (or
// another life's) at its place in the room's order, a refresh frame that
// sets what this board draws of its own, outside that order, as its
// frames leave it after the last one made, which the page must be sent up
// to first: the step bar (this server's step mode and held requests),
// every counter, and the charges per order list, which the frames change
// an order at a time from this board's drawing of it (unless the last
// frame does not know the list: the next change draws it whole). It
// carries the room mark, so that the page's scripts ask this server for
// the lesson and the class's vote: the "Watch for" ticks and the vote's
// changes are this server's own events, with no place, and those made
// before the page's place were skipped. Everything in it replaces a
// whole element, so a page that takes it twice is as after once.
func (p *Board) movedInLocked() *redrawing {
	ops := []templ.Component{refreshMark, roomMark, views.StepBarView(p.steps, true)}
	for _, t := range views.CounterTiles(p.counters) {
		ops = append(ops, views.TileCount(t.ID, t.N, true))
	}
	r := &redrawing{epoch: p.cfg.Hub.Epoch(), seq: p.modelSeq, place: p.place, frames: p.frames}
	if p.frames > 0 {
		f := p.at(p.held() - 1)
		r.seq, r.place = f.seq, f.place
		if f.orders != nil {
			ops = append(ops, views.OrdersView(*f.orders, true))
		}
	}
	r.ops = ops
	return r
}

// ownRowsLocked reports whether the timeline holds rows of this board's
// own, which no event of the room's order draws: the busy row, which
// stands for the requests this board did not draw one by one (busy.go),
// and the row of a gap, the other servers' events this server missed. A
// page drawn by another server lacks them, and is drawn whole instead.
func (p *Board) ownRowsLocked() bool {
	if p.busy != nil {
		return true
	}
	for _, r := range p.rows {
		if strings.HasPrefix(r.ID, busyRowPrefix) || r.Title == gapRow {
			return true
		}
	}
	return false
}

// resumePlaceLocked finds where a viewer that has every event of the
// room's order up to place continues, whichever server of the room drew
// them: after frame n, the last one this board made before it drew the
// first event after place. ok is false when this board cannot say: the
// room's order here does not hold place unbroken, this board has not
// drawn up to it yet, or the frames after it are gone from the ring. The
// frames a viewer skips are the ones of events it has, and this server's
// own between them (its ticks, its refreshes), which the page had from
// its former server in its own way and is then sent as this board has
// them (movedInLocked). ok is false too while the timeline holds rows of
// this board's own (ownRowsLocked): no frame after the place draws them.
func (p *Board) resumePlaceLocked(place live.Place) (n uint64, ok bool) {
	if p.closed || place.IsZero() || place.After(p.place) || p.lostPlace.After(place) || p.rest.wokePlace.After(place) || p.ownRowsLocked() {
		return 0, false
	}
	if !p.cfg.Hub.HoldsPlace(place) {
		return 0, false
	}
	held := p.held()
	from := 0 // frames made before the order last went back are not searched
	if oldest := p.frames - uint64(held); p.placeFrom > oldest {
		from = int(min(p.placeFrom-oldest, uint64(held)))
	}
	first := from + sort.Search(held-from, func(i int) bool { return p.at(from + i).place.After(place) })
	if first == held {
		return p.frames, true
	}
	return p.at(first).n - 1, true
}

// placeWait bounds how long a page that resumes from a place this board
// has not drawn yet waits for it, polled every placePoll: the events come
// from the database within moments, and past that the page is redrawn.
const (
	placeWait = 3 * time.Second
	placePoll = 10 * time.Millisecond
)

// waitPlace waits, at most placeWait, until the board has drawn the
// room's events up to place.
func (proj *Board) waitPlace(ctx context.Context, place live.Place) {
	t := time.NewTimer(placePoll)
	defer t.Stop()
	for range placeWait / placePoll {
		proj.mu.Lock()
		there := !place.After(proj.place) || proj.closed
		proj.mu.Unlock()
		if there {
			return
		}
		select {
		case <-t.C:
			t.Reset(placePoll)
		case <-ctx.Done():
			return
		}
	}
}

// resumeAt is where a viewer says it left off.
type resumeAt struct {
	epoch string // the life of the hub that numbered seq ("" for a bare number)
	seq   uint64
	// place is the place in the room's order of the newest event the
	// viewer has, zero when its id named none.
	place live.Place
	given bool // the viewer named an event it saw
}

// resumePoint reads where a viewer left off: the Last-Event-ID header that
// EventSource sends when it reconnects, else the page's ?since=.
func resumePoint(r *http.Request) resumeAt {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("since")
	}
	epoch, seq, place, ok := live.ParsePlacedEventID(v)
	return resumeAt{epoch: epoch, seq: seq, place: place, given: ok}
}
