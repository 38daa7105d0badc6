package web

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"paytwice/pay"
	"paytwice/web/room"
)

// A reset's barrier: with several servers on one database, a reset empties
// tables every server writes to. A payment on another server that charged
// the gateway before the tables were emptied and saved its charge after
// would leave the books unbalanced (a local charge the gateway's emptied
// ledger no longer has), so the reset waits for every server's payments in
// flight, not only its own (resetDemo's in-flight lock).
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

const (
	// resetAckMargin is how long, beyond the gateway time-out, a reset
	// waits for the other servers' acknowledgements: time to hear of the
	// barrier, let held requests go and write the acknowledgement.
	resetAckMargin = 2 * time.Second
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

// errResetBusy is the room edit's refusal to start a barrier while
// another one is under way.
var errResetBusy = errors.New("another reset is under way")

// errNoChange is the room edit's way to write nothing.
var errNoChange = errors.New("no change")

// resetAckWait is how long a reset waits for the others' acknowledgements.
func (s *Server) resetAckWait() time.Duration { return s.cfg.GatewayTimeout + resetAckMargin }

// barrier returns the barrier under way and the channel closed at the
// next state applied.
func (s *Server) barrier() (*room.Barrier, <-chan struct{}) {
	st, _, changed := s.room.Watch()
	return st.Barrier, changed
}

// open reports whether barrier gen is still under way here.
func (s *Server) barrierOpen(gen uint64) bool {
	b, _ := s.barrier()
	return b != nil && b.Gen == gen
}

// startReset writes a barrier of this server's into the room and returns
// it. While another server's barrier is under way it waits for it to end
// (a few times at most), then writes its own.
func (s *Server) startReset(ctx context.Context) (room.Barrier, error) {
	r := s.room
	for attempt := 1; ; attempt++ {
		var mine room.Barrier
		var busy room.Barrier
		_, _, err := s.room.Change(ctx, func(st *room.State) error {
			now := time.Now()
			if b := st.Barrier; b != nil && now.Before(b.Until) {
				busy = *b
				return errResetBusy
			}
			st.ResetGen++
			mine = room.Barrier{Gen: st.ResetGen, By: r.ID(), ByName: s.cfg.Name,
				Until: now.Add(s.resetAckWait() + resetHoldMargin)}
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

// awaitAcks waits until every other live server has acknowledged barrier
// b, for resetAckWait at most since the barrier was written (the wait for
// this server's own payments counts in it: the others hold theirs only
// until b.Until); it returns the names of the live servers that did not
// answer.
func (s *Server) awaitAcks(ctx context.Context, b room.Barrier) []string {
	r := s.room
	deadline := b.Until.Add(-resetHoldMargin)
	for {
		members, err := r.Members(ctx)
		r.Reload(ctx) // the acknowledgements, even when a notification was lost
		var missing []string
		if err != nil {
			s.logf("reset: who follows the room: %v", err)
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
		wait := time.Until(deadline)
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

// joinReset is another server's side of barrier b: let step mode's held
// requests go, wait for this server's payments in flight while admitting
// no new one, acknowledge, and hold until the barrier ends or its time is
// up.
func (s *Server) joinReset(b room.Barrier) {
	ctx, r := s.baseCtx, s.room
	// Held requests hold the in-flight lock: let them go first.
	s.steps.turn(false, "reset on "+nameOr(b.ByName))
	s.inflight.Lock()
	defer s.inflight.Unlock()
	if !s.barrierOpen(b.Gen) || !time.Now().Before(b.Until) {
		return // over already, or its server went on without us
	}
	_, _, err := s.room.Change(ctx, func(st *room.State) error {
		cur := st.Barrier
		if cur == nil || cur.Gen != b.Gen || slices.Contains(cur.Acks, r.ID()) {
			return errNoChange
		}
		cur.Acks = append(slices.Clip(cur.Acks), r.ID())
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		if ctx.Err() == nil {
			s.logf("reset on %s: acknowledging: %v", nameOr(b.ByName), err)
		}
		return
	}
	_ = s.awaitEnd(ctx, b.Gen, b.Until)
}

// awaitEnd waits until barrier gen is no longer under way, or until is
// past. It reloads the room now and then, so that a notification lost
// with a listening connection does not hold payments until then.
func (s *Server) awaitEnd(ctx context.Context, gen uint64, until time.Time) error {
	const reloadEvery = 500 * time.Millisecond
	for {
		if !s.barrierOpen(gen) {
			return nil
		}
		_, changed := s.barrier()
		wait := time.Until(until)
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(min(wait, reloadEvery))
		select {
		case <-changed:
		case <-t.C:
			s.room.Reload(ctx)
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
