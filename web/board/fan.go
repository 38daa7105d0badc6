package board

import (
	"net/http"
	"sync"
	"syscall"
	"time"
)

// fanWriter writes every wake to the pages that are up to date, one after
// the other, from one goroutine. With each page's stream writing its own
// wakes, a wake readied hundreds of goroutines at once, each of which
// entered a write system call while the others queued behind it: the
// runtime's monitor then took processors from the threads in those calls
// and started others, and the thread switches and the monitor's own work
// (about a fifth of the server's CPU with 500 pages open) grew with the
// pages. One goroutine making the same writes in a row wakes once per
// wake, whatever the pages.
//
// Its writes never wait for a page: a page whose socket does not take the
// whole wake at once is handed back to its own stream, with the bytes
// that did not fit, and that stream writes them under its write deadline
// as every stream did before, then joins again once it is up to date. A
// page that stops reading holds up nobody. Pages written through
// net/http (HTTP/2, TLS) stay with their own streams, and so does a page
// whose write gap (Config.WriteGap) is longer than the fan-out interval:
// the writer writes a page once per wake, and the wakes come at least
// an interval apart, so a gap no longer than that is kept by the wakes
// themselves (give or take the milliseconds a round of writes takes),
// while a longer one needs its stream's own wait. With hundreds of pages
// open the interval (130 ms) is longer than the gap a server gives a
// student (100 ms).
//
// A phone (fanPage.phone) is written a wake only when it carries one of
// its own caller's payment steps or a change every page needs at once
// (frame.owner); the class's other payments wait for the next class round,
// which the writer makes every classInterval, by a timer when no wake
// falls due. A phone then gets, in one write, every wake it lacks, in
// order, as bytes it shares with every phone that lacks the same.
//
// The writer runs only while pages are attached: with none it stops, so
// that a board nobody watches pays no goroutine per wake.
type fanWriter struct {
	mu    sync.Mutex
	pages []*fanPage
	// at is the last wake written to the pages; nil while the writer is
	// stopped. A page joins only when it has sent every wake up to at
	// (attach), so the writer owes it exactly the wakes after at.
	at *wake
	// beforeWrite is Config.BeforeWrite.
	beforeWrite func(*http.Request)
	// interval is the board's fan-out interval now.
	interval func() time.Duration
	// classInterval is how far apart the class's rounds to the phones
	// are now (Board.classInterval).
	classInterval func() time.Duration
	// lastClass is when the phones were last brought up to date.
	lastClass time.Time
	// clock tells the time of the class's rounds; time.Now when nil.
	// Tests set it to place wakes in time without waiting.
	clock func() time.Time
	// behind says a phone lacks a wake: a class round is due.
	behind bool
	// round is what the writer works out once per round (roundFor).
	round fanRound
	// batch holds a round's writes (writeLocked), kept between rounds.
	batch []pageWrite
	// ring makes a round's writes in a few system calls (sendRing) while
	// the writer runs; noRing says the system gives none.
	ring   *sendRing
	noRing bool
}

// fanRound is what one round of writes works out once for all its
// pages: whose payment steps its wake carries, and the catch-up bytes of
// the phones that lack wakes, shared by those that lack the same.
type fanRound struct {
	w *wake
	// all says the wake carries a change every page needs at once.
	all bool
	// owners are the callers whose payment steps the wake carries.
	owners map[string]struct{}
	// class says the phones are brought up to date this round.
	class   bool
	catchUp map[catchUpKey]catchUp
}

// catchUp is what bytesFor made for the phones that lack the same wakes.
type catchUp struct {
	b  []byte
	ok bool
}

// catchUpKey names what a phone that lacks wakes needs: the wakes after
// sent, from its cursor on.
type catchUpKey struct {
	sent, cursor uint64
	gzip         bool
}

