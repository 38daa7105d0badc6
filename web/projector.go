package web

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// The projector turns the event stream into what the live panels show.
//
// One goroutine reads every event in order, updates a small model (the
// timeline rows, the key rows, the charges, the counters) and keeps, per
// event, the fragments that move a page from the state before the event to
// the state after it. A frame is rendered to HTML the first time a viewer
// needs it and only then: with nobody watching, an event costs a model
// update and no rendering, yet a viewer that connects later, or resumes
// with Last-Event-ID, still gets every frame it missed. Every viewer's
// stream sends the same bytes, so a hundred viewers cost one rendering,
// and a page rendered from the model at event N, then streamed from N+1,
// is always exactly current: nothing is drawn twice and nothing is missed.

// How much the panels keep. The page shows the newest; the rest is in the
// database and the API.
const (
	liveRows    = 30
	liveSteps   = 16
	liveKeys    = 40
	liveCharges = 40
	// liveOrders is how many orders the charges per order list: a class
	// of forty finds every student's order there.
	liveOrders = 48
	// liveFrames is how many frames a viewer may fall behind before it is
	// dropped (it reconnects and is redrawn).
	liveFrames = 1024
	// liveOrderLimit bounds the orders the projector counts charges for
	// (to spot an order charged twice): it remembers the last half of it
	// to all of it (boundedMap). The orders first charged longest ago are
	// forgotten: a second charge for one of those is still counted and
	// listed, but not flagged as a repeat.
	liveOrderLimit = 10_000
	// liveSeenLimit bounds the charge ids remembered so that a charge
	// both loaded from the database and seen as an event counts once.
	// Only charges of the last moments can arrive both ways.
	liveSeenLimit = 4096
)

// frame is one event's change to the page (or a busy-mode refresh),
// rendered to a finished SSE event the first time a viewer asks for it.
type frame struct {
	n       uint64 // this frame's place among all the projector's frames
	seq     uint64 // the event the page is at after it: its SSE id
	refresh bool   // a busy-mode refresh, not an event's frame: seq is shared
	render  *lazyFrame
}

// lazyFrame holds the fragments of a frame until someone renders them.
type lazyFrame struct {
	once sync.Once
	ops  []templ.Component
	sse  []byte
}

// bytes renders the frame once, whoever asks first. The fragments stay:
// a wake that joins this frame with others renders them again as one.
func (f *lazyFrame) bytes(id uint64) []byte {
	f.once.Do(func() {
		var buf bytes.Buffer
		writeFrame(&buf, id, renderFrame(f.ops...))
		f.sse = buf.Bytes()
	})
	return f.sse
}

// sse is the frame as one finished SSE event.
func (f frame) sse() []byte { return f.render.bytes(f.seq) }

type orderState struct {
	scope, orderID string
	charges        int
}

// orderRef names an order within its scope: the projector's map key for
// it, compared field by field, so that finding an order allocates
// nothing.
type orderRef struct{ scope, orderID string }

type projector struct {
	s *Server
	// viewers counts the open event streams; it changes under mu.
	viewers atomic.Int64
	// heartbeat and writeTimeout time the event streams (events.go).
	heartbeat, writeTimeout time.Duration

	mu       sync.Mutex
	modelSeq uint64 // the model reflects every event up to this one
	rows     []*views.TimelineRow
	keys     []*views.KeyRow
	charges  []views.ChargeRow
	seen     boundedMap[string, struct{}]      // charge ids counted, so none counts twice
	orders   boundedMap[orderRef, *orderState] // the orders charged lately
	counters views.Counters
	faults   views.FaultSwitches
	twiceN   int // orders charged more than once
	onceN    int // orders charged exactly once

	fullNext bool // the next frame redraws every panel
	// steps is the step bar as the frames drew it last (step.go's
	// drawSteps): a page drawn from a snapshot gets it, and the frames
	// after redraw only what changed since.
	steps views.StepBar

	// The frames, in a ring that the viewers read. Only events that
	// change the page have one, so in busy mode viewers wake twice a
	// second, not once per event.
	// Frame n sits at out[(n-1) % len(out)]: where the next one goes, how
	// many the ring holds and which fell off all follow from frames.
	out       []frame
	frames    uint64    // frames made so far: the newest frame's n
	lostSeq   uint64    // the seq of the newest frame that fell off the ring: a viewer resuming before it is redrawn
	lostFresh bool      // it was a refresh frame
	frameSeq  uint64    // every event up to this one has been applied
	closed    bool      // the hub closed: streams end
	pending   bool      // frames were added since the last wake
	armed     bool      // a wake is scheduled
	lastPulse time.Time // when the viewers were last woken
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
	// streams are the open streams' connections, closed at shutdown so
	// that none, reading or not, holds it up.
	streams map[io.Closer]struct{}

	// Busy mode: when events come faster than anyone can read them, the
	// panels stop drawing each request and show totals instead, refreshed
	// twice a second, and redraw everything once it calms down. Viewers
	// then cost the payment path almost nothing, however fast it runs.
	rate      rateMeter
	busy      *views.TimelineRow // the row that stands for the busy period
	busyReqs  int                // requests not drawn during it
	busySince time.Time
	busyFlag  atomic.Bool // busy, for the ticker and the streams
	// busyStart wakes the ticker when busy mode starts; ticking says
	// whether it runs, tickerRuns how often it was started.
	busyStart  chan struct{}
	ticking    atomic.Bool
	tickerRuns atomic.Uint64
	recent     []*orderState // the latest orders charged, newest first
	twice      []*orderState // the latest orders charged more than once, oldest first

	// lab is the lab's numbers, drawn after events (lab_stream.go).
	lab labDrawing
}

// boundedMap remembers the entries put in it lately, in two generations:
// the current one takes new entries until it holds half the limit, then
// becomes the previous one, and the previous one is forgotten whole. It
// holds between half the limit and the limit of the newest entries.
// Forgetting the oldest entry at each addition instead (a lookup, an
// insert and a delete in a map of thousands, for every charge) cost more
// than twice as much, and three servers' charges reach every server.
type boundedMap[K comparable, V any] struct {
	half      int
	cur, prev map[K]V
}

