package board

import (
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
)

// busyMode is the board in busy mode: when events come faster than anyone
// can read them, the panels stop drawing each request and show totals
// instead, refreshed twice a second, and redraw everything once it calms
// down. Viewers then cost the payment path almost nothing, however fast
// it runs. The presenter's own requests (live.Event.Priority) are the
// exception: they are still drawn one by one, so that a class busy enough
// to switch the board over never hides the payment the presenter is
// showing.
type busyMode struct {
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
	// quietN counts the events applied without a drawing of their own
	// (busy mode, or over their caller's or address's share), and
	// batchWaits how often the board waited before taking more (run).
	quietN     atomic.Uint64
	batchWaits atomic.Uint64
}

// Busy mode's thresholds. A request is six to nine events; a class of
// thirty double-clicking together makes about 60 requests in a second or
// two, which stays below both ways in: 600 events in the last second, or
// 360 in the last 200 ms (a flood, noticed before it has cost much; above
// one address's share of the board, so that one address cannot reach it).
const (
	busyEnter      = live.BusyEvents // events in the last second
	busyEnterBurst = 360             // events in the last 200 ms
	busyLeave      = 100             // events in the last second
	busyRefresh    = 500 * time.Millisecond
	busyBatch      = 20 * time.Millisecond
)

// A flood's refreshes, busy mode's (tick) and those of a caller or an
// address over its share (mutedFrame, drawHeld), go to every page at once,
// the phones too: each is a write to every open page, and at a flood's
// pace they were most of those writes (a 16-client flat-out run with 500
// pages: two of some 55 KB a second to each page, next to nothing else).
// Up to 200 pages they come twice a second, as ever; beyond, at
// floodPerViewer per open page, once a second from 400 pages on. The
// totals of a flood move too fast to read either way, and the payments
// that are drawn one by one (the presenter's, a phone's own caller's) go
// out as before.
const (
	floodPerViewer  = 2500 * time.Microsecond
	floodRefreshMax = time.Second
)

// floodRefresh is how far apart a flood's refreshes are now, given how
// far apart they are with few pages open (busyRefresh, shareRefresh).
func (p *Board) floodRefresh(few time.Duration) time.Duration {
	return max(few, min(floodRefreshMax, time.Duration(p.viewers.Load())*floodPerViewer))
}

// rateMeter counts events in the last second, in ten buckets.
type rateMeter struct {
	counts [10]int
	slots  [10]int64
}

func (m *rateMeter) add(now time.Time) {
	b := now.UnixMilli() / 100
	i := b % 10
	switch {
	case m.slots[i] > b:
		// A step from before the second this slot now counts: past the
		// window the meter reads.
		return
	case m.slots[i] < b:
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

// tick refreshes the totals while busy (every floodRefresh, as it is when
// busy mode starts). A refresh is the board's own
// doing, not something that happened: it is a frame, never an event. The
// ticker runs only while busy, so that an idle server wakes for nothing;
// entering busy mode starts it again (enterBusy).
func (p *Board) tick() {
	for {
		select {
		case <-p.cfg.Ctx.Done():
			return
		case <-p.busyStart:
		}
		p.ticking.Store(true)
		p.tickerRuns.Add(1)
		ticks, stop := p.cfg.Ticks(p.floodRefresh(busyRefresh))
		for p.busyFlag.Load() {
			select {
			case <-p.cfg.Ctx.Done():
				stop()
				return
			case <-ticks:
				p.refresh()
			}
		}
		stop()
		p.ticking.Store(false)
	}
}

// refresh redraws the busy totals, or leaves busy mode once events have
// slowed down.
func (p *Board) refresh() {
	// No event is applied while refresh runs: the rate it reads stays
	// below busyLeave once it is, and a load of the model is not mixed
	// with events (Board.applying).
	p.applying.Lock()
	defer p.applying.Unlock()
	now := p.cfg.Wall()
	p.mu.Lock()
	if p.busy == nil {
		p.mu.Unlock()
		return
	}
	if p.rate.perSecond(now) >= busyLeave {
		p.addFrameLocked(p.modelSeq, true, p.busyFrame(now))
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// While busy, the tables and the charges were counted from the events
	// as they came, with nobody reading them one by one. Calm again, the
	// board shows what the books hold: a charge saved without an event
	// reaching this board (one lost on the way, or written by something
	// that publishes none) is on the page from now on.
	p.load(p.cfg.Ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	// The timeline did not change while busy but for the presenter's
	// rows, drawn as they came; the tables and counters did.
	busy := p.busy
	p.leaveBusy()
	l := p.snapshotLocked()
	p.shown = &l.Counters
	p.keysDrawn()
	p.chargesDrawn()
	p.addFrameLocked(p.modelSeq, true, []templ.Component{inTable(views.KeysBody(l.Keys, l.Now, true)),
		inTable(views.ChargesBody(l.Charges, l.Now, true)), views.CountersView(l.Counters, true),
		views.StepView(busy.Steps[0], true), views.Outcome(busy.ID, busy.Outcome, true)})
}

// busyRowPrefix starts the id of a busy period's row.
const busyRowPrefix = "tl-busy-"

// enterBusy starts busy mode: a row says so, and from now on only the
// counters are refreshed, twice a second.
func (p *Board) enterBusy(e live.Event, now time.Time) []templ.Component {
	p.busy = &views.TimelineRow{ID: p.eventRowID(busyRowPrefix, e.Seq), Time: e.Time, Title: "Busy"}
	p.busyReqs, p.busySince = 0, now
	p.busyFlag.Store(true)
	select {
	case p.busyStart <- struct{}{}:
	default: // the ticker is already woken
	}
	p.busyText(now)
	ops := p.pushRow(p.busy)
	ops = append(ops, views.CountersView(p.countersDrawnLocked(), true))
	return ops
}

// busyText writes the busy row's words.
func (p *Board) busyText(now time.Time) {
	r := p.busy
	rate := p.rate.perSecond(now)
	r.Steps = []views.Step{{ID: r.ID + "-note", From: views.LaneServer, To: views.LaneServer,
		Label: "Requests are arriving faster than anyone can read (" + strconv.Itoa(rate) + " events a second): the timeline stops drawing them one by one. The counters stay live; everything is redrawn when it calms down.",
		Badge: views.Badge{Text: "busy", Tone: views.ToneWarn}}}
	r.Outcome = views.Badge{Text: strconv.Itoa(p.busyReqs) + " requests not drawn", Tone: views.ToneWarn}
}

// busyFrame refreshes the counters and the busy row.
func (p *Board) busyFrame(now time.Time) []templ.Component {
	p.busyText(now)
	return []templ.Component{views.CountersView(p.countersDrawnLocked(), true),
		views.StepView(p.busy.Steps[0], true), views.Outcome(p.busy.ID, p.busy.Outcome, true)}
}

// leaveBusy ends busy mode; the row stays in the timeline as a record.
func (p *Board) leaveBusy() {
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
