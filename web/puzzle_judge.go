package web

import (
	"context"
	"errors"
	"sync"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

// puzzleJudge reads the events, and after each charge of the order of the
// puzzle under way asks the books how many charges the order has: two
// more than it had at the start solve the puzzle, with the steps counted
// by then; books that do not answer leave its outcome unknown. Every server of
// a class runs one; the first to write the room solves it.
type puzzleJudge struct {
	room    *room.Room[room.State]
	hub     *live.Hub
	charges func(ctx context.Context, scope, orderID string) (int, error)
	logf    func(format string, args ...any)
	start   sync.Once
}

// Start reads the events from now on until ctx ends; a second call does
// nothing. The server calls it at the room's first puzzle.
func (j *puzzleJudge) Start(ctx context.Context) {
	j.start.Do(func() {
		sub := j.hub.Subscribe(j.hub.LastSeq())
		go j.run(ctx, sub)
	})
}

func (j *puzzleJudge) run(ctx context.Context, sub *live.Subscription) {
	for {
		entries, err := sub.Next(ctx)
		if errors.Is(err, live.ErrTooSlow) {
			// Events were skipped: ask the books once, as a charge might
			// have been among them.
			sub = j.hub.Subscribe(j.hub.LastSeq())
			j.judge(ctx, "", "", true)
			continue
		}
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Kind == live.Charged || (e.Kind == live.Swept && e.Sweep == live.SweepCharged) {
				j.judge(ctx, e.Scope, e.OrderID, false)
			}
		}
	}
}

// judgeTimeout bounds the books' answer for one charge.
const judgeTimeout = 5 * time.Second

// judge asks the books for the charges of the puzzle's order, when the
// charge seen (scope, orderID) is of that order (or any, for anyway).
func (j *puzzleJudge) judge(ctx context.Context, scope, orderID string, anyway bool) {
	p, ok := j.room.Load().CurrentPuzzle()
	if !ok || p.Solved || (!anyway && (scope != p.Scope || orderID != p.OrderID)) {
		return
	}
	// The room is written with a bound of its own: books that timed out
	// are still said on the board.
	read, cancel := context.WithTimeout(ctx, judgeTimeout)
	n, err := j.charges(read, p.Scope, p.OrderID)
	cancel()
	ctx, cancel = context.WithTimeout(ctx, judgeTimeout)
	defer cancel()
	id := p.ID
	if err != nil {
		// The board says the outcome is unknown until a count succeeds;
		// the order's next charge asks again.
		j.logf("puzzle %d: counting the charges of its order: %v", id, err)
		_, _, _ = j.room.Change(ctx, func(s *room.State) error {
			if !s.BooksSilent(id) {
				return errNoCount
			}
			return nil
		})
		return
	}
	_, _, _ = j.room.Change(ctx, func(s *room.State) error {
		if !s.BooksCount(id, n) {
			return errNoCount
		}
		return nil
	})
}