func newBoundedMap[K comparable, V any](limit int) boundedMap[K, V] {
	half := max(1, limit/2)
	return boundedMap[K, V]{half: half, cur: make(map[K]V, half)}
}

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	if v, ok := b.cur[k]; ok {
		return v, true
	}
	v, ok := b.prev[k]
	return v, ok
}

// len is how many entries b holds.
func (b *boundedMap[K, V]) len() int { return len(b.cur) + len(b.prev) }

// put adds k, which get did not find, and returns the generation it
// forgot to make room, if it forgot one.
func (b *boundedMap[K, V]) put(k K, v V) (forgotten map[K]V) {
	if len(b.cur) >= b.half {
		forgotten, b.prev, b.cur = b.prev, b.cur, make(map[K]V, b.half)
	}
	b.cur[k] = v
	return forgotten
}

// Busy mode's thresholds. A request is six to nine events; a class of
// thirty double-clicking together makes about 60 requests in a second or
// two, which stays below both ways in: 600 events in the last second, or
// 240 in the last 200 ms (a flood, noticed before it has cost much).
const (
	busyEnter      = 600 // events in the last second
	busyEnterBurst = 240 // events in the last 200 ms
	busyLeave      = 100 // events in the last second
	busyRefresh    = 500 * time.Millisecond
	busyBatch      = 20 * time.Millisecond
)

// rateMeter counts events in the last second, in ten buckets.
type rateMeter struct {
	counts [10]int
	slots  [10]int64
}

func (m *rateMeter) add(now time.Time) {
	b := now.UnixMilli() / 100
	i := b % 10
	if m.slots[i] != b {
		m.slots[i], m.counts[i] = b, 0
	}
	m.counts[i]++
}

func (m *rateMeter) perSecond(now time.Time) int { return m.within(now, 10) }

// recent counts the events of the last two buckets (200 ms).
func (m *rateMeter) recent(now time.Time) int { return m.within(now, 2) }

func (m *rateMeter) within(now time.Time, buckets int64) int {
	b := now.UnixMilli() / 100
	n := 0
	for i := range m.slots {
		if b-m.slots[i] < buckets {
			n += m.counts[i]
		}
	}
	return n
}

// live returns the server's projector, starting it on first use: a server
// that only serves the API never renders a fragment.
func (s *Server) live() *projector {
	s.liveOnce.Do(func() { s.proj = startProjector(s); s.liveStarted.Store(true) })
	return s.proj
}

func startProjector(s *Server) *projector {
	p := &projector{s: s, out: make([]frame, liveFrames), busyStart: make(chan struct{}, 1),
		heartbeat: heartbeatEvery, writeTimeout: writeTimeout, seen: newBoundedMap[string, struct{}](liveSeenLimit),
		tip: &wake{done: make(chan struct{})}, streams: map[io.Closer]struct{}{}}
	// Read the hub's position before the database: an event that lands in
	// between is then both in the loaded state and in the stream, and
	// applying it again is harmless (keys and charges are upserted by id),
	// whereas the other order would lose it.
	start := s.hub.LastSeq()
	p.steps = stepView(s.steps)
	p.load(s.baseCtx)
	// Events up to start have no frames: a viewer resuming from before
	// them is redrawn.
	p.modelSeq, p.frameSeq, p.lostSeq = start, start, start
	go p.run(s.hub.Subscribe(start))
	go p.tick()
	return p
}

// tick refreshes the totals while busy. A refresh is the projector's own
// doing, not something that happened: it is a frame, never an event. The
// ticker runs only while busy, so that an idle server wakes for nothing;
// entering busy mode starts it again (enterBusy).
func (p *projector) tick() {
	for {
		select {
		case <-p.s.baseCtx.Done():
			return
		case <-p.busyStart:
		}
		p.ticking.Store(true)
		p.tickerRuns.Add(1)
		t := time.NewTicker(busyRefresh)
		for p.busyFlag.Load() {
			select {
			case <-p.s.baseCtx.Done():
				t.Stop()
				return
			case <-t.C:
				p.refresh()
			}
		}
		t.Stop()
		p.ticking.Store(false)
	}
}

// refresh redraws the busy totals, or leaves busy mode once events have
// slowed down.
func (p *projector) refresh() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy == nil {
		return
	}
	if p.rate.perSecond(now) >= busyLeave {
		p.addFrameLocked(p.modelSeq, true, p.busyFrame(now))
		return
	}
	// The timeline did not change while busy (nothing was drawn or
	// kept); the tables and counters did.
	busy := p.busy
	p.leaveBusy()
	l := p.snapshotLocked()
	p.addFrameLocked(p.modelSeq, true, []templ.Component{inTable(views.KeysBody(l.Keys, l.Now, true)),
		inTable(views.ChargesBody(l.Charges, l.Now, true)), views.CountersView(l.Counters, true),
		views.StepView(busy.Steps[0], true), views.Outcome(busy.ID, busy.Outcome, true)})
}

// projectorLoadTimeout bounds a reload of the model from the database;
// what it could not read is missing from the panels until the next one.
const projectorLoadTimeout = 5 * time.Second

// load fills the model from the database, for a start, after the
// projector fell behind, or after other servers' events were lost.
func (p *projector) load(ctx context.Context) {
	// The projector applies no event while it loads: a database that
	// does not answer must not stop the live pages for longer than this.
	ctx, cancel := context.WithTimeout(ctx, projectorLoadTimeout)
	defer cancel()
	keys, err := p.s.db.RecentKeys(ctx, liveKeys)
	if err != nil && ctx.Err() == nil {
		p.s.logf("live: loading keys: %v", err)
	}
	recent, err := p.s.db.RecentCharges(ctx, 5000)
	if err != nil && ctx.Err() == nil {
		p.s.logf("live: loading charges: %v", err)
	}
	total, err := p.s.db.CountCharges(ctx)
	if err != nil && ctx.Err() == nil {
		p.s.logf("live: counting charges: %v", err)
	}
	faults := p.currentSwitches()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = p.keys[:0]
	for _, k := range keys {
		p.keys = append(p.keys, &views.KeyRow{ID: keyDOMID(k.Scope, k.Key), Scope: k.Scope, Key: k.Key, PersonalData: pay.PersonalData(k.Key),
			Fingerprint: k.Fingerprint, OrderID: k.OrderID, Amount: k.AmountSatang, Status: k.Status,
			Code: k.ResponseStatus, Created: k.CreatedAt})
	}
	p.forgetCharges()
	p.charges = p.charges[:0]
	// Oldest first, so that "charged again" marks the later charge.
	for i := len(recent) - 1; i >= 0; i-- {
		c := recent[i]
		if _, ok := p.seen.get(c.ID); !ok {
			p.seen.put(c.ID, struct{}{})
		}
		o := p.order(c.Scope, c.OrderID)
		p.charged(o)
		if i < liveCharges {
			p.charges = append(p.charges, views.ChargeRow{ID: chargeDOMID(c.ID, c.Scope, c.Key), Charge: c.ID,
				Scope: c.Scope, Key: c.Key, OrderID: c.OrderID, Amount: c.AmountSatang, Time: c.CreatedAt, Repeat: o.charges > 1})
		}
	}
	p.counters.Charges = total
	p.faults = faults
}

