package board

import (
	"bytes"
	"context"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// ring is the frames, in a ring that the viewers read, and the wakes that
// tell the viewers of new ones. Only events that change the page have a
// frame, so in busy mode viewers wake twice a second, not once per event.
// Frame n sits at out[(n-1) % len(out)]: where the next one goes, how many
// the ring holds and which fell off all follow from frames.
type ring struct {
	out       []frame
	frames    uint64 // frames made so far: the newest frame's n
	lostSeq   uint64 // the seq of the newest frame that fell off the ring: a viewer resuming before it is redrawn
	lostFresh bool   // it was a refresh frame
	// place is the place in the room's order of the newest event drawn
	// (live.Place), which the frames made now carry; lostPlace is the
	// place of the newest frame that fell off the ring, and placeFrom
	// the frames made when the order last went back (the database
	// numbered batches again): a page resumes by its place only from
	// frames after it.
	place, lostPlace live.Place
	placeFrom        uint64
	frameSeq         uint64    // every event up to this one has been applied
	closed           bool      // the hub closed: streams end
	pending          bool      // frames were added since the last wake
	armed            bool      // a wake is scheduled
	lastPulse        time.Time // when the viewers were last woken
	// pulseN is the newest frame when the viewers were last woken: they
	// send frames up to it, so that all the viewers that are up to date
	// send the same run (and share its bytes); later frames wait for the
	// next wake. pulsed is the same, readable without mu.
	pulseN uint64
	pulsed atomic.Uint64
	// tip is the newest wake: the viewers that are up to date wait for it
	// to be done and then send the next one's bytes (see wake).
	tip *wake
	// beating says the heartbeat timer runs: it does while anyone watches.
	beating  bool
	lastWake time.Time // when the last wake was chained
	// redrawn is the latest drawing of every panel for a viewer that
	// opens (redrawLocked).
	redrawn *redrawing
	// resynced are the same for a page that had events from elsewhere
	// (resyncLocked), one for each Why.
	resynced [whys]*redrawing
	// streams are the open streams' connections, closed at shutdown so
	// that none, reading or not, holds it up.
	streams map[io.Closer]struct{}
}

// frame is one event's change to the page (or a busy-mode refresh),
// rendered to a finished SSE event the first time a viewer asks for it.
type frame struct {
	n       uint64 // this frame's place among all the board's frames
	seq     uint64 // the event the page is at after it: its SSE id
	refresh bool   // a busy-mode refresh, not an event's frame: seq is shared
	// place is the place in the room's order of the newest event the page
	// has after it: the frame's id carries it too.
	place  live.Place
	render *lazyFrame
	// orders is the charges per order list as a page has it after this
	// frame (the board's shown), nil when the frames do not say: the next
	// change draws it whole.
	orders *views.Counters
	// owner is the caller whose payment step the frame draws, when only
	// that caller's pages need it at once: the other phones get it with
	// the class's next round (fanWriter). "" when every page needs it at
	// once (the presenter's requests, a switch, a reset, the room's
	// marks, a refresh).
	owner string
}

// lazyFrame holds the fragments of a frame until someone renders them.
type lazyFrame struct {
	epoch string // the hub's life: the first part of the frame's id
	place live.Place
	once  sync.Once
	ops   []templ.Component
	sse   []byte
}

// bytes renders the frame once, whoever asks first. The fragments stay:
// a wake that joins this frame with others renders them again as one.
func (f *lazyFrame) bytes(id uint64) []byte {
	f.once.Do(func() {
		var buf bytes.Buffer
		writeFrame(&buf, f.epoch, id, f.place, renderFrame(f.ops...))
		f.sse = buf.Bytes()
	})
	return f.sse
}

// sse is the frame as one finished SSE event.
func (f frame) sse() []byte { return f.render.bytes(f.seq) }

// refreshMark starts a refresh frame: it has the id of the event frame
// before it, and a page that passes frames on to its other tabs, which
// drops a frame whose id it has seen (static/pay.js), takes it all the
// same. A refresh sets totals whole: taking one twice is harmless.
var refreshMark = rawHTML("<!--refresh-->")

// addFrameLocked keeps the fragments that bring a page to event seq, to be
// rendered when a viewer first needs them, and schedules a wake.
func (p *Board) addFrameLocked(seq uint64, refresh bool, ops []templ.Component) {
	p.addOwnedFrameLocked(seq, refresh, "", ops)
}

// addOwnedFrameLocked is addFrameLocked for a frame that only owner's
// pages (and the boards) need at once (frame.owner).
func (p *Board) addOwnedFrameLocked(seq uint64, refresh bool, owner string, ops []templ.Component) {
	if len(ops) == 0 {
		return
	}
	next := p.frames % uint64(len(p.out))
	if p.frames >= uint64(len(p.out)) {
		old := p.out[next]
		p.lostSeq, p.lostFresh, p.lostPlace = old.seq, old.refresh, old.place
	}
	if refresh {
		ops = append([]templ.Component{refreshMark}, ops...)
	}
	p.frames++
	p.out[next] = frame{n: p.frames, seq: seq, refresh: refresh, place: p.place, render: &lazyFrame{epoch: p.cfg.Hub.Epoch(), place: p.place, ops: ops}, orders: p.shown, owner: owner}
	p.pending = true
	p.pulseLocked()
}

// The viewers are woken at most once per fanoutInterval: under a stream
// of events each viewer gets one write per interval, whatever the rate
// of payments, so what a viewer costs does not grow with them. A lone
// event after a quiet spell goes out at once. The interval grows with the
// viewers, so that all of them together are woken at most about 2,000
// times a second, up to 100 ms: with 200 pages open, a payment reaches
// them a tenth of a second after its answer at worst, and each wake
// carries several payments' changes in one write per page.
const (
	fanoutMin       = 5 * time.Millisecond
	fanoutMax       = 100 * time.Millisecond
	fanoutPerViewer = 500 * time.Microsecond
)

func (p *Board) fanoutInterval() time.Duration {
	return min(fanoutMax, max(fanoutMin, time.Duration(p.viewers.Load())*fanoutPerViewer))
}

// A phone (a page that is not a board: fanPage.phone) gets its own
// caller's payment steps and every change of the room at each wake, as a
// board does, and the rest of the class's payments in rounds classPerViewer
// per open page apart, at least the fan-out interval and at most classMax:
// up to 200 pages that is the fan-out interval and a phone is written as
// a board is; with 500 pages open, every 250 ms. Each write costs the
// server about as much whatever it carries (a system call and, on one
// machine, the reader's side of loopback), and with hundreds of phones
// those writes were most of what the pages cost: the class's payments
// reach a phone later, never differently (the same frames, in the same
// order), while the projector and the payer's own phone see a payment
// within the fan-out interval.
const (
	classPerViewer = 500 * time.Microsecond
	classMax       = 250 * time.Millisecond
)

// classInterval is how far apart the class's rounds to the phones are.
func (p *Board) classInterval() time.Duration {
	return min(classMax, max(p.fanoutInterval(), time.Duration(p.viewers.Load())*classPerViewer))
}

// pulseLocked wakes the viewers now, or schedules it for the end of the
// current interval.
func (p *Board) pulseLocked() {
	if !p.pending || p.armed || p.closed {
		return
	}
	wait := time.Until(p.lastPulse.Add(p.fanoutInterval()))
	if wait > 0 {
		p.armed = true
		time.AfterFunc(wait, func() {
			p.mu.Lock()
			p.armed = false
			p.pulseLocked()
			p.mu.Unlock()
		})
		return
	}
	w := &wake{prev: p.pulseN, last: p.frames}
	// The ring holds every frame since the last wake: a wake comes within
	// an interval, long before a thousand frames are made.
	held := p.held()
	from := held - int(min(p.frames-p.pulseN, uint64(held)))
	w.frames = make([]frame, 0, held-from)
	for i := from; i < held; i++ {
		w.frames = append(w.frames, p.at(i))
	}
	if len(w.frames) > 0 {
		w.prev = w.frames[0].n - 1
	}
	p.pending, p.lastPulse, p.pulseN = false, time.Now(), p.frames
	p.pulsed.Store(p.frames)
	p.chainLocked(w)
}

// wake is one fan-out: the frames made since the one before, which every
// viewer that is up to date sends as one write of the same bytes. The
// wakes form a chain: a viewer waits for the newest to be done, then
// follows next, so that waking two hundred viewers takes one channel
// close, and a viewer neither locks the projector nor allocates to find
// what to send.
type wake struct {
	prev, last uint64  // it brings a page from after frame prev to after frame last
	frames     []frame // those frames; none for a heartbeat
	beat       bool    // a heartbeat comment, for idle streams
	end        bool    // the projector closed: streams end
	// id numbers the wakes in the order they were chained.
	id uint64

	once sync.Once
	b    []byte
	// deflated is b compressed once for every page that takes gzip
	// (live.Deflate).
	deflateOnce sync.Once
	deflated    []byte

	next *wake         // set before done is closed
	done chan struct{} // closed when next is set
}

// chainLocked makes w the newest wake and wakes the viewers waiting for
// one.
func (p *Board) chainLocked(w *wake) {
	w.done = make(chan struct{})
	old := p.tip
	w.id = old.id + 1
	old.next, p.tip = w, w
	p.lastWake = time.Now()
	close(old.done)
}

// startBeatLocked starts the heartbeat, unless it runs: while anyone
// watches, a stream that has sent nothing for a heartbeat interval gets a
// comment, which keeps idle connections (and the proxies between) open
// and lets a dead viewer be noticed. One timer serves every stream.
func (p *Board) startBeatLocked() {
	if p.beating || p.closed {
		return
	}
	p.beating = true
	every := p.cfg.Heartbeat / 2
	var t *time.Timer
	t = time.AfterFunc(every, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed || p.viewers.Load() == 0 {
			p.beating = false
			return
		}
		if time.Since(p.lastWake) >= every {
			p.chainLocked(&wake{prev: p.pulseN, last: p.pulseN, beat: true})
		}
		t.Reset(every)
	})
}

