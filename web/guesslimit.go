package web

import (
	"sync"
	"time"
)

// guessLimiter slows down clients that keep sending wrong presenter
// tokens: each address may get guessBurst wrong in a row, then one more
// try every guessEvery. A right token costs nothing. It is a token bucket
// per address, in memory, bounded to guessMaxClients addresses. The same
// kind of bucket, with its own sizes, bounds how often one address opens
// event streams (newStreamLimiter).
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

// The event streams' limit per address: opening one costs a drawing of
// every panel, so a client that reconnects in a loop could keep a core
// busy. A classroom behind one address (or a load generator with its
// viewers) opens a few hundred at once, then ten a second, far more than
// pages that reconnect after a dropped connection need and a few percent
// of a core at most.
const (
	streamOpenBurst = 250
	streamOpenEvery = 100 * time.Millisecond
)

func newStreamLimiter(now func() time.Time) *guessLimiter {
	return &guessLimiter{now: now, burst: streamOpenBurst, every: streamOpenEvery, clients: map[string]*guessBucket{}}
}

// take uses one try of ip's, when it has one, and otherwise says how long
// until it has.
func (l *guessLimiter) take(ip string) time.Duration {
	if d := l.wait(ip); d > 0 {
		return d
	}
	l.fail(ip)
	return 0
}

// refill brings b up to date; callers hold mu.
func (l *guessLimiter) refill(b *guessBucket, now time.Time) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tries = min(l.burst, b.tries+float64(elapsed)/float64(l.every))
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
			return l.every
		}
		return 0
	}
	now := l.now()
	l.refill(b, now)
	if b.tries >= 1 {
		return 0
	}
	return time.Duration((1 - b.tries) * float64(l.every))
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
