// Package board is what the live board shows and says: the timeline of
// every request, drawn as arrows between the browser, the server, the
// database and the gateway; the key and charge tables; the counters; the
// step bar; and the stream of frames that keeps every open page current.
//
// One goroutine reads every event of the hub in order, updates a small
// model (the timeline rows, the key rows, the charges, the counters) and
// keeps, per event, the fragments that move a page from the state before
// the event to the state after it (timeline.go; the words from
// narrator.go's table, drawn by narrate.go). A frame is rendered to HTML
// the first time a viewer needs it and only then
// (frames.go): with nobody watching, an event costs a model update and no
// rendering, yet a viewer that connects later, or resumes with
// Last-Event-ID, still gets every frame it missed. Every viewer's stream
// sends the same bytes (wake.go), so a hundred viewers cost one
// rendering, and a page rendered from the model at event N, then streamed
// from N+1, is always exactly current: nothing is drawn twice and nothing
// is missed. When events come faster than anyone can read, the board
// shows totals instead (busy.go).
//
// The board knows nothing of the HTTP framework: web/ hands it the event
// stream's request and maps its errors to answers.
package board

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// How much the panels keep. The page shows the newest; the rest is in the
// database and the API.
const (
	liveRows    = 30
	liveSteps   = 16
	liveKeys    = 40
	liveCharges = 40
	// OrdersListed is how many orders the charges per order list: a class
	// of forty finds every student's order there.
	OrdersListed = 48
	// liveFrames is how many frames a viewer may fall behind before it is
	// dropped (it reconnects and is redrawn).
	liveFrames = 1024
	// liveOrderLimit bounds the orders the board counts charges for (to
	// spot an order charged twice): it remembers the last half of it to
	// all of it (boundedMap). The orders first charged longest ago are
	// forgotten: a second charge for one of those is still counted and
	// listed, but not flagged as a repeat.
	liveOrderLimit = 10_000
	// liveSeenLimit bounds the charge ids remembered so that a charge
	// both loaded from the database and seen as an event counts once.
	// Only charges of the last moments can arrive both ways.
	liveSeenLimit = 4096
)

// Store is what the board reads of the books: at its start, and again
// when events were lost on the way to it.
type Store interface {
	RecentKeys(ctx context.Context, limit int) ([]pay.KeyRow, error)
	RecentCharges(ctx context.Context, limit int) ([]pay.Charge, error)
	CountCharges(ctx context.Context) (int, error)
	// LabLooseCharges are the charges of the lab's unguarded table (its
	// lock in memory): charges of their orders like any other, which the
	// board counts as the events drew them.
	LabLooseCharges(ctx context.Context) ([]pay.Charge, error)
}

// Clock is the demo clock the tables age their rows by.
type Clock interface{ Now() time.Time }

// Lab is the lab's numbers as the board draws them after events (lab.go).
type Lab interface {
	// Fresh says the running counts need no rebuild from the tables.
	Fresh() bool
	// Outcomes draws the lab's numbers; nil when they could not be
	// measured (the lab says why, in its own log).
	Outcomes(ctx context.Context) []byte
}