// fanPage is one page's stream while the fan writer writes it.
type fanPage struct {
	raw    syscall.RawConn
	gzip   bool
	req    *http.Request
	cursor uint64 // every frame up to it has been sent
	// gap is the page's write gap: while it is longer than the fan-out
	// interval the page's stream writes it instead.
	gap time.Duration
	// wrote is when the writer last wrote to a page with a gap.
	wrote time.Time
	// back takes the page back to its stream (one at a time: a page is
	// attached again only by its stream, after it took the last).
	back chan handback
	// phone says the page gets the class's payments in class rounds;
	// owner is the caller whose payment steps it gets at once
	// (Config.Viewer).
	phone bool
	owner string
	// sent is the last wake the page has been written (or attached at):
	// a phone that skipped wakes lacks those after it.
	sent *wake
}

// handback is what a page's stream takes over from the fan writer.
type handback struct {
	w      *wake  // the last wake handled for the page
	cursor uint64 // every frame up to it has been sent, rest aside
	rest   []byte // the part of w's bytes the socket did not take
	end    bool   // the stream ends: the server stops, or the page lacks frames the wake does not hold
}

// attach hands pg to the writer, if the writer has not written any wake
// after w, the wake pg's stream handled last (its wakes up to w and any
// wake the writer owes it before w are nothing new to it: each wake's
// frames end no later than the next one's), and the page's gap is kept
// by the wakes. It reports whether it did.
func (f *fanWriter) attach(pg *fanPage, w *wake) bool {
	if pg.gap > f.interval() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	pg.sent = w
	if f.at == nil {
		// The writer starts with its pages up to date: the class's round
		// is one interval away.
		f.at, f.lastClass, f.behind = w, f.now(), false
		f.pages = append(f.pages, pg)
		go f.run(w)
		return true
	}
	if f.at.id > w.id {
		return false // the writer is ahead: the stream catches up on its own first
	}
	f.pages = append(f.pages, pg)
	return true
}

// detach takes pg from the writer, if it is still there: its viewer left.
func (f *fanWriter) detach(pg *fanPage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.pages {
		if p == pg {
			f.pages = append(f.pages[:i], f.pages[i+1:]...)
			return
		}
	}
}

// run writes each wake after w to the attached pages, until none is left
// or the board ends.
func (f *fanWriter) run(w *wake) {
	// classDue fires when phones lack wakes and no wake has come to
	// bring them up to date by the class round's time.
	classDue := time.NewTimer(time.Hour)
	classDue.Stop()
	defer classDue.Stop()
	armed := false
	for {
		select {
		case <-w.done:
		case <-classDue.C:
			armed = false
			f.mu.Lock()
			if len(f.pages) == 0 {
				f.stopLocked()
				f.mu.Unlock()
				return
			}
			if !f.behind {
				f.mu.Unlock()
				continue // a wake brought the phones up to date
			}
			// A class round of the wake written last: only the phones
			// that lack it get anything.
			f.roundFor(w, true)
			f.beforeLocked(w, false)
			f.writeLocked(w, false)
			f.beforeLocked(w, true)
			f.writeLocked(w, true)
			f.endRoundLocked()
			f.mu.Unlock()
			continue
		}
		w = w.next
		f.mu.Lock()
		if len(f.pages) == 0 {
			f.stopLocked()
			f.mu.Unlock()
			return
		}
		if w.end {
			for _, pg := range f.pages {
				pg.back <- handback{w: w, cursor: pg.cursor, end: true}
			}
			f.pages = nil
			f.stopLocked()
			f.mu.Unlock()
			return
		}
		f.roundFor(w, false)
		// The pages with no write gap first, then those with one (a
		// server's students, which wait for the presenter's payments at
		// work while the presenter's page does not): each kind waits
		// alike, so BeforeWrite is asked once for all of one kind.
		f.beforeLocked(w, false)
		f.writeLocked(w, false)
		f.at = w
		f.beforeLocked(w, true)
		f.writeLocked(w, true)
		f.endRoundLocked()
		if f.behind && !armed {
			classDue.Reset(max(0, f.classInterval()+f.interval()/2-f.now().Sub(f.lastClass)))
			armed = true
		}
		f.mu.Unlock()
	}
}

