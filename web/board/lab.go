package board

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/a-h/templ"

	"paytwice/web/live"
	"paytwice/web/room/lesson"
)

// The lab's numbers reach the pages through the event stream, like
// everything else they show: after events, the projector draws the lab's
// outcomes again, and when the drawing differs from the one it sent last
// it sends it as a frame that replaces each number where the page shows
// it. However many pages are open, the numbers are read once per drawing,
// from the lab's running counts (Config.Lab), not once per page.
//
// The lab's switches, the lesson and the room's version are not numbers
// that move with every payment: a frame of an event that changes them
// carries a mark (roomMark), and a page that sees it asks /lab/live what
// changed (static/lab.js).

// labDrawEvery is the shortest time between two drawings: a burst of
// payments moves the numbers once or twice, not once per event.
const labDrawEvery = 250 * time.Millisecond

// labRebuildEvery is the shortest time between two drawings that rebuild
// the counts from the tables, which another server's writes make
// necessary (its events do not say which lab table a charge went to);
// and a rebuild is followed by labRebuildRest times as long again before
// the next, so that tables that take long to read take at most a fifth
// of a core.
const (
	labRebuildEvery = time.Second
	labRebuildRest  = 4
)

// labDrawing is the projector's state of the lab's numbers.
type labDrawing struct {
	mu    sync.Mutex
	armed bool          // a drawing is scheduled
	last  time.Time     // when the last drawing began
	built time.Time     // when the last one that rebuilt the counts began
	took  time.Duration // how long that one took
	sent  []byte        // what the last frame sent
	// drawing is held by a drawing: one at a time, in order.
	drawing sync.Mutex
}

// labChanged schedules a drawing of the lab's numbers, after events that
// may have moved them, unless one is scheduled or nobody watches (a page
// that opens later is drawn with the numbers as they are then).
func (p *Board) labChanged() {
	l := &p.lab
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.cfg.Lab == nil || l.armed || p.viewers.Load() == 0 {
		return
	}
	l.armed = true
	wait := labDrawEvery - time.Since(l.last)
	if !p.cfg.Lab.Fresh() {
		wait = max(wait, max(labRebuildEvery, labRebuildRest*l.took)-time.Since(l.built))
	}
	time.AfterFunc(max(0, wait), p.drawLab)
}

// drawLab draws the lab's numbers and, if they changed, sends them.
func (p *Board) drawLab() {
	l := &p.lab
	l.drawing.Lock()
	defer l.drawing.Unlock()
	rebuilds := !p.cfg.Lab.Fresh()
	l.mu.Lock()
	// Events from here on schedule the next drawing.
	l.armed, l.last = false, time.Now()
	if rebuilds {
		l.built = l.last
	}
	l.mu.Unlock()
	if p.cfg.Ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.cfg.Ctx, loadTimeout)
	defer cancel()
	drawn := p.cfg.Lab.Outcomes(ctx)
	if rebuilds {
		l.mu.Lock()
		l.took = time.Since(l.built)
		l.mu.Unlock()
	}
	if drawn == nil {
		return // not measured: the lab said why
	}
	l.mu.Lock()
	same := bytes.Equal(drawn, l.sent)
	l.sent = drawn
	l.mu.Unlock()
	if same {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A refresh frame: it sets the numbers whole, so a viewer that gets
	// it twice, or after a later one, shows them right at the next.
	p.addFrameLocked(p.modelSeq, true, []templ.Component{redrawOf("lab-outcomes", rawHTML(drawn))})
}

// rawHTML is HTML drawn already.
type rawHTML []byte

func (h rawHTML) Render(_ context.Context, w io.Writer) error {
	_, err := w.Write(h)
	return err
}

// roomMark marks a frame whose event changed what the lab's switches,
// the lesson or the checkout card show: a page that sees it asks
// /lab/live for them (static/lab.js). htmx swaps nothing for a comment.
var roomMark = rawHTML("<!--room-->")

// The workshop's scoreboard reaches the board through the event stream
// too: an event that changed it (WorkshopKind on the server where it
// changed, WorkshopSavedKind from a server that saved its changes where
// every server of the room reads them) draws no row, and its frame
// carries workshopMark: the board then asks /workshop/-/scores for the
// scoreboard as its viewer may see it (static/board.js), as it does when
// its stream opens again.
const (
	WorkshopKind      live.Kind = "workshop"
	WorkshopSavedKind live.Kind = "workshop-saved"
)

// workshopMark marks a frame whose event changed the workshop's
// scoreboard. htmx swaps nothing for a comment.
var workshopMark = rawHTML("<!--workshop-->")

// marksRoom reports whether e's frame carries roomMark.
func (p *Board) marksRoom(e live.Event) bool {
	return p.cfg.RoomChanged != nil && p.cfg.RoomChanged(e) || e.Kind == lesson.WatchKind || e.Kind == live.Gap
}