// forgetCharges empties what the projector knows of charges and orders.
func (p *projector) forgetCharges() {
	p.seen = newBoundedMap[string, struct{}](liveSeenLimit)
	p.orders = newBoundedMap[orderRef, *orderState](liveOrderLimit)
	p.recent, p.twice, p.twiceN, p.onceN = nil, nil, 0, 0
}

// order returns the charge count of an order, starting one if needed. An
// order charged again moves to the newer generation, so that an order
// charged twice is not forgotten sooner than one charged once since; the
// orders of the generation that makes room are forgotten.
func (p *projector) order(scope, orderID string) *orderState {
	k := orderRef{scope, orderID}
	if o, ok := p.orders.cur[k]; ok {
		return o
	}
	o, ok := p.orders.prev[k]
	if ok {
		delete(p.orders.prev, k)
	} else {
		o = &orderState{scope: scope, orderID: orderID}
	}
	for _, old := range p.orders.put(k, o) {
		if old.charges == 1 {
			p.onceN--
		}
	}
	return o
}

// currentSwitches reads every switch for the panel.
func (p *projector) currentSwitches() views.FaultSwitches {
	f := p.s.currentFaults()
	return views.FaultSwitches{Faults: f, ClockOffset: p.s.clock.Offset()}
}

// run applies events until the hub closes or the server stops; then it
// ends every stream.
func (p *projector) run(sub *live.Subscription) {
	ctx := p.s.baseCtx
	defer p.close()
	for {
		entries, err := sub.Next(ctx)
		switch {
		case errors.Is(err, live.ErrTooSlow):
			// Events were lost to the ring: start again from the database,
			// and make the next frame redraw everything.
			start := p.s.hub.LastSeq()
			p.load(ctx)
			p.mu.Lock()
			p.modelSeq, p.fullNext = start, true
			p.advanceLocked(start)
			p.mu.Unlock()
			sub = p.s.hub.Subscribe(start)
			continue
		case err != nil:
			return
		}
		for _, e := range entries {
			p.apply(e.Event)
		}
		p.labChanged()
		if p.busyFlag.Load() || p.viewers.Load() == 0 {
			// Nobody reads a busy timeline event by event, and nobody
			// reads an unwatched one at all: take the next events in
			// larger batches and leave the CPU to the payments. (A viewer
			// that connects meanwhile is drawn from the model at once.)
			select {
			case <-time.After(busyBatch):
			case <-ctx.Done():
				return
			}
		}
	}
}

// close ends every stream: the hub closed or the server is stopping.
func (p *projector) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.chainLocked(&wake{prev: p.pulseN, last: p.pulseN, end: true})
	// A stream blocked in a write to a viewer that does not read would
	// hold shutdown until its write timed out: close them all now.
	for c := range p.streams {
		_ = c.Close()
	}
}

// advanceLocked records that every event up to seq has been applied.
func (p *projector) advanceLocked(seq uint64) {
	if seq > p.frameSeq {
		p.frameSeq = seq
	}
}

// refreshMark starts a refresh frame: it has the id of the event frame
// before it, and a page that passes frames on to its other tabs, which
// drops a frame whose id it has seen (static/pay.js), takes it all the
// same. A refresh sets totals whole: taking one twice is harmless.
var refreshMark = rawHTML("<!--refresh-->")

// addFrameLocked keeps the fragments that bring a page to event seq, to be
// rendered when a viewer first needs them, and schedules a wake.
func (p *projector) addFrameLocked(seq uint64, refresh bool, ops []templ.Component) {
	if len(ops) == 0 {
		return
	}
	next := p.frames % uint64(len(p.out))
	if p.frames >= uint64(len(p.out)) {
		old := p.out[next]
		p.lostSeq, p.lostFresh = old.seq, old.refresh
	}
	if refresh {
		ops = append([]templ.Component{refreshMark}, ops...)
	}
	p.frames++
	p.out[next] = frame{n: p.frames, seq: seq, refresh: refresh, render: &lazyFrame{ops: ops}}
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

func (p *projector) fanoutInterval() time.Duration {
	return min(fanoutMax, max(fanoutMin, time.Duration(p.viewers.Load())*fanoutPerViewer))
}

// pulseLocked wakes the viewers now, or schedules it for the end of the
// current interval.
func (p *projector) pulseLocked() {
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

	once sync.Once
	b    []byte

	next *wake         // set before done is closed
	done chan struct{} // closed when next is set
}

// chainLocked makes w the newest wake and wakes the viewers waiting for
// one.
func (p *projector) chainLocked(w *wake) {
	w.done = make(chan struct{})
	old := p.tip
	old.next, p.tip = w, w
	p.lastWake = time.Now()
	close(old.done)
}

// startBeatLocked starts the heartbeat, unless it runs: while anyone
// watches, a stream that has sent nothing for a heartbeat interval gets a
// comment, which keeps idle connections (and the proxies between) open
// and lets a dead viewer be noticed. One timer serves every stream.
func (p *projector) startBeatLocked() {
	if p.beating || p.closed {
		return
	}
	p.beating = true
	every := p.heartbeat / 2
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
			writeFrame(&buf, w.frames[len(w.frames)-1].seq, renderFrame(lastRedraws(ops)...))
			w.b = buf.Bytes()
		}
	})
	return w.b
}