// now is the time on f's clock.
func (f *fanWriter) now() time.Time {
	if f.clock == nil {
		return time.Now()
	}
	return f.clock()
}

// roundFor starts a round of writes of w, the newest wake: a class round
// when class says so, when phones are not kept apart from boards (few
// pages), or at the wake nearest the class's interval after the last
// round: from half a fan-out interval before it. Under a steady stream of
// payments the wakes come a fan-out interval apart, and a round is made
// at every few of them (at 500 pages, every third: 300 ms), each with
// the payments up to its wake, so that the class's payments reach a
// phone within the class's interval of the wake that carried them to the
// board. The timer (run) makes the round when no wake comes by half an
// interval after it; it used to make it at the interval itself, when
// the next wake came just after, with the payments of the interval's
// last fan-out, which then waited for the round after.
func (f *fanWriter) roundFor(w *wake, class bool) {
	r := &f.round
	every, fanout := f.classInterval(), f.interval()
	*r = fanRound{w: w, class: class || w.beat || every <= fanout || f.now().Sub(f.lastClass) >= every-fanout/2}
	if r.class {
		return
	}
	for _, fr := range w.frames {
		if fr.owner == "" {
			r.all = true
			return
		}
		if r.owners == nil {
			r.owners = map[string]struct{}{}
		}
		r.owners[fr.owner] = struct{}{}
	}
}

// endRoundLocked notes a class round's end: every phone has every wake,
// or is back with its stream.
func (f *fanWriter) endRoundLocked() {
	if f.round.class {
		f.lastClass, f.behind = f.now(), false
	}
	f.round.catchUp = nil
}

// skips says whether phone pg may skip the round's wake: nothing in it is
// needed at once by pg's page.
func (r *fanRound) skips(pg *fanPage) bool {
	if !pg.phone || r.class || r.all {
		return false
	}
	_, own := r.owners[pg.owner]
	return pg.owner == "" || !own
}

// bytesFor is what page pg, which has sent every frame up to its cursor
// and every wake up to pg.sent, is written in this round: w's bytes for
// a page that had the wake before it; for a phone that skipped wakes,
// every wake after pg.sent up to w, one after the other (a heartbeat
// among them left out), made once for the phones that lack the same.
// ok is false when frames the page lacks are not in the wakes.
func (f *fanWriter) bytesFor(pg *fanPage, w *wake) (b []byte, ok bool) {
	switch {
	case pg.sent == nil || pg.sent.id >= w.id:
		return nil, true // the page is past this wake already
	case pg.sent.next == w:
		return w.after(pg.cursor, pg.gzip)
	}
	key := catchUpKey{sent: pg.sent.id, cursor: pg.cursor, gzip: pg.gzip}
	if c, made := f.round.catchUp[key]; made {
		return c.b, c.ok
	}
	c := catchUp{ok: true}
	cursor := pg.cursor
	for x := pg.sent.next; x != nil; x = x.next {
		if !x.beat {
			more, ok := x.after(cursor, pg.gzip)
			if !ok {
				c = catchUp{}
				break
			}
			c.b = append(c.b, more...)
			cursor = max(cursor, x.last)
		}
		if x == w {
			break
		}
	}
	if f.round.catchUp == nil {
		f.round.catchUp = map[catchUpKey]catchUp{}
	}
	f.round.catchUp[key] = c
	return c.b, c.ok
}

// beforeLocked calls BeforeWrite, without f.mu, for the attached pages
// with a write gap (gapped) or those without, unless there are none or w
// is a heartbeat.
func (f *fanWriter) beforeLocked(w *wake, gapped bool) {
	if f.beforeWrite == nil || w.beat {
		return
	}
	for _, pg := range f.pages {
		if (pg.gap > 0) == gapped {
			f.mu.Unlock()
			f.beforeWrite(pg.req)
			f.mu.Lock()
			return
		}
	}
}

