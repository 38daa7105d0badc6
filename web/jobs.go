package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// RunJobs prunes and sweeps periodically until ctx ends. The start-up
// sweep is SweepOrphans, which the caller runs before serving. While no
// key can be started the sweep ticker stops, and the next claim starts it
// again (idle.go).
func (s *Server) RunJobs(ctx context.Context) {
	prune := time.NewTicker(s.cfg.PruneEvery)
	sweep := time.NewTicker(s.cfg.SweepEvery)
	forget := time.NewTicker(max(time.Second, s.cfg.Limits.IdleAfter/4))
	defer prune.Stop()
	defer sweep.Stop()
	defer forget.Stop()
	sweeping := true
	for {
		var sweepC <-chan time.Time
		var wakeC <-chan struct{}
		if sweeping {
			sweepC = sweep.C
		} else {
			wakeC = s.payments.idleSweeps.wake
		}
		select {
		case <-ctx.Done():
			return
		case <-forget.C:
			s.admission.forgetIdleClients()
		case <-prune.C:
			if _, err := s.Prune(ctx); err != nil && ctx.Err() == nil {
				s.logf("prune: %v", err)
			}
		case <-wakeC:
			sweep.Reset(s.cfg.SweepEvery)
			sweeping = true
		case <-sweepC:
			if _, err := s.periodicSweep(ctx); err != nil && ctx.Err() == nil {
				s.logf("sweep: %v", err)
			}
			if s.payments.idleSweeps.idle() {
				sweep.Stop()
				sweeping = false
			}
		}
	}
}

// Sweep closes the keys started longer ago than the lock timeout, asking
// the gateway what happened to each, and publishes one event per key.
func (s *Server) Sweep(ctx context.Context) ([]pay.SweepOutcome, error) {
	return s.sweep(ctx, s.cfg.LockTimeout)
}

// SweepOrphans closes every started key whatever its age. It is only
// right before this process has served a request: at start-up no request
// of ours is running, so every started key was left by a crash and waiting
// out the lock timeout would only make its client see 409s for longer.
func (s *Server) SweepOrphans(ctx context.Context) ([]pay.SweepOutcome, error) {
	// A cutoff in the future, not "now": a key locked in the current
	// millisecond, or stamped before the wall clock stepped back, is an
	// orphan too.
	return s.sweep(ctx, -orphanHorizon)
}

// Orphans lists what SweepOrphans would close, without closing it: every
// started key, found before this process takes its first request, so
// that the server can serve at once and close them with SweepFound while
// it does. Found then, none of them can be a request of this process.
func (s *Server) Orphans(ctx context.Context) ([]pay.KeyRow, error) {
	return s.db.StartedBefore(ctx, s.clock.Now().Add(orphanHorizon))
}

// SweepFound closes the keys Orphans found, each through the claim it was
// found with: a key a request has since claimed afresh (after a client's
// retry met it and a sweep elsewhere released it) is not touched.
func (s *Server) SweepFound(ctx context.Context, rows []pay.KeyRow) ([]pay.SweepOutcome, error) {
	return s.sweepWith(ctx, func(ctx context.Context) ([]pay.SweepOutcome, error) { return s.payments.protocol.SweepRows(ctx, rows) })
}

// orphanHorizon is how far ahead of now the start-up sweep looks.
const orphanHorizon = 24 * time.Hour

func (s *Server) sweep(ctx context.Context, olderThan time.Duration) ([]pay.SweepOutcome, error) {
	return s.sweepWith(ctx, func(ctx context.Context) ([]pay.SweepOutcome, error) {
		return s.payments.protocol.Sweep(ctx, olderThan)
	})
}

func (s *Server) sweepWith(ctx context.Context, sweep func(context.Context) ([]pay.SweepOutcome, error)) ([]pay.SweepOutcome, error) {
	// A reset waits for a sweep under way, as it does for payments: a
	// sweep must not record a charge the reset has just erased.
	s.payments.inflight.RLock()
	resets := s.room.Load().Resets
	outcomes, err := sweep(ctx)
	s.payments.inflight.RUnlock()
	s.countSwept(ctx, resets, closedBy(outcomes))
	for _, o := range outcomes {
		e := live.Event{Kind: live.Swept, Scope: o.Row.Scope, Key: o.Row.Key, OrderID: o.Row.OrderID, Amount: o.Row.AmountSatang,
			Fingerprint: o.Row.Fingerprint}
		e.Sweep = sweepResult(o)
		switch e.Sweep {
		case live.SweepFailed:
			e.Message = "could not close the stuck key: " + pay.ErrorMessage(o.Err)
		case live.SweepCharged:
			e.Status, e.Charge = http.StatusCreated, o.Charge.ID
			e.Message = "the gateway had charged: charge " + o.Charge.ID + " recorded, key done with 201"
		default:
			e.Message = "the gateway had not charged: key released, a retry runs afresh"
		}
		s.hub.Publish(e)
	}
	return outcomes, err
}

// countSwept adds n keys closed by a sweep to the room's count, unless a
// reset came after the sweep began (resets is the room's count of resets
// then): the reset cleared what it closed, and starts the count at zero.
// The count is the room's, in the store, so a restart keeps it.
func (s *Server) countSwept(ctx context.Context, resets uint64, n int) {
	if n == 0 {
		return
	}
	_, _, err := s.room.Change(context.WithoutCancel(ctx), func(r *room.State) error {
		if r.Resets != resets {
			return errNoRoomChange
		}
		r.Swept += uint64(n)
		return nil
	})
	if err != nil && !errors.Is(err, errNoRoomChange) {
		s.logf("sweep: counting %d closed key(s) in the room: %v", n, err)
	}
}

// errNoRoomChange is an edit's way to write nothing to the room.
var errNoRoomChange = errors.New("no change to the room")

// closedBy counts the keys a sweep closed: all but those it failed on.
func closedBy(outcomes []pay.SweepOutcome) int {
	n := 0
	for _, o := range outcomes {
		if o.Err == nil {
			n++
		}
	}
	return n
}

// sweepResult is what the sweeper did with one stuck key, as both the
// live event and POST /api/sweep's report name it.
func sweepResult(o pay.SweepOutcome) live.SweepResult {
	switch {
	case o.Err != nil:
		return live.SweepFailed
	case o.Charged:
		return live.SweepCharged
	}
	return live.SweepReleased
}

// Prune deletes done keys older than the retention and publishes what it
// removed.
func (s *Server) Prune(ctx context.Context) (int, error) {
	// A prune that stopped part way (shutdown) deleted keys all the same:
	// the pages hear of those.
	pruned, err := s.db.Prune(ctx, s.clock.Now().Add(-s.cfg.Retention))
	if pruned.Keys > 0 {
		s.lab.tablesChanged() // a pruned key no longer says it saved a 500
		e := live.Event{Kind: live.Pruned, Message: fmt.Sprintf("%d done key(s) older than %s pruned", pruned.Keys, s.cfg.Retention)}
		if pruned.Keys == 1 {
			e.Scope, e.Key = pruned.First.Scope, pruned.First.Key
		}
		s.hub.Publish(e)
	}
	return pruned.Keys, err
}
