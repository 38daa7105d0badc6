package web

import (
	"sync"
	"time"
)

// callerBook remembers the callers (browser sessions and bearer tokens)
// each address has let in, so that a caller gets a share of its own from
// its second request on. Behind one shared address a caller is all the
// server can tell students apart by, and a credential costs nothing to
// make: a student who sends every request under a new token would
// otherwise be a thousand callers, each with a full share, and use up the
// address's buckets that its classmates share. So a caller the book does
// not know yet is counted, with every other new caller of its address, as
// one caller, "new callers"; once let in it is known, and counted on its
// own, until it has been idle for Limits.IdleAfter.
//
// The book is bounded: it holds at most max callers, forgets the idle,
// and when it is full the caller idle longest makes room. New callers come
// in no faster than their shared share lets them, so one address minting
// credentials fills it slowly, and pushes out only callers idle longer
// than the rest.
type callerBook struct {
	now   func() time.Time
	idle  time.Duration
	max   int
	mu    sync.Mutex
	seen  map[string]time.Time // caller (address, then credential) → last let in
	swept time.Time
	peak  int // the most callers seen has held (shrunk, tokenbucket.go)
}

func newCallerBook(now func() time.Time, max int, idle time.Duration) *callerBook {
	return &callerBook{now: now, idle: idle, max: max, seen: map[string]time.Time{}}
}

// known says whether the caller has been let in before, and not idle
// since for longer than the book remembers.
func (b *callerBook) known(caller string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.seen[caller]
	return ok && b.now().Sub(at) <= b.idle
}

// letIn notes that the caller was let in now.
func (b *callerBook) letIn(caller string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.Sub(b.swept) > b.idle/4 {
		b.sweepLocked(now)
	}
	if _, ok := b.seen[caller]; !ok && len(b.seen) >= b.max {
		var oldest string
		var at time.Time
		first := true
		for k, t := range b.seen {
			if first || t.Before(at) {
				oldest, at, first = k, t, false
			}
		}
		delete(b.seen, oldest)
	}
	b.seen[caller] = now
	b.peak = max(b.peak, len(b.seen))
}

func (b *callerBook) sweepLocked(now time.Time) {
	b.swept = now
	for k, at := range b.seen {
		if now.Sub(at) > b.idle {
			delete(b.seen, k)
		}
	}
	b.seen, b.peak = shrunk(b.seen, b.peak)
}

// forgetIdle forgets the callers idle too long now.
func (b *callerBook) forgetIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweepLocked(b.now())
}

// size is how many callers the book holds.
func (b *callerBook) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seen)
}

// newCallers is the name under which an address's callers the book does
// not know are counted together.
const newCallers = "new callers"
