package board

import (
	"errors"
	"net"
	"net/http"
	"time"

	"paytwice/pay/peers"
	"paytwice/web/live"
)

// The event stream's timing: the defaults of Config's Heartbeat and
// WriteTimeout.
const (
	// heartbeatEvery keeps idle connections (and the proxies between)
	// from timing out, and lets a dead viewer be noticed.
	heartbeatEvery = 15 * time.Second
	// writeTimeout drops a viewer whose connection takes longer than this
	// to accept one batch (nine tenths of it at least, see eventStream.write):
	// the hub never waits for it, and neither do we.
	writeTimeout = 10 * time.Second
	// reconnectMS is the retry hint sent to EventSource.
	reconnectMS = 1000
)

// ErrFull is the answer to a viewer beyond the streams a server keeps
// open at once.
var ErrFull = errors.New("too many live views open")

// Stream sends the board to the viewer of r as Server-Sent Events, until
// the viewer leaves or the server stops. Each event is one `frame` of htmx
// out-of-band fragments with its sequence number as `id:`. A browser
// resumes after the last id it saw (Last-Event-ID, or ?since= on the
// page's first connection); one that asks for frames the board no longer
// holds, or from a server that restarted, gets a single frame that redraws
// every panel instead. Viewers read the board's wakes, never the hub: an
// event that changes nothing on the page (most of them in busy mode) costs
// a viewer nothing, a viewer is written at most once per fan-out interval
// however fast payments come, one write of bytes it shares with every
// other viewer, made for all the viewers that are up to date by one
// goroutine (fan.go); a viewer too slow for the ring is dropped.
//
// Before it writes anything Stream may refuse: ErrClosed when the board
// stopped, ErrFull beyond maxStreams open streams. After, it returns nil.
func (proj *Board) Stream(w http.ResponseWriter, r *http.Request, maxStreams int) error {
	at := resumePoint(r)
	why := FellBehind
	foreign := at.given && at.epoch != proj.cfg.Hub.Epoch()
	if foreign && !at.place.IsZero() {
		// From another server of the room (or another life of this one),
		// with its place in the room's order: this board may not have
		// drawn that far yet.
		proj.waitPlace(r.Context(), at.place)
	}
	if foreign {
		// Asked before the lock: it may read the database.
		why = proj.origin(r.Context(), at.epoch)
	}

	// Decide where the viewer starts under the projector's lock, so that
	// no frame is made between the decision and the count that keeps the
	// frames coming.
	proj.mu.Lock()
	if proj.closed {
		proj.mu.Unlock()
		return ErrClosed
	}
	if proj.viewers.Load() >= int64(maxStreams) {
		proj.mu.Unlock()
		return ErrFull
	}
	proj.viewers.Add(1)
	for proj.rest.resting {
		// Open now, the stream keeps the board awake once woken.
		proj.mu.Unlock()
		proj.wake()
		proj.mu.Lock()
		if proj.closed {
			proj.viewers.Add(-1)
			proj.mu.Unlock()
			return ErrClosed
		}
	}
	proj.wantedLocked()
	proj.startBeatLocked()
	var cursor uint64
	ok := false
	switch {
	case at.given && !foreign:
		cursor, ok = proj.resumeLocked(at.seq)
	case foreign && !at.place.IsZero():
		// Every server draws the room's events in the room's order: the
		// page goes on from the frames here after the last event it has.
		cursor, ok = proj.resumePlaceLocked(at.place)
	}
	var redraw *redrawing
	switch {
	case ok:
	case at.given:
		// From another life of the server (or another server), or further
		// behind than the frames kept: the page's numbers say nothing
		// here. It gets the whole room as it is now, marked so that its
		// scripts ask for the rest of the room too (resyncLocked).
		cursor = proj.frames
		redraw = proj.resyncLocked(why)
	default:
		// A new page: redraw.
		cursor = proj.frames
		redraw = proj.redrawLocked()
	}
	// The viewer catches up to the last wake from the ring, then follows
	// the wakes from that one on.
	tip, caughtUp := proj.tip, proj.pulseN
	var movedIn *redrawing
	if ok && foreign {
		// A page from another server's frames catches up to the last
		// frame made, and is then sent what this board draws of its own
		// as that frame leaves it (the wakes send it only the frames
		// after it).
		caughtUp = proj.frames
		movedIn = proj.movedInLocked()
	}
	proj.mu.Unlock()
	defer func() {
		proj.mu.Lock()
		proj.viewers.Add(-1)
		proj.wantedLocked() // the last page to close leaves it awake for RestAfter
		proj.mu.Unlock()
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	// The epoch the ids of this stream carry: paytwice cluster's front door
	// sends a page that resumes from them back to this server while it
	// runs, which alone can resume it frame by frame.
	h.Set(peers.StreamEpochHeader, proj.cfg.Hub.Epoch())
	// A page that takes gzip gets the frames as every such page does,
	// compressed once for all of them (live.Deflate): a few hundred open
	// pages' writes were most of the server's work under a class's
	// payments, and their bytes most of what the writes cost.
	gz := live.AcceptsGzip(r)
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	h.Add("Vary", "Accept-Encoding")
	out, err := startStream(w, proj)
	if err != nil {
		return nil
	}
	defer out.close()
	out.gzip = gz
	first := net.Buffers{retryHint}
	if gz {
		first = net.Buffers{live.GzipHeader, retryHintDeflated}
	}
	if redraw != nil {
		// Drawn, and compressed, once for every page that opens before
		// the next change.
		first = append(first, redraw.encoded(gz))
	}
	if out.writeFrames(first) != nil {
		return nil
	}
	redraw = nil // sent: let it go

	for cursor < caughtUp {
		proj.mu.Lock()
		frames, ok := proj.framesAfterLocked(cursor, caughtUp)
		proj.mu.Unlock()
		if !ok || len(frames) == 0 {
			return nil // fell behind by more than the ring holds
		}
		var b []byte
		for _, f := range frames {
			b = append(b, f.sse()...)
		}
		if out.send(b) != nil {
			return nil
		}
		cursor = frames[len(frames)-1].n
	}
	if movedIn != nil && out.send(movedIn.bytes()) != nil {
		return nil
	}

	ctx := r.Context()
	var gap time.Duration
	if proj.cfg.WriteGap != nil {
		gap = proj.cfg.WriteGap(r)
	}
	var wrote time.Time
	// The board's fan writer writes the page while it is up to date and
	// its gap is no longer than the fan-out interval (fan.go); its stream
	// only waits then, and takes over again when the writer hands it
	// back.
	var pg *fanPage
	if out.raw != nil {
		pg = &fanPage{raw: out.raw, gzip: out.gzip, req: r, gap: gap, back: make(chan handback, 1)}
		if proj.cfg.Viewer != nil {
			var board bool
			pg.owner, board = proj.cfg.Viewer(r)
			pg.phone = !board
		}
	}
	for w := tip; ; {
		if pg != nil {
			pg.cursor = cursor
			out.handOver()
			if proj.fan.attach(pg, w) {
				var hb handback
				select {
				case hb = <-pg.back:
				case <-out.gone:
					proj.fan.detach(pg)
					return nil
				case <-ctx.Done():
					proj.fan.detach(pg)
					return nil
				}
				if hb.end {
					return nil
				}
				proj.handedBack.Add(1)
				w, cursor = hb.w, hb.cursor
				wrote = pg.wrote
				if len(hb.rest) > 0 && out.write(hb.rest) != nil {
					return nil
				}
				continue
			}
		}
		select {
		case <-w.done:
		case <-out.gone:
			return nil
		case <-ctx.Done():
			return nil
		}
		w = w.next
		if w.end || fellBehind(proj.pulsed.Load(), cursor) {
			// The server is stopping, or the viewer fell behind by more
			// than the ring holds: end the stream. A browser reconnects
			// and is redrawn.
			return nil
		}
		if !w.beat {
			if wait := gap - time.Since(wrote); gap > 0 && wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-out.gone:
					t.Stop()
					return nil
				case <-ctx.Done():
					t.Stop()
					return nil
				}
			}
			if proj.cfg.BeforeWrite != nil {
				proj.cfg.BeforeWrite(r)
			}
		}
		b, ok := w.after(cursor, out.gzip)
		if !ok {
			return nil
		}
		cursor = max(cursor, w.last)
		// For a viewer with a gap, the wakes that came while it waited go
		// out in the same write, up to mergedWrite bytes; a heartbeat
		// among them is not needed. The frames are shared with every other
		// viewer and go out as they are, in one vectored write: copied
		// into one slice for each viewer, hundreds of viewers' merges were
		// most of the server's work under a class's load (each a new
		// slice of up to mergedWrite bytes, several times a second).
		frames := net.Buffers{b}
		if gap > 0 && !w.beat {
			for n := len(b); n < mergedWrite && isDone(w.done) && !w.next.end && !fellBehind(proj.pulsed.Load(), cursor); {
				w = w.next
				if w.beat {
					continue
				}
				more, ok := w.after(cursor, out.gzip)
				if !ok {
					return nil
				}
				if len(more) > 0 {
					frames = append(frames, more)
					n += len(more)
				}
				cursor = max(cursor, w.last)
			}
		}
		if n := len(frames); (n > 1 || len(frames[0]) > 0) && out.writeFrames(frames) != nil {
			return nil
		}
		wrote = time.Now()
	}
}

// fellBehind says whether a viewer that has sent every frame up to cursor
// is further behind the frames the viewers were woken for (pulsed) than
// the ring holds. A viewer may be ahead of pulsed: one drawn whole, or
// caught up to the last frame made, before the wake that announces it.
func fellBehind(pulsed, cursor uint64) bool {
	return pulsed > cursor && pulsed-cursor > liveFrames
}

// mergedWrite bounds what a viewer with a write gap gathers for one
// write: a few pages' worth of changes, not all the ring holds.
const mergedWrite = 256 << 10

// isDone says whether ch is closed.
func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
