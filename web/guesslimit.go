package web

import (
	"context"
	"sync"
	"time"

	"paytwice/pay"
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

// remember keeps what the shared count answered for ip at now: left
// tries, or fewer when this server counted more meanwhile (the lower of
// the two is the one that holds, as tries are only ever spent elsewhere).
func (l *guessLimiter) remember(ip string, left float64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[ip]
	if !ok {
		if left >= l.burst {
			return // a full count is what an unknown address has
		}
		if len(l.clients) >= guessMaxClients && !l.pruneLocked() {
			l.evictLocked()
		}
		l.clients[ip] = &guessBucket{tries: left, at: now}
		return
	}
	l.refill(b, now)
	b.tries = min(b.tries, left)
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
// When the shared count cannot be read or written, the token is not
// looked at: the client is asked to come back (errGuessesUnavailable).
// Counting on this server meanwhile would let every server of a cluster
// compare its own limit, so that a client spreading its guesses over
// three servers would get three times the tries.

// guessTimeout bounds a look at the shared count, lock waits included.
// The request's own context is not used as it is: a guesser that hangs up
// at once must not cancel the counting of its guess.
const guessTimeout = 5 * time.Second

// errGuessesUnavailable refuses a token whose count could not be read:
// a 503 with Retry-After, the token not compared.
var errGuessesUnavailable = pay.Errorf(pay.EUNAVAILABLE, "The count of wrong presenter tokens, which the servers of this class share, could not be read just now, so the token was not looked at. Try again after the Retry-After seconds.")

// guessTry looks at ip's count, and when a try is left, compares with
// right and counts a wrong token: one step, under one lock. With servers
// sharing a database the lock is the client's row (room.Peers'
// UpdateGuesses holds it across the change), so guesses sent to several
// servers at once wait on one another and at most the limit are ever
// compared; on its own a server holds its limiter's mutex. When the
// shared count fails, right is not called and the answer is
// errGuessesUnavailable.
//
// What the shared count last answered for ip is kept in g.tries (a
// mirror, see remember): an address this server knows to be out of tries
// is refused from memory, without a transaction. That is safe because
// the other servers only ever spend tries, never give them back: the
// count in the database can only be lower than the mirror. One guess per
// address at a time goes to the database (guessTurns), the others wait
// for it in memory, a few at most, and guessDBSlots bound the
// connections all guesses hold at once, so a client looping on wrong
// tokens never takes the pool's connections from the payments.
func (g *presenterGate) guessTry(ctx context.Context, ip string, right func() bool) (ok bool, wait time.Duration, err error) {
	l := g.tries
	if !g.guesses.Shared() {
		ok, wait = l.try(ip, right)
		return ok, wait, nil
	}
	if wait := l.wait(ip); wait > 0 {
		return false, wait, nil
	}
	timeout := g.guessTimeout
	if timeout <= 0 {
		timeout = guessTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	release, turn := g.turns.take(ctx, ip)
	if !turn {
		return false, guessBusyWait, nil
	}
	defer release()
	// The guess before this one may have used the last try.
	if wait := l.wait(ip); wait > 0 {
		return false, wait, nil
	}
	select {
	case g.dbSlots <- struct{}{}:
		defer func() { <-g.dbSlots }()
	case <-ctx.Done():
		return false, guessBusyWait, nil
	}
	now := l.now()
	// A count last changed a whole refill ago is full again: forgotten.
	full := time.Duration(l.burst * float64(l.every))
	var left float64
	err = g.guesses.UpdateGuesses(ctx, ip, now.Add(-full), func(old room.Guesses, known bool) room.Guesses {
		tries := l.burst
		if known {
			tries = l.refilled(old.Left, old.At, now)
		}
		ok, wait, left = false, l.waitFor(tries), tries
		switch {
		case wait > 0:
			return old // not looked at: the count stays as it was
		case right():
			ok = true
			return room.Guesses{Left: tries, At: now}
		default:
			left = max(0, tries-1)
			return room.Guesses{Left: left, At: now}
		}
	})
	if err != nil {
		// A change whose commit failed may have compared the token; its
		// answer is this refusal all the same, so the client learns
		// nothing from that comparison, right token or wrong.
		g.logf("paytwice: counting presenter tokens for the room: %v; answered 503, the token not taken", err)
		return false, 0, errGuessesUnavailable
	}
	l.remember(ip, left, now)
	return ok, wait, nil
}

// guessBusyWait is the Retry-After of a guess refused because its
// address has more guesses waiting than guessWaitersPerAddress, or
// because its turn did not come within the bound of a look.
const guessBusyWait = time.Second

// guessDBSlots bounds the transactions on the shared count at once, from
// every address together: a small part of a pool (16 connections by
// default), so that the payments always find a connection.
const guessDBSlots = 2

// guessWaitersPerAddress bounds the guesses of one address that wait in
// memory for the one it has at the database; those past it are refused
// at once (429).
const guessWaitersPerAddress = 8

// guessTurns lets one guess per address at a time go to the shared
// count. An address's entry lives while a guess of it holds or waits for
// the turn, so the table holds no more than the guesses in flight.
type guessTurns struct {
	mu    sync.Mutex
	turns map[string]*guessTurn
}

type guessTurn struct {
	slot  chan struct{} // holds one value while a guess has the turn
	users int           // the guess with the turn and those waiting
}

// take waits for ip's turn until ctx ends; ok is false when it did not
// come or too many wait already. release gives the turn back.
func (t *guessTurns) take(ctx context.Context, ip string) (release func(), ok bool) {
	t.mu.Lock()
	if t.turns == nil {
		t.turns = map[string]*guessTurn{}
	}
	turn := t.turns[ip]
	if turn == nil {
		turn = &guessTurn{slot: make(chan struct{}, 1)}
		t.turns[ip] = turn
	}
	if turn.users > guessWaitersPerAddress {
		t.mu.Unlock()
		return nil, false
	}
	turn.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if turn.users--; turn.users == 0 {
			delete(t.turns, ip)
		}
		t.mu.Unlock()
	}
	select {
	case turn.slot <- struct{}{}:
		return func() { <-turn.slot; leave() }, true
	case <-ctx.Done():
		leave()
		return nil, false
	}
}
