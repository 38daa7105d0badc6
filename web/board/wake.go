package board

import (
	"sync"
	"time"

	"github.com/a-h/templ"

	"paytwice/web/live"
)

// The viewers are woken at most once per fanoutInterval: under a stream
// of events each viewer gets one write per interval, whatever the rate
// of payments, so what a viewer costs does not grow with them. A lone
// event after a quiet spell goes out at once. The interval grows with the
// viewers, so that all of them together are woken at most about 2,000
// times a second up to 200 pages (100 ms), and at most 130 ms apart
// beyond: a payment reaches every page within 130 ms of its answer (the
// lecture hall's p99 is 150 ms), and each wake carries several payments'
// changes in one write per page. With 500 pages that is some 3,850
// writes a second, which the fan writer makes a few hundred to a system
// call (sendRing).
const (
	fanoutMin       = 5 * time.Millisecond
	fanoutMax       = 130 * time.Millisecond
	fanoutPerViewer = 500 * time.Microsecond
)

func (p *Board) fanoutInterval() time.Duration {
	return min(fanoutMax, max(fanoutMin, time.Duration(p.viewers.Load())*fanoutPerViewer))
}

// A phone (a page that is not a board: fanPage.phone) gets its own
// caller's payment steps and every change of the room at each wake, as a
// board does, and the rest of the class's payments in rounds classPerViewer
// per open page apart, at least the fan-out interval and at most classMax,
// made at the wake nearest that (fanWriter.roundFor): up to classFrom
// pages a phone is written as a board is, every wake; beyond, every
// second wake (260 ms, the fan-out's interval being 130 ms). Each write
// costs the server about as much whatever it carries (its share of
// a system call and, on one machine, the reader's side of loopback), and
// with more phones than a lecture hall holds those writes would be most
// of what the pages cost: the class's payments then reach a phone later,
// never differently (the same frames, in the same order), while the
// projector and the payer's own phone see a payment within the fan-out
// interval. Until the rounds' writes went through one io_uring they came
// from 200 pages on, every third wake (300 ms) with 500 pages: the
// class's payments reached the phones at p99 about 300 ms.
const (
	classPerViewer = 600 * time.Microsecond
	classMax       = 300 * time.Millisecond
)

// classFrom is the most pages at which a phone is still written every
// wake, as a board is: the lecture hall's 500.
const classFrom = 500

// classInterval is how far apart the class's rounds to the phones are.
func (p *Board) classInterval() time.Duration {
	n := p.viewers.Load()
	if n <= classFrom {
		return p.fanoutInterval()
	}
	return min(classMax, max(p.fanoutInterval(), time.Duration(n)*classPerViewer))
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
			last := w.frames[len(w.frames)-1]
			w.b = sseFrame(last.render.epoch, last.seq, last.place, lastRedraws(ops))
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