// bytes is what the wake sends to a viewer at prev: its frames as a
// single SSE event, rendered once for every viewer. A panel that several
// of its frames redraw in full (the counters, a key row, an outcome) is
// drawn once, as it is after the last of them.
func (w *wake) bytes() []byte {
	w.once.Do(func() {
		switch {
		case w.beat:
			w.b = heartbeatComment
		case len(w.frames) == 1:
			w.b = w.frames[0].sse()
		case len(w.frames) > 1:
			var ops []templ.Component
			for _, f := range w.frames {
				ops = append(ops, f.render.ops...)
			}
			var buf bytes.Buffer
			last := w.frames[len(w.frames)-1]
			writeFrame(&buf, last.render.epoch, last.seq, last.place, renderFrame(lastRedraws(ops)...))
			w.b = buf.Bytes()
		}
	})
	return w.b
}

// deflate is bytes compressed, once for every viewer whose stream is
// gzip-encoded.
func (w *wake) deflate() []byte {
	w.deflateOnce.Do(func() {
		if b := w.bytes(); len(b) > 0 {
			w.deflated = live.Deflate(b)
		}
	})
	return w.deflated
}

// after returns what a viewer that has sent every frame up to n sends for
// this wake, compressed when gz says its stream is: the shared bytes when
// it is where the wake starts, the frames it lacks one by one when it is
// part way (a viewer just drawn or catching up), nothing when it is past.
// ok is false when frames the viewer lacks are not in the wake: it must
// be redrawn.
func (w *wake) after(n uint64, gz bool) (b []byte, ok bool) {
	switch {
	case (n == w.prev || w.beat) && gz:
		return w.deflate(), true
	case n == w.prev || w.beat:
		return w.bytes(), true
	case n >= w.last:
		return nil, true
	case n < w.prev:
		return nil, false
	}
	for _, f := range w.frames {
		if f.n > n {
			b = append(b, f.sse()...)
		}
	}
	if gz && len(b) > 0 {
		b = live.Deflate(b)
	}
	return b, true
}

