package web

import (
	"context"
	"sync"
	"time"

	"paytwice/web/room"
)

// guessLimiter slows down clients that keep sending wrong presenter
// tokens: each address may get guessBurst wrong in a row, then one more
// try every guessEvery. A right token costs nothing. It is a token bucket
// per address, in memory, bounded to guessMaxClients addresses: when
// they are all held, the address whose count is the most forgiven makes
// room, so that a new address (the presenter's first try among them) is
// never taken for one that used up its tries.
type guessLimiter struct {
	now     func() time.Time // injectable, so tests step it by hand
	burst   float64          // tries at once
	every   time.Duration    // one more try back after this
	mu      sync.Mutex
	clients map[string]*guessBucket
}

// The guess limit: five wrong tokens at once, then one every ten seconds,
// so guessing even a short token takes years.
const (
	guessBurst      = 5
	guessEvery      = 10 * time.Second
	guessMaxClients = 4096
)

type guessBucket struct {
	tries float64 // wrong tries still allowed
	at    time.Time
}

func newGuessLimiter(now func() time.Time) *guessLimiter {
	return &guessLimiter{now: now, burst: guessBurst, every: guessEvery, clients: map[string]*guessBucket{}}
}

// refill brings b up to date; callers hold mu.
func (l *guessLimiter) refill(b *guessBucket, now time.Time) {
	b.tries, b.at = l.refilled(b.tries, b.at, now), now
}

// refilled is how many tries a bucket that had tries at at has at now:
// those, and those come back since.
func (l *guessLimiter) refilled(tries float64, at, now time.Time) float64 {
	if elapsed := now.Sub(at); elapsed > 0 {
		return min(l.burst, tries+float64(elapsed)/float64(l.every))
	}
	return tries
}

// waitFor is how long a bucket with tries left must wait for one.
func (l *guessLimiter) waitFor(tries float64) time.Duration {
	if tries >= 1 {
		return 0
	}
	return time.Duration((1 - tries) * float64(l.every))
}

// wait is how long ip must wait before its next try is looked at: 0 when
// it may try now.
func (l *guessLimiter) wait(ip string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[ip]
	if !ok {
		return 0 // a new address has every try
	}
	l.refill(b, l.now())
	return l.waitFor(b.tries)
}

// try looks at ip's tries, and when one is left, compares with right
// and spends it on a wrong answer: all under l.mu, so that concurrent
// tries from one address never compare more than it has left.
func (l *guessLimiter) try(ip string, right func() bool) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, known := l.clients[ip]
	if known {
		l.refill(b, now)
		if wait := l.waitFor(b.tries); wait > 0 {
			return false, wait
		}
	}
	if right() {
		return true, 0
	}
	if !known {
		if len(l.clients) >= guessMaxClients && !l.pruneLocked() {
			l.evictLocked()
		}
		b = &guessBucket{tries: l.burst, at: now}
		l.clients[ip] = b
	}
	b.tries = max(0, b.tries-1)
	return false, 0
}

// fail records a wrong token from ip.
func (l *guessLimiter) fail(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.clients[ip]
	if !ok {
		if len(l.clients) >= guessMaxClients && !l.pruneLocked() {
			l.evictLocked()
		}
		b = &guessBucket{tries: l.burst, at: now}
		l.clients[ip] = b
	}
	l.refill(b, now)
	b.tries = max(0, b.tries-1)
}

// pruneLocked forgets addresses whose tries have all come back, and
// reports whether that made room.
func (l *guessLimiter) pruneLocked() bool {
	now := l.now()
	for ip, b := range l.clients {
		if l.refill(b, now); b.tries >= l.burst {
			delete(l.clients, ip)
		}
	}
	return len(l.clients) < guessMaxClients
}

// evictLocked forgets the address with the most tries back, the one
// closest to being forgotten anyway, to make room for a new one.
func (l *guessLimiter) evictLocked() {
	now := l.now()
	var best string
	most := -1.0
	for ip, b := range l.clients {
		if t := l.refilled(b.tries, b.at, now); t > most {
			best, most = ip, t
		}
	}
	delete(l.clients, best)
}

// The presenter's wrong-token limit is one count for the room: on servers
// that share a database (behind paytwice cluster's front door, or any
// load balancer) a wrong token sent to one server counts on every one,
// kept by room.Peers; a server on its own keeps the count in its memory.
// When the database cannot be reached, a server counts in its memory
// meanwhile, so that guessing is never free.

// guessTimeout bounds a look at the shared count. The request's own
// context is not used as it is: a guesser that hangs up at once must not
// cancel the counting of its guess.
const guessTimeout = 5 * time.Second

// guessTry looks at ip's count, and when a try is left, compares with
// right and counts a wrong token: one step, under one lock. With servers
// sharing a database the lock is the client's row (room.Peers'
// UpdateGuesses holds it across the change), so guesses sent to several
// servers at once wait on one another and at most the limit are ever
// compared; on its own a server holds its limiter's mutex. The count
// this server kept while the database was away is looked at first.
func (s *Server) guessTry(ctx context.Context, ip string, right func() bool) (ok bool, wait time.Duration) {
	l := s.presenter.tries
	if !s.peers.Shared() {
		return l.try(ip, right)
	}
	if wait := l.wait(ip); wait > 0 {
		return false, wait
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), guessTimeout)
	defer cancel()
	now := l.now()
	// A count last changed a whole refill ago is full again: forgotten.
	full := time.Duration(l.burst * float64(l.every))
	err := s.peers.UpdateGuesses(ctx, ip, now.Add(-full), func(old room.Guesses, known bool) room.Guesses {
		tries := l.burst
		if known {
			tries = l.refilled(old.Left, old.At, now)
		}
		ok, wait = false, l.waitFor(tries)
		switch {
		case wait > 0:
			return old // not looked at: the count stays as it was
		case right():
			ok = true
			return room.Guesses{Left: tries, At: now}
		default:
			return room.Guesses{Left: max(0, tries-1), At: now}
		}
	})
	if err != nil {
		s.logf("paytwice: counting presenter tokens for the room: %v; counting on this server meanwhile", err)
		return l.try(ip, right)
	}
	return ok, wait
}