// after returns what a viewer that has sent every frame up to n sends for
// this wake: the shared bytes when it is where the wake starts, the
// frames it lacks one by one when it is part way (a viewer just drawn or
// catching up), nothing when it is past.
// ok is false when frames the viewer lacks are not in the wake: it must
// be redrawn.
func (w *wake) after(n uint64) (b []byte, ok bool) {
	switch {
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
	return b, true
}

// redraw is a fragment that replaces one element of the page whole: of
// several that replace the same element in one write, only the last
// needs sending.
type redraw struct {
	id string
	templ.Component
}

// redrawOf marks c as replacing the element id whole.
func redrawOf(id string, c templ.Component) templ.Component { return redraw{id: id, Component: c} }

// lastRedraws drops each redraw that a later one of the same element
// replaces; everything else keeps its order.
func lastRedraws(ops []templ.Component) []templ.Component {
	last := map[string]int{}
	for i, op := range ops {
		if r, ok := op.(redraw); ok {
			last[r.id] = i
		}
	}
	out := ops[:0:0]
	for i, op := range ops {
		if r, ok := op.(redraw); ok && last[r.id] != i {
			continue
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
func (p *projector) framesAfterLocked(n, last uint64) ([]frame, bool) {
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
func (p *projector) held() int { return int(min(p.frames, uint64(len(p.out)))) }

// at returns the i-th frame the ring holds, oldest first.
func (p *projector) at(i int) frame {
	return p.out[(p.frames-uint64(p.held())+uint64(i))%uint64(len(p.out))]
}

// resumeLocked finds where a viewer that has seen every event up to seq
// continues: after frame n. ok is false when frames it needs are gone
// (or were never made): it must be redrawn. A refresh frame shares its
// seq with the event before it, so one with seq itself is sent again:
// refreshes only set totals, and sending one twice is harmless.
func (p *projector) resumeLocked(seq uint64) (n uint64, ok bool) {
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

// snapshot copies the model: the state after event Seq.
func (p *projector) snapshot() views.Live {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshotLocked()
}

func (p *projector) snapshotLocked() views.Live {
	l := views.Live{Seq: p.modelSeq, Now: p.s.clock.Now(), Counters: p.countersLocked(), Faults: p.faults, Steps: p.steps}
	for _, r := range p.rows {
		c := *r
		c.Steps = slices.Clone(r.Steps)
		l.Timeline = append(l.Timeline, c)
	}
	for _, k := range p.keys {
		l.Keys = append(l.Keys, *k)
	}
	l.Charges = slices.Clone(p.charges)
	slices.Reverse(l.Charges) // newest first
	return l
}

func (p *projector) countersLocked() views.Counters {
	c := p.counters
	c.Orders, c.Twice = nil, p.twiceN
	// Every order charged twice (the newest liveOrders of them), then the
	// most recently charged, in order number: a student finds theirs as
	// in an index, and the red ones stand out wherever they fall.
	for _, o := range p.twice {
		c.Orders = append(c.Orders, views.OrderCount{Scope: o.scope, OrderID: o.orderID, Charges: o.charges})
	}
	for _, o := range p.recent {
		if len(c.Orders) >= liveOrders {
			break
		}
		if o.charges == 1 {
			c.Orders = append(c.Orders, views.OrderCount{Scope: o.scope, OrderID: o.orderID, Charges: o.charges})
		}
	}
	sort.Slice(c.Orders, func(i, j int) bool {
		a, b := c.Orders[i], c.Orders[j]
		if a.OrderID != b.OrderID {
			return orderNumberLess(a.OrderID, b.OrderID)
		}
		return a.Scope < b.Scope
	})
	// The orders charged once that the list leaves out: a student who
	// does not find theirs learns why.
	listed := 0
	for _, o := range c.Orders {
		if o.Charges == 1 {
			listed++
		}
	}
	c.MoreOrders = max(p.onceN-listed, 0)
	return c
}

// charged counts one more charge for an order.
func (p *projector) charged(o *orderState) {
	o.charges++
	switch o.charges {
	case 1:
		p.onceN++
	case 2:
		p.onceN--
	}
	if o.charges == 2 {
		p.twiceN++
		p.twice = append(p.twice, o)
		if len(p.twice) > liveOrders {
			p.twice = slices.Delete(p.twice, 0, 1)
		}
	}
	if i := slices.Index(p.recent, o); i >= 0 {
		p.recent = slices.Delete(p.recent, i, i+1)
	}
	p.recent = slices.Insert(p.recent, 0, o)
	if len(p.recent) > liveOrders {
		p.recent = p.recent[:liveOrders]
	}
}

// apply updates the model with one event and keeps the frame that moves
// a page from the state before it to the state after it (none when busy
// mode draws nothing for it).
func (p *projector) apply(e live.Event) {
	var faults *views.FaultSwitches
	if e.Kind == live.Switched || e.Kind == live.Reset {
		f := p.currentSwitches()
		faults = &f
	}
	var pruned []views.KeyRow
	if e.Kind == live.Pruned {
		pruned = p.loadKeys()
	}
	if e.Kind == live.Gap {
		// Other servers' events were lost on the way here: what the tables
		// and counters show comes from the database again, and the next
		// frame redraws every panel. (An event applied again meanwhile is
		// harmless: keys and charges are upserted by id.)
		p.load(p.s.baseCtx)
		p.mu.Lock()
		p.fullNext = true
		p.mu.Unlock()
	}
	now := time.Now()

	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.advanceLocked(e.Seq)
	p.rate.add(now) // under mu: the busy ticker reads it too
	u := &update{p: p, e: e, quiet: p.busy != nil}
	before := p.counters
	if faults != nil {
		p.faults = *faults
	}
	switch e.Kind {
	case live.Reset:
		p.rows, p.keys, p.charges = nil, nil, nil
		p.forgetCharges()
		p.counters = views.Counters{}
		p.leaveBusy()
		p.fullNext = true
	case live.Pruned:
		p.keys = nil
		for i := range pruned {
			p.keys = append(p.keys, &pruned[i])
		}
		u.keysChanged = true
	}
	if u.quiet {
		u.tally()
	} else {
		u.timeline()
	}
	p.modelSeq = e.Seq

	var mark []templ.Component
	if marksRoom(e) {
		mark = []templ.Component{roomMark}
	}
	switch {
	case p.fullNext:
		p.fullNext = false
		p.addFrameLocked(e.Seq, false, append(p.fullFrameLocked(), mark...))
		return
	case p.busy == nil && e.Kind != live.Reset && (p.rate.perSecond(now) > busyEnter || p.rate.recent(now) > busyEnterBurst):
		p.addFrameLocked(e.Seq, false, append(p.enterBusy(e, now), mark...))
		return
	case p.busy != nil:
		if e.Kind == live.Received {
			p.busyReqs++
		}
		if faults != nil {
			mark = append(mark, views.FaultFields(p.faults, true), views.ActiveFaults(p.faults, true))
		}
		p.addFrameLocked(e.Seq, false, mark)
		return
	}

	if u.keysChanged {
		u.add(inTable(views.KeysBody(p.snapshotKeysLocked(), p.s.clock.Now(), true)))
	}
	u.add(p.counterOps(before)...)
	if faults != nil {
		u.add(views.FaultFields(p.faults, true), views.ActiveFaults(p.faults, true))
	}
	u.add(mark...)
	p.addFrameLocked(e.Seq, false, u.ops)
}

// counterOps redraws the counters that changed since before.
func (p *projector) counterOps(before views.Counters) []templ.Component {
	var ops []templ.Component
	was, now := views.CounterTiles(before), views.CounterTiles(p.counters)
	for i := range now {
		if now[i].N != was[i].N {
			ops = append(ops, redrawOf(now[i].ID, views.TileCount(now[i].ID, now[i].N, true)))
		}
	}
	if p.counters.Charges != before.Charges {
		ops = append(ops, redrawOf("orders", views.OrdersView(p.countersLocked(), true)))
	}
	return ops
}

// enterBusy starts busy mode: a row says so, and from now on only the
// counters are refreshed, twice a second.
func (p *projector) enterBusy(e live.Event, now time.Time) []templ.Component {
	p.busy = &views.TimelineRow{ID: "tl-busy-" + strconv.FormatUint(e.Seq, 10), Time: e.Time, Title: "Busy"}
	p.busyReqs, p.busySince = 0, now
	p.busyFlag.Store(true)
	select {
	case p.busyStart <- struct{}{}:
	default: // the ticker is already woken
	}
	p.busyText(now)
	p.rows = append([]*views.TimelineRow{p.busy}, p.rows...)
	ops := []templ.Component{views.FrameNewRow(*p.busy)}
	if len(p.rows) > liveRows {
		old := p.rows[len(p.rows)-1]
		p.rows = p.rows[:len(p.rows)-1]
		ops = append(ops, views.FrameDelete(old.ID))
	}
	ops = append(ops, views.CountersView(p.countersLocked(), true))
	return ops
}

// busyText writes the busy row's words.
func (p *projector) busyText(now time.Time) {
	r := p.busy
	rate := p.rate.perSecond(now)
	r.Steps = []views.Step{{ID: r.ID + "-note", From: views.LaneServer, To: views.LaneServer,
		Label: "Requests are arriving faster than anyone can read (" + strconv.Itoa(rate) + " events a second): the timeline stops drawing them one by one. The counters stay live; everything is redrawn when it calms down.",
		Badge: views.Badge{Text: "busy", Tone: views.ToneWarn}}}
	r.Outcome = views.Badge{Text: strconv.Itoa(p.busyReqs) + " requests not drawn", Tone: views.ToneWarn}
}

// busyFrame refreshes the counters and the busy row.
func (p *projector) busyFrame(now time.Time) []templ.Component {
	p.busyText(now)
	return []templ.Component{views.CountersView(p.countersLocked(), true),
		views.StepView(p.busy.Steps[0], true), views.Outcome(p.busy.ID, p.busy.Outcome, true)}
}

// leaveBusy ends busy mode; the row stays in the timeline as a record.
func (p *projector) leaveBusy() {
	if p.busy == nil {
		return
	}
	// A new slice: frames not yet rendered hold the old one.
	p.busy.Steps = slices.Clone(p.busy.Steps)
	p.busy.Steps[0].Label = strconv.Itoa(p.busyReqs) + " requests in " + time.Since(p.busySince).Round(100*time.Millisecond).String() +
		" were too fast to draw one by one; the tables and counters below are complete."
	p.busy.Outcome = views.Badge{Text: strconv.Itoa(p.busyReqs) + " requests not drawn", Tone: views.ToneMute}
	p.busy = nil
	p.busyFlag.Store(false)
}

func (p *projector) snapshotKeysLocked() []views.KeyRow {
	out := make([]views.KeyRow, len(p.keys))
	for i, k := range p.keys {
		out[i] = *k
	}
	return out
}

// loadKeys reads the newest key rows, after a prune.
func (p *projector) loadKeys() []views.KeyRow {
	ctx, cancel := context.WithTimeout(p.s.baseCtx, projectorLoadTimeout)
	defer cancel()
	keys, err := p.s.db.RecentKeys(ctx, liveKeys)
	if err != nil {
		p.s.logf("live: loading keys: %v", err)
	}
	out := make([]views.KeyRow, 0, len(keys))
	for _, k := range keys {
		out = append(out, views.KeyRow{ID: keyDOMID(k.Scope, k.Key), Scope: k.Scope, Key: k.Key, PersonalData: pay.PersonalData(k.Key),
			Fingerprint: k.Fingerprint, OrderID: k.OrderID, Amount: k.AmountSatang, Status: k.Status,
			Code: k.ResponseStatus, Created: k.CreatedAt})
	}
	return out
}

// redrawLocked returns what draws every panel as they are now, as one
// SSE event; it is rendered when called, outside the lock, and once for
// every viewer that opens before anything changes.
func (p *projector) redrawLocked() func() []byte {
	if r := p.redrawn; r != nil && r.seq == p.modelSeq && r.frames == p.frames {
		return r.bytes
	}
	r := &redrawing{seq: p.modelSeq, frames: p.frames, ops: p.fullFrameLocked()}
	p.redrawn = r
	return r.bytes
}

// redrawing is the drawing of every panel at one point of the model.
type redrawing struct {
	seq, frames uint64 // the model's event and the frames made
	ops         []templ.Component
	once        sync.Once
	b           []byte
}

func (r *redrawing) bytes() []byte {
	r.once.Do(func() {
		var buf bytes.Buffer
		writeFrame(&buf, r.seq, renderFrame(r.ops...))
		r.b, r.ops = buf.Bytes(), nil
	})
	return r.b
}

// fullFrameLocked redraws every panel.
func (p *projector) fullFrameLocked() []templ.Component {
	p.steps = stepView(p.s.steps)
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

// update is the work of applying one event; p.mu is held.
type update struct {
	p           *projector
	e           live.Event
	quiet       bool // busy mode: update the model, draw nothing
	ops         []templ.Component
	keysChanged bool
}

// add queues fragments for the frame. In busy mode it drops them: the
// busiest callers check u.quiet first and make none, which allocates.
func (u *update) add(ops ...templ.Component) {
	if !u.quiet {
		u.ops = append(u.ops, ops...)
	}
}

// rowFor finds the event's row, or starts one (at the top) if it has none.
func (u *update) rowFor(title string) *views.TimelineRow {
	p, e := u.p, u.e
	id := "tl-ev" + strconv.FormatUint(e.Seq, 10)
	if e.Request != "" {
		id = "tl-" + e.Request
		for _, r := range p.rows {
			if r.ID == id {
				return r
			}
		}
	}
	r := &views.TimelineRow{ID: id, Time: e.Time, Title: title, Server: e.Server, Key: e.Key, PersonalData: pay.PersonalData(e.Key), OrderID: e.OrderID, Amount: e.Amount, Scope: e.Scope}
	if u.quiet {
		return r // busy: not drawn, not kept
	}
	p.rows = append([]*views.TimelineRow{r}, p.rows...)
	u.add(views.FrameNewRow(*r))
	if len(p.rows) > liveRows {
		old := p.rows[len(p.rows)-1]
		p.rows = p.rows[:len(p.rows)-1]
		u.add(views.FrameDelete(old.ID))
	}
	return r
}

// explained are the kinds whose message says more than the arrow's label:
// their arrows carry it as a tooltip. (The others would only repeat the
// label, in every frame sent to every viewer.)
var explained = map[live.Kind]bool{live.Rejected: true, live.GatewayReply: true, live.RolledBack: true,
	live.Crashed: true, live.Swept: true, live.Released: true, live.Delayed: true}

// step appends an arrow to the row.
func (u *update) step(r *views.TimelineRow, s views.Step) {
	if s.Title == "" && explained[u.e.Kind] {
		s.Title = u.e.Message
	}
	if u.quiet || len(r.Steps) >= liveSteps {
		return
	}
	r.Steps = append(r.Steps, s)
	u.add(views.FrameStep(r.ID, s))
}

// respond draws the answer travelling back to the browser; a later "lost"
// event replaces it. An answer to a checkout page is drawn as sent, not
// arrived, until the page says it got it (delivered).
func (u *update) respond(r *views.TimelineRow, label string, b views.Badge) {
	s := views.Step{ID: r.ID + "-resp", From: views.LaneServer, To: views.LaneBrowser, Label: label, Badge: b}
	switch {
	case r.Attempt == "" || r.Received:
	case r.NotReceived != "":
		s = notReceived(s, r.NotReceived)
	default:
		s.Sent = true
	}
	u.step(r, s)
}

// notReceived is an answer the page says never reached it.
func notReceived(s views.Step, why string) views.Step {
	s.Sent, s.Lost = false, true
	s.Label = s.Badge.Text + " " + s.Label + " never reached the browser: " + why
	s.Badge = views.Badge{Text: "not delivered", Tone: views.ToneBad}
	return s
}

// delivered applies a page's word on whether an attempt's answer reached
// it to the attempt's row: the answer's arrow arrives, or ends in a
// cross. A word on a row no longer shown, or from another scope than
// the request's, changes nothing.
func (u *update) delivered() {
	p, e := u.p, u.e
	var r *views.TimelineRow
	for _, row := range p.rows {
		if row.Attempt == e.Attempt && row.Scope == e.Scope {
			r = row
			break
		}
	}
	if r == nil || r.Received || r.NotReceived != "" {
		return
	}
	if e.Kind == live.Delivered {
		r.Received = true
	} else {
		r.NotReceived = e.Message
	}
	for i, st := range r.Steps {
		if st.ID != r.ID+"-resp" || st.Lost {
			continue
		}
		if e.Kind == live.Delivered {
			st.Sent = false
		} else {
			st = notReceived(st, e.Message)
		}
		r.Steps[i] = st
		u.add(views.StepView(st, true))
	}
}

func (u *update) outcome(r *views.TimelineRow, b views.Badge) {
	r.Outcome = b
	u.add(redrawOf(r.ID+"-out", views.Outcome(r.ID, b, true)))
}

func statusLine(status int) string {
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// tally is the model's side of an event in busy mode: the counters and the
// tables change, and nothing is drawn or labelled.
func (u *update) tally() {
	p, e := u.p, u.e
	switch e.Kind {
	case live.Received:
		p.counters.Requests++
	case live.Rejected:
		p.counters.Rejected++
	case live.Claimed:
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusStarted, 0 })
	case live.Charged:
		p.addCharge(u, e.Charge)
	case live.Completed:
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusDone, e.Status })
	case live.ResponseLost:
		p.counters.Lost++
	case live.Replayed:
		p.counters.Replays++
		p.hitKey(u)
	case live.Conflict:
		p.counters.Conflicts++
		p.hitKey(u)
	case live.Mismatch:
		p.counters.Mismatches++
		p.hitKey(u)
	case live.Released:
		p.removeKey(u)
	case live.Swept:
		switch e.Sweep {
		case live.SweepFailed:
		case live.SweepCharged:
			p.addCharge(u, e.Charge)
			p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusDone, http.StatusCreated })
		default:
			p.removeKey(u)
		}
	}
}

// timeline turns the event into arrows and updates the tables.
func (u *update) timeline() {
	p, e := u.p, u.e
	const (
		B = views.LaneBrowser
		S = views.LaneServer
		D = views.LaneDatabase
		G = views.LaneGateway
	)
	switch e.Kind {
	case live.Received:
		r := u.rowFor(e.Message)
		r.Attempt = e.Attempt
		u.step(r, views.Step{From: B, To: S, Label: "POST + key"})
		p.counters.Requests++

	case live.Rejected:
		r := u.rowFor("request")
		u.respond(r, "nothing saved", views.Badge{Text: strconv.Itoa(e.Status), Tone: views.ToneBad})
		u.outcome(r, views.Badge{Text: strconv.Itoa(e.Status) + " refused", Tone: views.ToneBad})
		p.counters.Rejected++

	case live.Dropped:
		r := u.rowFor("request")
		u.step(r, views.Step{From: B, To: S, Lost: true, Label: "connection dropped before the server did anything",
			Badge: views.Badge{Text: "never happened", Tone: views.ToneBad}})
		u.outcome(r, views.Badge{Text: "network error", Tone: views.ToneBad})

	case live.Claimed:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "INSERT key: started",
			Badge: views.Badge{Text: "claimed", Tone: views.ToneOK}})
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusStarted, 0 })

	case live.Delayed:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "delay", Tone: views.ToneWarn}})

	case live.GatewayCall:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: G, Label: "charge(key)"})

	case live.GatewayReply:
		r := u.rowFor("request")
		switch {
		case e.Status == http.StatusOK:
			u.step(r, views.Step{From: G, To: S, Label: "charged", Badge: views.Badge{Text: "ok", Tone: views.ToneOK}})
		case e.Status == http.StatusGatewayTimeout:
			u.step(r, views.Step{From: G, To: S, Lost: true, Label: "no answer",
				Badge: views.Badge{Text: "timeout", Tone: views.ToneWarn}})
			u.outcome(r, views.Badge{Text: "outcome unknown", Tone: views.ToneWarn})
		case e.Status == http.StatusPaymentRequired:
			u.step(r, views.Step{From: G, To: S, Label: "card declined", Badge: views.Badge{Text: "declined", Tone: views.ToneBad}})
		default:
			u.step(r, views.Step{From: G, To: S, Label: "gateway failed", Badge: views.Badge{Text: strconv.Itoa(e.Status), Tone: views.ToneBad}})
		}

	case live.Charged:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "INSERT charge",
			Badge: views.Badge{Text: "charged", Tone: views.ToneOK}})
		p.addCharge(u, e.Charge)

	case live.Completed:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "key done: " + strconv.Itoa(e.Status) + " saved"})
		tone := codeTone(e.Status)
		u.respond(r, http.StatusText(e.Status), views.Badge{Text: strconv.Itoa(e.Status), Tone: tone})
		text := strconv.Itoa(e.Status) + " paid"
		if e.Status != http.StatusCreated {
			text = statusLine(e.Status) + ", saved"
		}
		u.outcome(r, views.Badge{Text: text, Tone: tone})
		p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusDone, e.Status })

	case live.ResponseLost:
		r := u.rowFor("request")
		lost := views.Step{ID: r.ID + "-resp", From: S, To: B, Lost: true, Title: e.Message,
			Label: strconv.Itoa(e.Status) + " never arrives", Badge: views.Badge{Text: "lost response", Tone: views.ToneBad}}
		replaced := false
		for i := range r.Steps {
			if r.Steps[i].ID == lost.ID {
				r.Steps[i], replaced = lost, true
				u.add(views.StepView(lost, true))
			}
		}
		if !replaced {
			u.step(r, lost)
		}
		u.outcome(r, views.Badge{Text: "response lost", Tone: views.ToneBad})
		p.counters.Lost++

	case live.Replayed:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "key done: read saved answer"})
		u.respond(r, strconv.Itoa(e.Status)+" again", views.Badge{Text: "replayed", Tone: views.ToneInfo})
		u.outcome(r, views.Badge{Text: strconv.Itoa(e.Status) + " replayed", Tone: views.ToneInfo})
		p.counters.Replays++
		p.hitKey(u)

	case live.Conflict:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "key still started"})
		u.respond(r, "Conflict", views.Badge{Text: "409", Tone: views.ToneWarn})
		u.outcome(r, views.Badge{Text: "409 in progress", Tone: views.ToneWarn})
		p.counters.Conflicts++
		p.hitKey(u)

	case live.Mismatch:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "other fingerprint"})
		u.respond(r, "key reused", views.Badge{Text: "422", Tone: views.ToneBad})
		u.outcome(r, views.Badge{Text: "422 key reused", Tone: views.ToneBad})
		p.counters.Mismatches++
		p.hitKey(u)

	case live.Released:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "DELETE key",
			Badge: views.Badge{Text: "released", Tone: views.ToneMute}})
		u.respond(r, "retry", views.Badge{Text: strconv.Itoa(e.Status), Tone: views.ToneWarn})
		u.outcome(r, views.Badge{Text: "released", Tone: views.ToneMute})
		p.removeKey(u)

	case live.Crashed:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: S, Label: "stopped after the gateway call",
			Badge: views.Badge{Text: "crash", Tone: views.ToneBad}})
		u.step(r, views.Step{From: S, To: B, Lost: true, Label: "no response"})
		u.outcome(r, views.Badge{Text: "crashed: key left started", Tone: views.ToneBad})

	case live.RolledBack:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: D, Label: "transaction rolled back", Badge: views.Badge{Text: "failed halfway", Tone: views.ToneBad}})
		u.outcome(r, views.Badge{Text: "failed halfway", Tone: views.ToneBad})

	case live.Swept:
		r := u.rowFor("Sweeper")
		u.step(r, views.Step{From: S, To: G, Label: "lookup(key)"})
		switch e.Sweep {
		case live.SweepFailed:
			u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "sweep failed", Tone: views.ToneBad}})
			u.outcome(r, views.Badge{Text: "still started", Tone: views.ToneWarn})
		case live.SweepCharged:
			u.step(r, views.Step{From: G, To: S, Label: "yes"})
			u.step(r, views.Step{From: S, To: D, Label: "INSERT charge, key done", Badge: views.Badge{Text: "swept", Tone: views.ToneWarn}})
			u.outcome(r, views.Badge{Text: "swept: charged", Tone: views.ToneOK})
			p.addCharge(u, e.Charge)
			p.upsertKey(u, func(k *views.KeyRow) { k.Status, k.Code = pay.StatusDone, http.StatusCreated })
		default:
			u.step(r, views.Step{From: G, To: S, Label: "no"})
			u.step(r, views.Step{From: S, To: D, Label: "DELETE key", Badge: views.Badge{Text: "swept", Tone: views.ToneWarn}})
			u.outcome(r, views.Badge{Text: "swept: released", Tone: views.ToneMute})
			p.removeKey(u)
		}

	case live.Delivered, live.Undelivered:
		u.delivered()

	case live.LookedUp:
		r := u.rowFor("Look-up")
		u.step(r, views.Step{From: B, To: S, Label: "GET ?order_id=" + e.OrderID})
		u.step(r, views.Step{From: S, To: D, Label: "SELECT the order's charges"})
		if e.Charge != "" {
			u.respond(r, "paid", views.Badge{Text: "200", Tone: views.ToneOK})
			u.outcome(r, views.Badge{Text: "found paid", Tone: views.ToneOK})
		} else {
			u.respond(r, "not paid", views.Badge{Text: "200", Tone: views.ToneInfo})
			u.outcome(r, views.Badge{Text: "not paid", Tone: views.ToneInfo})
		}

	case live.Pruned:
		r := u.rowFor("Retention")
		u.step(r, views.Step{From: S, To: D, Label: e.Message, Badge: views.Badge{Text: "pruned", Tone: views.ToneMute}})

	case live.Switched:
		r := u.rowFor("Switches")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "switch", Tone: views.ToneInfo}})

	case live.Reset:
		r := u.rowFor("Reset")
		u.step(r, views.Step{From: S, To: D, Label: e.Message, Badge: views.Badge{Text: "reset", Tone: views.ToneMute}})

	case live.Gap:
		r := u.rowFor("Other servers")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "gap", Tone: views.ToneWarn}})

	case step.KindHeld, step.KindResumed, step.KindMode, watchKind, step.KindAimed, step.KindHeldList:
		u.stepMode()

	default:
		r := u.rowFor(string(e.Kind))
		u.step(r, views.Step{From: S, To: S, Label: e.Message})
	}
}