// redraw is a fragment that replaces one element of the page whole: of
// several that replace the same element in one write, only the last
// needs sending. A fragment that changes something inside an element
// (in) is not sent either when a later one replaces that element whole.
type redraw struct {
	id string // the element it replaces whole; empty for a change within in
	in string // the element it changes, or replaces, a part of
	templ.Component
}

// redrawOf marks c as replacing the element id whole.
func redrawOf(id string, c templ.Component) templ.Component { return redraw{id: id, Component: c} }

// partOf marks c as changing only the inside of element in (replacing
// element id whole, when id is not empty).
func partOf(in, id string, c templ.Component) templ.Component {
	return redraw{id: id, in: in, Component: c}
}

// lastRedraws drops each redraw that a later one of the same element
// replaces, and each change within an element that a later redraw
// replaces whole; everything else keeps its order.
func lastRedraws(ops []templ.Component) []templ.Component {
	last := map[string]int{}
	for i, op := range ops {
		if r, ok := op.(redraw); ok && r.id != "" {
			last[r.id] = i
		}
	}
	out := ops[:0:0]
	for i, op := range ops {
		if r, ok := op.(redraw); ok {
			if r.id != "" && last[r.id] != i {
				continue
			}
			if j, whole := last[r.in]; r.in != "" && whole && j > i {
				continue
			}
		}
		out = append(out, op)
	}
	return out
}