// Config is what a board uses. Every field but Lab, Heartbeat and
// WriteTimeout is required.
type Config struct {
	Store Store
	Hub   *live.Hub
	Clock Clock
	// Switches reads every fault switch and the clock's offset.
	Switches func() views.FaultSwitches
	// Steps is step mode, which the step bar shows.
	Steps *step.Stepper
	// RoomChanged says an event changed what a page asks /lab/live for
	// (the lab's switches, the lesson, the checkout card): its frame
	// carries a mark (lab.go).
	RoomChanged func(live.Event) bool
	// ResyncNote is the note a page that had events from elsewhere is
	// drawn with: why says where they came from. nil draws none.
	ResyncNote func(why Why) templ.Component
	// Origin says where the events of a page whose ids carry epoch, not
	// this server's, came from: another server of this room that still
	// runs (Moved), one that is gone (Restarted), or unknown. nil: every
	// other epoch is a restart, as on a server of its own.
	Origin func(ctx context.Context, epoch string) Why
	// Ordered reports this server's own events that the board does not
	// draw as they are published but as the relay hands them back, in
	// the room's order (web/room's RelayConfig.Echo); nil: none.
	Ordered func(e *live.Entry) bool
	// Kept is what the books keep of the answers of the room's reset gen
	// that this board will not see as events (other servers' lives);
	// nil: none.
	Kept func(ctx context.Context, gen uint64) live.Tally
	Lab  Lab
	Logf func(format string, args ...any)
	// Ctx ends at shutdown.
	Ctx context.Context
	// Heartbeat and WriteTimeout time the event streams (stream.go);
	// zero means the defaults.
	Heartbeat, WriteTimeout time.Duration
	// Batch is how long a board that nobody watches, or that is busy,
	// waits before it takes the next events, so that it takes them in
	// batches; zero means busyBatch.
	Batch time.Duration
	// Wall is the real time that paces the callers' shares and busy
	// mode (not Clock, which the presenter moves); time.Now when nil.
	// Tests replace it to pace events without waiting.
	Wall func() time.Time
	// After runs f once d has passed on Wall: it draws what a caller
	// over its share changed, at the end of the caller's interval
	// (shares.go). time.AfterFunc when nil. Tests whose Wall stands
	// still fire it as they move their wall on, instead of waiting.
	After func(d time.Duration, f func())
	// Ticks is the clock of busy mode's refreshes: a channel that ticks
	// every d, and how to stop it (a time.Ticker when nil). Tests tick it
	// themselves, with Wall, instead of waiting for a flood to age.
	Ticks func(d time.Duration) (ticks <-chan time.Time, stop func())
	// BeforeWrite, when set, is called before each write of a stream
	// after its first, with the viewer's request, and may wait: a server
	// uses it to let more urgent work have the processor first. For the
	// pages the board's fan writer writes (fan.go) it is called once per
	// wake for those with a write gap, with one of their requests, and
	// once for those with none: each kind waits alike.
	BeforeWrite func(*http.Request)
	// WriteGap, when set, is the least time between two writes of the
	// stream of the viewer of a request: the wakes that come meanwhile go
	// out together, in one write. A server gives the students' live views
	// a gap, so that hundreds of them cost a few writes a second each
	// rather than one per fan-out, and the presenter's none.
	WriteGap func(*http.Request) time.Duration
	// RestAfter is how long a board that no page reads waits before it
	// rests (rest.go): it then counts the answers of the events and draws
	// nothing until a page asks again. Zero: it never rests.
	RestAfter time.Duration
	// Viewer says of the viewer of a request which caller's payments its
	// page shows as they happen (that caller's scope, "" for none), and
	// whether it is a board, which shows every event as it happens (the
	// projector, the presenter's pages). The other pages are phones: the
	// rest of the class's payments reach them in rounds (classInterval).
	// nil: every page is a board.
	Viewer func(*http.Request) (scope string, board bool)
}

// Board is one server's board: its model, its frames and its viewers.
type Board struct {
	cfg Config
	// viewers counts the open event streams; it changes under mu.
	viewers atomic.Int64
	// handedBack counts the times the fan writer handed a page back to
	// its stream (a socket that did not take a whole write, or a page the
	// writer no longer keeps up with).
	handedBack atomic.Int64

	// applying is held while events are applied to the model and while
	// the model is loaded again from the books, so that a load never
	// falls between the events of a batch: those applied before it are
	// in the books it reads, and those after are applied on top (keys and
	// charges by id, so one already loaded is not counted again).
	applying sync.Mutex

	mu sync.Mutex
	model
	ring
	busyMode
	// shares keeps one caller's flood from taking the board (shares.go).
	shares sourceShares
	// hidden are the rows and students the presenter hid (hide.go).
	hidden hiddenRows
	// rest is the board resting while no page reads it (rest.go).
	rest restState

	// lab is the lab's numbers, drawn after events (lab.go).
	lab labDrawing
	// fan writes the wakes to the pages that are up to date (fan.go).
	fan fanWriter
	// ownFrom is the hub's newest event when the board started: the
	// relay's echoes of this server's events up to it are in the model
	// loaded from the books already (only run uses it).
	ownFrom uint64
	// lostFrom and lostTo are the hub's events the board last fell behind
	// on (lost to the ring): their answers were counted from the hub's
	// counts, so the echoes of this server's own among them are not
	// counted again (only run uses them).
	lostFrom, lostTo uint64
	// readOwn and readRemote are the hub's counts (live.Hub.Counts) as of
	// the newest event the board read (only run uses them).
	readOwn, readRemote live.Tally
	// echoedTo is the newest of this server's own events whose echo the
	// board has taken: the relay hands them back in the order they were
	// published, so those after it are still to come (rest.go's wake).
	// Only run uses it, with applying held.
	echoedTo uint64
}