func codeTone(status int) views.Tone {
	switch {
	case status < 300:
		return views.ToneOK
	case status == http.StatusConflict || status == http.StatusTooManyRequests:
		return views.ToneWarn
	}
	return views.ToneBad
}

// upsertKey changes the event's key row, inserting it at the top if the
// table does not have it.
func (p *projector) upsertKey(u *update, change func(*views.KeyRow)) {
	e := u.e
	if e.Key == "" {
		return
	}
	if k := p.findKey(e.Scope, e.Key); k != nil {
		change(k)
		if !u.quiet {
			u.add(redrawOf(k.ID, inTable(views.KeyRowView(*k, p.s.clock.Now(), true))))
		}
		return
	}
	k := &views.KeyRow{ID: keyDOMID(e.Scope, e.Key), Scope: e.Scope, Key: e.Key, PersonalData: pay.PersonalData(e.Key), Fingerprint: e.Fingerprint, OrderID: e.OrderID, Amount: e.Amount, Created: e.Time}
	change(k)
	p.keys = slices.Insert(p.keys, 0, k)
	if !u.quiet {
		u.add(views.FrameInsertKey(*k, p.s.clock.Now()))
	}
	if len(p.keys) > liveKeys {
		old := p.keys[len(p.keys)-1]
		p.keys[len(p.keys)-1] = nil
		p.keys = p.keys[:len(p.keys)-1]
		if !u.quiet {
			u.add(views.FrameDelete(old.ID))
		}
	}
}