// writeLocked writes w, the round's wake, to every attached page with a
// write gap (gapped) or every one without, handing back those whose
// socket did not take it all, and before it those whose gap the wakes no
// longer keep (the pages became fewer). A page attached at w already
// gets nothing more; a phone that may skip w gets nothing yet. The
// writes themselves are made together (writeAll), after every page's
// bytes are known.
func (f *fanWriter) writeLocked(w *wake, gapped bool) {
	kept := f.pages[:0]
	batch := f.batch[:0]
	interval := f.interval()
	for _, pg := range f.pages {
		if (pg.gap > 0) != gapped {
			kept = append(kept, pg)
			continue
		}
		if pg.gap > interval && !w.beat {
			pg.back <- handback{w: pg.sent, cursor: pg.cursor}
			continue
		}
		if f.round.skips(pg) {
			if pg.sent != nil && pg.sent.id < w.id {
				f.behind = true
			}
			kept = append(kept, pg)
			continue
		}
		b, ok := f.bytesFor(pg, w)
		if !ok {
			pg.back <- handback{w: w, cursor: pg.cursor, end: true}
			continue
		}
		if pg.sent == nil || pg.sent.id < w.id {
			pg.sent = w
		}
		pg.cursor = max(pg.cursor, w.last)
		if len(b) == 0 {
			kept = append(kept, pg)
			continue
		}
		if pg.gap > 0 {
			pg.wrote = time.Now()
		}
		batch = append(batch, pageWrite{pg: pg, b: b})
	}
	f.writeAll(batch)
	// The pages written come after those kept so far: every page before
	// them in f.pages was either kept or left, so kept never overtakes
	// the page being read.
	for _, pw := range batch {
		if pw.n < len(pw.b) {
			pw.pg.back <- handback{w: w, cursor: pw.pg.cursor, rest: pw.b[pw.n:]}
			continue
		}
		kept = append(kept, pw.pg)
	}
	clear(batch)
	f.batch = batch[:0]
	clear(f.pages[len(kept):])
	f.pages = kept
}

// pageWrite is one write of a round: b to pg's socket, of which the
// socket took n bytes.
type pageWrite struct {
	pg *fanPage
	b  []byte
	n  int
}

// useSendRing says whether the writer may make a round's writes through
// one io_uring (sendring_linux.go); tests turn it off to write one socket
// at a time, as on a system without it.
var useSendRing = true

// writeAll writes each of ws, what its socket takes at once, and sets
// its n: through the ring when there are several and the system gives
// one, one write call each otherwise.
func (f *fanWriter) writeAll(ws []pageWrite) {
	if len(ws) > 1 && f.ring == nil && !f.noRing && useSendRing {
		r, err := newSendRing()
		if err != nil {
			f.noRing = true
		} else {
			f.ring = r
		}
	}
	if len(ws) > 1 && f.ring != nil {
		if f.ring.send(ws) {
			return
		}
		// The ring failed: what it did not send (n is 0) is written one
		// socket at a time, now and from now on.
		f.ring.close()
		f.ring, f.noRing = nil, true
	}
	for i := range ws {
		if ws[i].n == 0 {
			ws[i].n = writeNow(ws[i].pg.raw, ws[i].b)
		}
	}
}

// stopLocked marks the writer stopped (it has no page left, or the
// board ended) and gives its ring back: a writer started again makes
// its own.
func (f *fanWriter) stopLocked() {
	f.at = nil
	if f.ring != nil {
		f.ring.close()
		f.ring = nil
	}
}

// writeNow writes what the socket takes of b at once, without waiting,
// and returns how much that was: less than len(b) when the socket was
// full, closed or failed, and the stream then finds out which.
func writeNow(raw syscall.RawConn, b []byte) int {
	n := 0
	err := raw.Write(func(fd uintptr) bool {
		n = rawWrite(fd, b)
		return true // never wait for the socket: the stream does that
	})
	if err != nil {
		return 0
	}
	return n
}