// ErrClosed is the answer to a viewer of a board that stopped: the server
// is shutting down.
var ErrClosed = errors.New("the server is shutting down")

// Start makes a board and starts it reading the hub.
func Start(cfg Config) *Board {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = heartbeatEvery
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = writeTimeout
	}
	if cfg.Batch <= 0 {
		cfg.Batch = busyBatch
	}
	if cfg.Wall == nil {
		cfg.Wall = time.Now
	}
	if cfg.After == nil {
		cfg.After = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	if cfg.Ticks == nil {
		cfg.Ticks = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	p := &Board{cfg: cfg}
	p.fan.beforeWrite, p.fan.interval, p.fan.classInterval = cfg.BeforeWrite, p.fanoutInterval, p.classInterval
	p.out = make([]frame, liveFrames)
	p.busyStart = make(chan struct{}, 1)
	p.seen = newBoundedMap[string, struct{}](liveSeenLimit)
	p.shares = newSourceShares()
	p.hidden = newHiddenRows()
	p.tip = &wake{done: make(chan struct{})}
	p.streams = map[io.Closer]struct{}{}
	// Read the hub's position before the database: an event that lands in
	// between is then both in the loaded state and in the stream, and
	// applying it again is harmless (keys and charges are upserted by id),
	// whereas the other order would lose it.
	// The server's own answers up to start are counted from its tally,
	// those after it from the events: none twice.
	own, remote, start := cfg.Hub.Counts()
	p.readOwn, p.readRemote = own, remote
	if cfg.Kept != nil {
		own = own.Plus(cfg.Kept(cfg.Ctx, own.Gen))
	}
	addAnswers(&p.counters, own)
	p.steps = StepBar(cfg.Steps)
	p.load(cfg.Ctx)
	p.drawKept(start, nil)
	// Events up to start have no frames: a viewer resuming from before
	// them is redrawn.
	p.mu.Lock()
	p.modelSeq, p.frameSeq, p.lostSeq = start, start, start
	p.ownFrom = start
	p.wantedLocked()
	p.mu.Unlock()
	go p.run(cfg.Hub.SubscribeEchoes(start))
	go p.tick()
	return p
}

// countedOwn reports whether the echo of this server's own event seq is
// counted already: from its tally at the start (ownFrom), or from the
// hub's counts when the board fell behind (lostFrom, lostTo).
func (p *Board) countedOwn(seq uint64) bool {
	return seq <= p.ownFrom || seq > p.lostFrom && seq <= p.lostTo
}

// addAnswers adds the answers t counts to c.
func addAnswers(c *views.Counters, t live.Tally) {
	c.Requests += int(t.Requests)
	c.Rejected += int(t.Rejected)
	c.Lost += int(t.Lost)
	c.Replays += int(t.Replays)
	c.Conflicts += int(t.Conflicts)
	c.Mismatches += int(t.Mismatches)
}

// lost counts the answers of the events the board fell behind on, after
// readOwn and readRemote up to start, from the hub's counts then (own,
// remote): this server's answers from its tally, the other servers' that
// reached this one from the hub's count of them. A reset among them
// (this server's tally restarted: reset) empties the timeline and the
// counters as the reset's event would have, which then count this
// server's answers since, the other servers' of that reset gen, and kept,
// as at a start. The echoes of this server's own events among them are
// not counted again (lostFrom, lostTo). The charges were loaded from the
// books already. mu is held.
func (p *Board) lost(own, remote, kept live.Tally, reset bool, start uint64) {
	if reset {
		p.rows = nil
		p.shares.reset()
		p.hidden = newHiddenRows()
		sum := own.Plus(kept)
		if remote.Gen == own.Gen {
			sum = sum.Plus(remote)
		}
		p.counters = views.Counters{Charges: p.counters.Charges}
		addAnswers(&p.counters, sum)
		p.ownFrom = start
	} else {
		// The other servers' answers since the board's last read: all of
		// those of a newer reset gen than it had seen, none of an older.
		var since live.Tally
		switch {
		case remote.Gen == p.readRemote.Gen:
			since = remote.Minus(p.readRemote)
		case remote.Gen > p.readRemote.Gen:
			since = remote
		}
		addAnswers(&p.counters, own.Minus(p.readOwn).Plus(since))
		p.lostFrom, p.lostTo = p.modelSeq, start
	}
	p.readOwn, p.readRemote = own, remote
}

func (p *Board) logf(format string, args ...any) {
	if p.cfg.Logf != nil {
		p.cfg.Logf(format, args...)
	}
}

// Viewers is how many event streams are open.
func (p *Board) Viewers() int { return int(p.viewers.Load()) }

// run applies events until the hub closes or the server stops; then it
// ends every stream.
func (p *Board) run(sub *live.Subscription) {
	ctx := p.cfg.Ctx
	defer p.Close()
	for {
		entries, err := sub.Next(ctx)
		switch {
		case errors.Is(err, live.ErrTooSlow):
			// Events were lost to the ring: start again from the database,
			// and make the next frame redraw everything.
			// The answers of the events lost are counted from the hub's
			// counts (lost).
			p.applying.Lock()
			own, remote, start := p.cfg.Hub.Counts()
			var kept live.Tally
			reset := own.Gen != p.readOwn.Gen
			if reset && p.cfg.Kept != nil {
				kept = p.cfg.Kept(ctx, own.Gen)
			}
			p.load(ctx)
			p.mu.Lock()
			p.lost(own, remote, kept, reset, start)
			p.modelSeq, p.fullNext = start, true
			p.advanceLocked(start)
			p.mu.Unlock()
			p.applying.Unlock()
			// With this server's echoes, as at the start: its own events
			// are drawn at their echo (take), and would be no more.
			sub = p.cfg.Hub.SubscribeEchoes(start)
			continue
		case err != nil:
			return
		}
		p.readOwn, p.readRemote = sub.Counts()
		quiet := p.quietN.Load()
		p.applying.Lock()
		if p.resting() {
			for _, e := range entries {
				p.count(e)
			}
			p.applying.Unlock()
			p.rest.counted.Add(uint64(len(entries)))
			if !p.batchWait(ctx) {
				return
			}
			continue
		}
		for _, e := range entries {
			p.take(e)
		}
		p.restIfUnwatched()
		p.applying.Unlock()
		p.labChanged()
		// A batch of events of which none was drawn by itself is a flood
		// over its share (a class paying flat out from one address):
		// what it changes is drawn at the share's next refresh, not
		// sooner, so taking the next events a batch later delays no
		// drawing that is due.
		flood := p.quietN.Load()-quiet == uint64(len(entries))
		if p.busyFlag.Load() || p.viewers.Load() == 0 || flood {
			// Nobody reads a busy timeline event by event, and nobody
			// reads an unwatched one at all: take the next events in
			// larger batches and leave the CPU to the payments. (A viewer
			// that connects meanwhile is drawn from the model at once.)
			if !p.batchWait(ctx) {
				return
			}
		}
	}
}

// batchWait waits Config.Batch before the board takes the next events;
// false when ctx ended first.
func (p *Board) batchWait(ctx context.Context) bool {
	p.batchWaits.Add(1)
	select {
	case <-time.After(p.cfg.Batch):
		return true
	case <-ctx.Done():
		return false
	}
}

// take applies one event of the hub where it belongs in the room's order.
// This server's own events that the relay orders are drawn when it hands
// them back (their echo), and their place goes with them; the other
// servers' events come in that order already.
func (p *Board) take(e *live.Entry) {
	if e.Echo {
		p.echoedTo = max(p.echoedTo, e.Own)
	}
	if p.cfg.Ordered != nil && p.cfg.Ordered(e) {
		p.mu.Lock()
		p.modelSeq = e.Seq
		p.advanceLocked(e.Seq)
		p.mu.Unlock()
		return
	}
	if e.Echo && p.countedOwn(e.Own) {
		// Loaded from the books at the start, or counted in the tally.
		p.mu.Lock()
		p.modelSeq = e.Seq
		p.advanceLocked(e.Seq)
		p.mu.Unlock()
		return
	}
	if !e.Place.IsZero() {
		p.mu.Lock()
		if !e.Place.After(p.place) {
			// The order went back (the database numbered batches again):
			// a page resumes by place only from frames made from here on.
			p.placeFrom = p.frames
		}
		p.place = e.Place
		p.mu.Unlock()
	}
	p.apply(e.Event)
}

// Close ends every stream: the hub closed or the server is stopping.
func (p *Board) Close() {
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
func (p *Board) advanceLocked(seq uint64) {
	if seq > p.frameSeq {
		p.frameSeq = seq
	}
}

// Caught reports whether the board has applied every event up to seq.
func (p *Board) Caught(seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frameSeq >= seq
}