// findKey returns the row of a key the table shows, nil if none. A row is
// found by its scope and key rather than by its id, which would have to
// be made (and allocated) for every event in busy mode.
func (p *projector) findKey(scope, key string) *views.KeyRow {
	for _, k := range p.keys {
		if k.Key == key && k.Scope == scope {
			return k
		}
	}
	return nil
}

// hitKey counts a request that found its key already there.
func (p *projector) hitKey(u *update) {
	if k := p.findKey(u.e.Scope, u.e.Key); k != nil {
		k.Hits++
		if !u.quiet {
			u.add(redrawOf(k.ID, inTable(views.KeyRowView(*k, p.s.clock.Now(), true))))
		}
	}
}

func (p *projector) removeKey(u *update) {
	id := keyDOMID(u.e.Scope, u.e.Key)
	for i, k := range p.keys {
		if k.ID == id {
			p.keys = slices.Delete(p.keys, i, i+1)
			u.add(views.FrameDelete(id))
			return
		}
	}
}

// addCharge records a charge, once per charge id.
func (p *projector) addCharge(u *update, chargeID string) {
	e := u.e
	if chargeID != "" {
		if _, ok := p.seen.get(chargeID); ok {
			return
		}
		p.seen.put(chargeID, struct{}{})
	}
	o := p.order(e.Scope, e.OrderID)
	p.charged(o)
	c := views.ChargeRow{ID: chargeDOMID(chargeID, e.Scope, e.Key), Charge: chargeID, Scope: e.Scope, Key: e.Key,
		OrderID: e.OrderID, Amount: e.Amount, Time: e.Time, Repeat: o.charges > 1}
	p.charges = append(p.charges, c) // oldest first
	if !u.quiet {
		u.add(views.FrameInsertCharge(c, p.s.clock.Now()))
	}
	if len(p.charges) > liveCharges {
		old := p.charges[0]
		p.charges = p.charges[1:]
		if !u.quiet {
			u.add(views.FrameDelete(old.ID))
		}
	}
	p.counters.Charges++
}

// keyDOMID names a key row in the page without putting the key (any
// visible ASCII) into an id or a selector.
func keyDOMID(scope, key string) string {
	h := fnv.New64a()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "k-" + strconv.FormatUint(h.Sum64(), 36)
}

func chargeDOMID(chargeID, scope, key string) string {
	if chargeID != "" {
		return "c-" + chargeID
	}
	return "c" + keyDOMID(scope, key)
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
