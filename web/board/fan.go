package board

import (
	"net/http"
	"sync"
	"syscall"
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
// net/http (HTTP/2, TLS) and pages with a write gap stay with their own
// streams.
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
}

// fanPage is one page's stream while the fan writer writes it.
type fanPage struct {
	raw    syscall.RawConn
	gzip   bool
	req    *http.Request
	cursor uint64 // every frame up to it has been sent
	// back takes the page back to its stream (one at a time: a page is
	// attached again only by its stream, after it took the last).
	back chan handback
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
// frames end no later than the next one's). It reports whether it did.
func (f *fanWriter) attach(pg *fanPage, w *wake) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = w
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
	for {
		<-w.done
		w = w.next
		f.mu.Lock()
		if len(f.pages) == 0 {
			f.at = nil
			f.mu.Unlock()
			return
		}
		if w.end {
			for _, pg := range f.pages {
				pg.back <- handback{w: w, cursor: pg.cursor, end: true}
			}
			f.pages, f.at = nil, nil
			f.mu.Unlock()
			return
		}
		if !w.beat && f.beforeWrite != nil {
			// The attached pages have no write gap, so they wait alike:
			// once for all of them.
			r := f.pages[0].req
			f.mu.Unlock()
			f.beforeWrite(r)
			f.mu.Lock()
		}
		f.writeLocked(w)
		f.at = w
		f.mu.Unlock()
	}
}

// writeLocked writes w to every attached page, handing back those whose
// socket did not take it all.
func (f *fanWriter) writeLocked(w *wake) {
	kept := f.pages[:0]
	for _, pg := range f.pages {
		b, ok := w.after(pg.cursor, pg.gzip)
		if !ok {
			pg.back <- handback{w: w, cursor: pg.cursor, end: true}
			continue
		}
		pg.cursor = max(pg.cursor, w.last)
		if len(b) > 0 {
			if n := writeNow(pg.raw, b); n < len(b) {
				pg.back <- handback{w: w, cursor: pg.cursor, rest: b[max(n, 0):]}
				continue
			}
		}
		kept = append(kept, pg)
	}
	clear(f.pages[len(kept):])
	f.pages = kept
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
