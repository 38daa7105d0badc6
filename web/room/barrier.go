package room

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"paytwice/pay"
)

// A reset's barrier: with several servers on one database, a reset empties
// tables every server writes to. A payment on another server that charged
// the gateway before the tables were emptied and saved its charge after
// would leave the books unbalanced (a local charge the gateway's emptied
// ledger no longer has), so the reset waits for every server's payments in
// flight, not only its own (the server's in-flight lock, which every
// payment holds shared).
//
// It goes through the room, which every server follows already:
//
//  1. The resetting server writes a barrier into the room: generation N,
//     by whom, and until when it may hold the others.
//  2. Every other server, on seeing it, lets step mode's held requests go
//     (they hold its in-flight lock), takes its in-flight lock (so it waits
//     for its payments and admits no new one), writes its acknowledgement
//     of N into the room, and keeps the lock until the barrier is gone.
//  3. The resetting server, holding its own in-flight lock, waits until
//     every live server has acknowledged, empties the tables and writes the
//     room's defaults without the barrier, which lets the others go.
//
// Live servers are the sessions that follow the room, which PostgreSQL
// itself lists (pg_stat_activity): a server that died, or whose listening
// connection is down, is not waited for, since it could not answer. Every
// wait is bounded: the resetting server waits for acknowledgements for the
// gateway time-out (which bounds a payment's work once step mode lets it
// go) plus resetAckMargin, then goes on and logs who did not answer; the
// others hold until the barrier's Until, so a resetting server that died
// holds nobody for longer. Resets asked for on two servers at once run one
// after the other: a barrier is written only where none is under way.
//
// A server on its own (SQLite) has no barrier: its in-flight lock is
// every payment's.

// Barriers is one server's side of the reset barrier: the resetting side
// (StartReset, AwaitAcks) and the side that joins another server's reset
// (Applied). The server gives it what it needs of itself as fields.
type Barriers struct {
	// Room is the server's room; Name its name.
	Room *Room[State]
	Name string
	// AckWait is how long a reset waits for the others'
	// acknowledgements: the gateway time-out, which bounds a payment's
	// work once step mode lets it go, plus ResetAckMargin.
	AckWait time.Duration
	// Quiesce lets the server's held requests go, then takes its
	// in-flight lock, which waits for its payments in flight and admits
	// no new one, until release.
	Quiesce func(by string) (release func())
	Logf    func(format string, args ...any)
	// Now is the real time the barrier's bounds are measured by; nil
	// means the wall clock. Its timers still run on the wall clock, so a
	// Now moved ahead is noticed within resetPoll or reloadEvery.
	Now func() time.Time

	// joined is the last barrier this server took part in (Applied runs
	// under the room's lock).
	joined uint64
}

const (
	// ResetAckMargin is how long, beyond the gateway time-out, a reset
	// waits for the other servers' acknowledgements: time to hear of the
	// barrier, let held requests go and write the acknowledgement.
	ResetAckMargin = 2 * time.Second
	// resetHoldMargin is how long, beyond that wait, the others hold their
	// payments at most: time to empty the tables and end the barrier.
	resetHoldMargin = 5 * time.Second
	// resetPoll is how often a reset that waits for acknowledgements looks
	// at who is live: a server may join or go meanwhile.
	resetPoll = 20 * time.Millisecond
	// resetBusyAttempts bounds how often a reset waits for another one
	// under way before it gives up.
	resetBusyAttempts = 3
)

// now is the time by the barrier's clock.
func (s *Barriers) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// errResetBusy is the room edit's refusal to start a barrier while
// another one is under way.
var errResetBusy = errors.New("another reset is under way")

// errNoChange is the room edit's way to write nothing.
var errNoChange = errors.New("no change")

// barrier returns the barrier under way and the channel closed at the
// next state applied.
func (s *Barriers) barrier() (*Barrier, <-chan struct{}) {
	st, _, changed := s.Room.Watch()
	return st.Barrier, changed
}

// barrierOpen reports whether barrier gen is still under way here.
func (s *Barriers) barrierOpen(gen uint64) bool {
	b, _ := s.barrier()
	return b != nil && b.Gen == gen
}

