package web

import (
	"sync"
	"time"
)

// guessLimiter slows down clients that keep sending wrong presenter
// tokens: each address may get guessBurst wrong in a row, then one more
// try every guessEvery. A right token costs nothing. It is a token bucket
// per address, in memory, bounded to guessMaxClients addresses.
type guessLimiter struct {
	now     func() time.Time // injectable, so tests step it by hand
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
	return &guessLimiter{now: now, clients: map[string]*guessBucket{}}
}

// refill brings b up to date; callers hold mu.
func (l *guessLimiter) refill(b *guessBucket, now time.Time) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tries = min(guessBurst, b.tries+float64(elapsed)/float64(guessEvery))
	}
	b.at = now
}

// wait is how long ip must wait before its next try is looked at: 0 when
// it may try now.
func (l *guessLimiter) wait(ip string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[ip]
	if !ok {
		if len(l.clients) >= guessMaxClients && !l.pruneLocked() {
			// Under a spray from more addresses than it keeps, a new
			// address waits like one that has used up its tries.
			return guessEvery
		}
		return 0
	}
	now := l.now()
	l.refill(b, now)
	if b.tries >= 1 {
		return 0
	}
	return time.Duration((1 - b.tries) * float64(guessEvery))
}

// fail records a wrong token from ip.
func (l *guessLimiter) fail(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.clients[ip]
	if !ok {
		if len(l.clients) >= guessMaxClients && !l.pruneLocked() {
			return
		}
		b = &guessBucket{tries: guessBurst, at: now}
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
		if l.refill(b, now); b.tries >= guessBurst {
			delete(l.clients, ip)
		}
	}
	return len(l.clients) < guessMaxClients
}