// maxBatch bounds the frames a stream takes (and pins) per write while
// it catches up: a viewer that does not read holds at most this many
// while its write times out.
const maxBatch = 64

// framesAfterLocked returns the frames after frame n up to frame last,
// oldest first and at most maxBatch, for a viewer catching up, and
// whether none was lost to the ring.
func (p *Board) framesAfterLocked(n, last uint64) ([]frame, bool) {
	held := p.held()
	if p.closed || n < p.frames-uint64(held) {
		return nil, false
	}
	first := held - int(min(p.frames-n, uint64(held)))
	end := min(first+maxBatch, held-int(min(p.frames-last, uint64(held))))
	var out []frame
	for i := first; i < end; i++ {
		out = append(out, p.at(i))
	}
	return out, true
}

// held is how many frames the ring holds.

func (p *Board) held() int { return int(min(p.frames, uint64(len(p.out)))) }

// at returns the i-th frame the ring holds, oldest first.
func (p *Board) at(i int) frame {
	return p.out[(p.frames-uint64(p.held())+uint64(i))%uint64(len(p.out))]
}

// resumeLocked finds where a viewer that has seen every event up to seq
// continues: after frame n. ok is false when frames it needs are gone
// (or were never made): it must be redrawn. A refresh frame shares its
// seq with the event before it, so one with seq itself is sent again:
// refreshes only set totals, and sending one twice is harmless.
func (p *Board) resumeLocked(seq uint64) (n uint64, ok bool) {
	if p.closed || seq > p.modelSeq || seq < p.lostSeq || seq == p.lostSeq && p.lostFresh {
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
	if p.closed || place.IsZero() || place.After(p.place) || p.lostPlace.After(place) || p.ownRowsLocked() {
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
		var buf bytes.Buffer
		writeFrame(&buf, r.epoch, r.seq, r.place, renderFrame(r.ops...))
		r.b, r.ops = buf.Bytes(), nil
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

// inTable wraps a table part so that it survives the trip through an
// HTML parser next to other fragments (see views.FrameTable).
func inTable(c templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		return views.FrameTable().Render(templ.WithChildren(ctx, c), w)
	})
}

// renderFrame renders the fragments of one event into one HTML string.
func renderFrame(ops ...templ.Component) []byte {
	var buf bytes.Buffer
	for _, op := range ops {
		if err := op.Render(context.Background(), &buf); err != nil {
			// Components only fail on a broken writer; a buffer is not one.
			panic(err)
		}
	}
	return buf.Bytes()
}
