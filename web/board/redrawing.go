package board

import (
	"context"
	"sync"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// redrawLocked returns what draws every panel as they are now, as one
// SSE event; it is rendered when called, outside the lock, and once for
// every viewer that opens before anything changes.
func (p *Board) redrawLocked() *redrawing {
	if r := p.redrawn; r != nil && r.seq == p.modelSeq && r.frames == p.frames {
		return r
	}
	r := &redrawing{epoch: p.cfg.Hub.Epoch(), seq: p.modelSeq, place: p.place, frames: p.frames, ops: p.fullFrameLocked()}
	p.redrawn = r
	return r
}

// Why says why a page that named the last event it saw is drawn whole
// rather than resumed, and so what its note says (Config.ResyncNote).
type Why int

// The reasons. Only a page's own server can resume it frame by frame: the
// frames are this server's drawing of its model, and another server of
// the room drew the same room in frames of its own, in its own order.
const (
	// FellBehind: the page's frames are gone from this server's ring.
	FellBehind Why = iota
	// Restarted: the page's ids were numbered by a server that no longer
	// runs: an earlier life of this one, or a server of the room that
	// stopped.
	Restarted
	// Moved: the page's ids were numbered by another server of this room,
	// which still runs; the page was sent here (a load balancer's turn).
	Moved
	// Reconnected: by another server, and whether it still runs could not
	// be read.
	Reconnected
	whys
)

// origin is where the events of a page with epoch came from.
func (p *Board) origin(ctx context.Context, epoch string) Why {
	if p.cfg.Origin == nil || epoch == "" {
		return Restarted
	}
	ctx, cancel := context.WithTimeout(ctx, originTimeout)
	defer cancel()
	return p.cfg.Origin(ctx, epoch)
}

// originTimeout bounds the look-up of a page's former server: past it the
// page is redrawn with a note that does not say where it came from.
const originTimeout = 2 * time.Second

// resyncLocked is redrawLocked for a page that had events from elsewhere:
// another life of the server or another server (why), or further back
// than the frames kept. Besides every panel its one SSE event carries the marks that make
// the page's scripts ask for the rest of the room (the chapter, the lab,
// the checkout card's order: static/lab.js), and the note that says so
// (Config.ResyncNote). Everything in it replaces a whole element, so a
// page that gets it twice is as after once. Like the redraw, it is made
// once for every page that resyncs before anything changes: after a
// restart, the whole class comes back at once.
func (p *Board) resyncLocked(why Why) *redrawing {
	cache := &p.resynced[why]
	if r := *cache; r != nil && r.seq == p.modelSeq && r.frames == p.frames {
		return r
	}
	ops := append([]templ.Component{roomMark, resyncMark}, p.fullFrameLocked()...)
	if p.cfg.ResyncNote != nil {
		ops = append(ops, p.cfg.ResyncNote(why))
	}
	r := &redrawing{epoch: p.cfg.Hub.Epoch(), seq: p.modelSeq, place: p.place, frames: p.frames, ops: ops}
	*cache = r
	return r
}

// resyncMark starts a frame that redraws a page which had events from
// elsewhere (resyncLocked): its scripts forget the versions they hold and
// ask for the whole room.
var resyncMark = rawHTML("<!--resync-->")

// redrawing is the drawing of every panel at one point of the model.
type redrawing struct {
	epoch       string
	seq, frames uint64 // the model's event and the frames made
	place       live.Place
	ops         []templ.Component
	once        sync.Once
	b           []byte
	// deflated is b compressed, once for the pages that take gzip: a
	// lecture hall's pages open at once, each drawn whole.
	deflateOnce sync.Once
	deflated    []byte
}

func (r *redrawing) bytes() []byte {
	r.once.Do(func() {
		r.b, r.ops = sseFrame(r.epoch, r.seq, r.place, r.ops), nil
	})
	return r.b
}

// encoded is the drawing as a stream sends it: compressed when gz.
func (r *redrawing) encoded(gz bool) []byte {
	if !gz {
		return r.bytes()
	}
	r.deflateOnce.Do(func() { r.deflated = live.Deflate(r.bytes()) })
	return r.deflated
}

// fullFrameLocked redraws every panel.
func (p *Board) fullFrameLocked() []templ.Component {
	p.steps = StepBar(p.cfg.Steps)
	l := p.snapshotLocked()
	return []templ.Component{
		views.StepBarView(l.Steps, true),
		views.Timeline(l.Timeline, true),
		inTable(views.KeysBody(l.Keys, l.Now, true)),
		inTable(views.ChargesBody(l.Charges, l.Now, true)),
		views.CountersView(l.Counters, true),
		views.FaultFields(l.Faults, true),
		views.ActiveFaults(l.Faults, true),
	}
}
