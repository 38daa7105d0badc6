package board

import (
	"bytes"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"
	templruntime "github.com/a-h/templ/runtime"

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
		f.sse = sseFrame(f.epoch, id, f.place, f.ops)
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
	renderInto(&buf, ops)
	return buf.Bytes()
}

// renderInto renders ops into buf, through one templ buffer for all of
// them: handed a plain writer, each generated component took a buffer
// from templ's pool and copied it out when done.
func renderInto(buf *bytes.Buffer, ops []templ.Component) {
	tb, _ := templruntime.GetBuffer(buf)
	for _, op := range ops {
		// Each its own context, as when rendered one by one: a
		// component's CSS is written with it, not only with the first.
		if err := op.Render(context.Background(), tb); err != nil {
			// Components only fail on a broken writer; a buffer is not one.
			panic(err)
		}
	}
	if err := templruntime.ReleaseBuffer(tb); err != nil {
		panic(err)
	}
}

// htmlScratch keeps the buffers frames are rendered into before they are
// written as SSE: a wake's HTML is tens of KB, and a buffer grown to that
// from nothing for every wake was a few percent of the server's CPU with
// 500 pages open (allocating and clearing each doubling).
var htmlScratch = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// sseFrame renders ops as one SSE event (writeFrame), into a slice of
// its own size.
func sseFrame(epoch string, seq uint64, place live.Place, ops []templ.Component) []byte {
	html := htmlScratch.Get().(*bytes.Buffer)
	html.Reset()
	renderInto(html, ops)
	h := html.Bytes()
	lines := bytes.Count(h, []byte{'\n'}) + bytes.Count(h, []byte{'\r'}) + 1
	var buf bytes.Buffer
	buf.Grow(len(h) + lines*len("data: \n") + 64)
	writeFrame(&buf, epoch, seq, place, h)
	if html.Cap() <= 1<<20 {
		htmlScratch.Put(html)
	}
	return buf.Bytes()
}

// writeFrame appends one SSE event: its id, its name and its HTML, one
// data line per line of HTML.
func writeFrame(buf *bytes.Buffer, epoch string, seq uint64, place live.Place, html []byte) {
	buf.WriteString("id: ")
	buf.WriteString(live.PlacedEventID(epoch, seq, place))
	buf.WriteString("\nevent: frame\n")
	for len(html) > 0 {
		line := html
		if i := bytes.IndexAny(html, "\r\n"); i >= 0 {
			line, html = html[:i], html[i+1:]
		} else {
			html = nil
		}
		buf.WriteString("data: ")
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}