// StartReset writes a barrier of this server's into the room and returns
// it. While another server's barrier is under way it waits for it to end
// (a few times at most), then writes its own.
func (s *Barriers) StartReset(ctx context.Context) (Barrier, error) {
	r := s.Room
	for attempt := 1; ; attempt++ {
		var mine Barrier
		var busy Barrier
		_, _, err := r.Change(ctx, func(st *State) error {
			now := s.now()
			if b := st.Barrier; b != nil && now.Before(b.Until) {
				busy = *b
				return errResetBusy
			}
			st.ResetGen++
			mine = Barrier{Gen: st.ResetGen, By: r.ID(), ByName: s.Name,
				Until: now.Add(s.AckWait + resetHoldMargin)}
			st.Barrier = &mine
			return nil
		})
		if !errors.Is(err, errResetBusy) {
			return mine, err
		}
		if attempt == resetBusyAttempts {
			return mine, pay.Errorf(pay.EUNAVAILABLE, "Another reset is under way on %s; try again in a moment.", nameOr(busy.ByName))
		}
		r.Reload(ctx) // the barrier may not have reached this server yet
		if err := s.awaitEnd(ctx, busy.Gen, busy.Until); err != nil {
			return mine, err
		}
	}
}

// AwaitAcks waits until every other live server has acknowledged barrier
// b, for AckWait at most since the barrier was written (the wait for
// this server's own payments counts in it: the others hold theirs only
// until b.Until); it returns the names of the live servers that did not
// answer.
func (s *Barriers) AwaitAcks(ctx context.Context, b Barrier) []string {
	r := s.Room
	deadline := b.Until.Add(-resetHoldMargin)
	for {
		members, err := r.Members(ctx)
		r.Reload(ctx) // the acknowledgements, even when a notification was lost
		var missing []string
		if err != nil {
			s.Logf("reset: who follows the room: %v", err)
		}
		cur, changed := s.barrier()
		for _, m := range members {
			id, name, _ := strings.Cut(m, " ")
			if id == r.ID() || (cur != nil && cur.Gen == b.Gen && slices.Contains(cur.Acks, id)) {
				continue
			}
			missing = append(missing, nameOr(name))
		}
		if err == nil && len(missing) == 0 {
			return nil
		}
		wait := deadline.Sub(s.now())
		if wait <= 0 || ctx.Err() != nil {
			return missing
		}
		t := time.NewTimer(min(wait, resetPoll))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// Applied joins another server's reset when next, the room's state the
// server just applied, has a barrier it has not joined yet; the room's
// lock is held, so it joins on a goroutine of its own, until ctx ends.
func (s *Barriers) Applied(ctx context.Context, next State) {
	if b := next.Barrier; b != nil && b.By != s.Room.ID() && b.Gen > s.joined {
		s.joined = b.Gen
		go s.join(ctx, *b)
	}
}

// join is another server's side of barrier b: let step mode's held
// requests go, wait for this server's payments in flight while admitting
// no new one, acknowledge, and hold until the barrier ends or its time is
// up.
func (s *Barriers) join(ctx context.Context, b Barrier) {
	r := s.Room
	// Held requests hold the in-flight lock: Quiesce lets them go first.
	release := s.Quiesce("reset on " + nameOr(b.ByName))
	defer release()
	if !s.barrierOpen(b.Gen) || !s.now().Before(b.Until) {
		return // over already, or its server went on without us
	}
	_, _, err := r.Change(ctx, func(st *State) error {
		cur := st.Barrier
		if cur == nil || cur.Gen != b.Gen || slices.Contains(cur.Acks, r.ID()) {
			return errNoChange
		}
		cur.Acks = append(slices.Clip(cur.Acks), r.ID())
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		if ctx.Err() == nil {
			s.Logf("reset on %s: acknowledging: %v", nameOr(b.ByName), err)
		}
		return
	}
	_ = s.awaitEnd(ctx, b.Gen, b.Until)
}

// awaitEnd waits until barrier gen is no longer under way, or until is
// past. It reloads the room now and then, so that a notification lost
// with a listening connection does not hold payments until then.
func (s *Barriers) awaitEnd(ctx context.Context, gen uint64, until time.Time) error {
	const reloadEvery = 500 * time.Millisecond
	for {
		if !s.barrierOpen(gen) {
			return nil
		}
		_, changed := s.barrier()
		wait := until.Sub(s.now())
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(min(wait, reloadEvery))
		select {
		case <-changed:
		case <-t.C:
			s.Room.Reload(ctx)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// nameOr is a server's name for a message, "another server" when it has
// none.
func nameOr(name string) string {
	if name == "" {
		return "another server"
	}
	return name
}
