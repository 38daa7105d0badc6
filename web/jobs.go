package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// Jobs is the server's background work on the keys: the sweeper, which
// closes the keys a request left started, and the pruner, which deletes
// done keys past their retention. main runs them (Run) after the start-up
// sweep; the presenter's endpoints and the tests call them on demand.
type Jobs struct {
	*keySweeper
	keyPruner
	// forgetIdleClients forgets the fair shares' idle clients
	// (requestlimits.go).
	forgetIdleClients func()
	every             jobPeriods
	logf              func(format string, args ...any)
}

// jobPeriods are how often the jobs run.
type jobPeriods struct {
	prune, sweep, forget time.Duration
}

// Jobs are the server's background jobs.
func (s *Server) Jobs() *Jobs {
	return &Jobs{keySweeper: s.keySweeper(), keyPruner: keyPruner{store: s.db, now: s.clock.Now, retention: s.cfg.Retention, timeline: s.hub, lab: s.lab},
		forgetIdleClients: s.admission.forgetIdleClients,
		every:             jobPeriods{prune: s.cfg.PruneEvery, sweep: s.cfg.SweepEvery, forget: max(time.Second, s.cfg.Limits.IdleAfter/4)},
		logf:              s.logf}
}

// Run prunes and sweeps periodically until ctx ends. The start-up sweep
// is SweepOrphans, which the caller runs before serving. While no key can
// be started the sweep ticker stops, and the next claim starts it again
// (idle.go).
func (j *Jobs) Run(ctx context.Context) {
	prune := time.NewTicker(j.every.prune)
	sweep := time.NewTicker(j.every.sweep)
	forget := time.NewTicker(j.every.forget)
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
			wakeC = j.idle.wake
		}
		select {
		case <-ctx.Done():
			return
		case <-forget.C:
			j.forgetIdleClients()
		case <-prune.C:
			if _, err := j.Prune(ctx); err != nil && ctx.Err() == nil {
				j.logf("prune: %v", err)
			}
		case <-wakeC:
			sweep.Reset(j.every.sweep)
			sweeping = true
		case <-sweepC:
			if _, err := j.periodicSweep(ctx); err != nil && ctx.Err() == nil {
				j.logf("sweep: %v", err)
			}
			if j.idle.idle() {
				sweep.Stop()
				sweeping = false
			}
		}
	}
}

// keySweeper closes the keys started longer ago than the lock timeout,
// asking the gateway what happened to each, and tells the timeline and
// the room's count of what it closed.
type keySweeper struct {
	protocol *pay.Service
	// keys finds the started keys (Orphans, and the idle check).
	keys startedKeys
	// inflight is held shared by every payment and the sweeper, and
	// exclusively by a reset, which so waits for them (admin.go).
	inflight *sync.RWMutex
	// room keeps the count of the keys closed since the last reset.
	room        *room.Room[room.State]
	timeline    timeline
	idle        *idleSweeps
	now         func() time.Time
	lockTimeout time.Duration
	logf        func(format string, args ...any)
}

// startedKeys is where the sweeper finds the started keys.
type startedKeys interface {
	StartedBefore(ctx context.Context, cutoff time.Time) ([]pay.KeyRow, error)
}

// keySweeper is the server's sweeper.
func (s *Server) keySweeper() *keySweeper {
	return &keySweeper{protocol: s.payments.protocol, keys: s.db, inflight: &s.payments.inflight, room: s.room, timeline: s.hub,
		idle: s.payments.idleSweeps, now: s.clock.Now, lockTimeout: s.cfg.LockTimeout, logf: s.logf}
}

// Sweep closes the keys started longer ago than the lock timeout, asking
// the gateway what happened to each, and publishes one event per key.
func (ks *keySweeper) Sweep(ctx context.Context) ([]pay.SweepOutcome, error) {
	return ks.sweep(ctx, ks.lockTimeout)
}

// SweepOrphans closes every started key whatever its age. It is only
// right before this process has served a request: at start-up no request
// of ours is running, so every started key was left by a crash and waiting
// out the lock timeout would only make its client see 409s for longer.
func (ks *keySweeper) SweepOrphans(ctx context.Context) ([]pay.SweepOutcome, error) {
	// A cutoff in the future, not "now": a key locked in the current
	// millisecond, or stamped before the wall clock stepped back, is an
	// orphan too.
	return ks.sweep(ctx, -orphanHorizon)
}

// Orphans lists what SweepOrphans would close, without closing it: every
// started key, found before this process takes its first request, so
// that the server can serve at once and close them with SweepFound while
// it does. Found then, none of them can be a request of this process.
func (ks *keySweeper) Orphans(ctx context.Context) ([]pay.KeyRow, error) {
	return ks.keys.StartedBefore(ctx, ks.now().Add(orphanHorizon))
}

// SweepFound closes the keys Orphans found, each through the claim it was
// found with: a key a request has since claimed afresh (after a client's
// retry met it and a sweep elsewhere released it) is not touched.
func (ks *keySweeper) SweepFound(ctx context.Context, rows []pay.KeyRow) ([]pay.SweepOutcome, error) {
	return ks.sweepWith(ctx, func(ctx context.Context) ([]pay.SweepOutcome, error) { return ks.protocol.SweepRows(ctx, rows) })
}

// orphanHorizon is how far ahead of now the start-up sweep looks.
const orphanHorizon = 24 * time.Hour

func (ks *keySweeper) sweep(ctx context.Context, olderThan time.Duration) ([]pay.SweepOutcome, error) {
	return ks.sweepWith(ctx, func(ctx context.Context) ([]pay.SweepOutcome, error) {
		return ks.protocol.Sweep(ctx, olderThan)
	})
}

func (ks *keySweeper) sweepWith(ctx context.Context, sweep func(context.Context) ([]pay.SweepOutcome, error)) ([]pay.SweepOutcome, error) {
	// A reset waits for a sweep under way, as it does for payments: a
	// sweep must not record a charge the reset has just erased.
	ks.inflight.RLock()
	resets := ks.room.Load().Resets
	outcomes, err := sweep(ctx)
	ks.inflight.RUnlock()
	ks.countSwept(ctx, resets, closedBy(outcomes))
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
		ks.timeline.Publish(e)
	}
	return outcomes, err
}

// countSwept adds n keys closed by a sweep to the room's count, unless a
// reset came after the sweep began (resets is the room's count of resets
// then): the reset cleared what it closed, and starts the count at zero.
// The count is the room's, in the store, so a restart keeps it.
func (ks *keySweeper) countSwept(ctx context.Context, resets uint64, n int) {
	if n == 0 {
		return
	}
	_, _, err := ks.room.Change(context.WithoutCancel(ctx), func(r *room.State) error {
		if r.Resets != resets {
			return errNoRoomChange
		}
		r.Swept += uint64(n)
		return nil
	})
	if err != nil && !errors.Is(err, errNoRoomChange) {
		ks.logf("sweep: counting %d closed key(s) in the room: %v", n, err)
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

// keyPruner deletes the done keys older than the retention.
type keyPruner struct {
	store interface {
		Prune(ctx context.Context, cutoff time.Time) (pay.Pruned, error)
	}
	now       func() time.Time
	retention time.Duration
	timeline  timeline
	// lab hears of the keys pruned: a pruned key no longer says it saved a
	// 500.
	lab *mistakesLab
}

// Prune deletes done keys older than the retention and publishes what it
// removed.
func (kp keyPruner) Prune(ctx context.Context) (int, error) {
	// A prune that stopped part way (shutdown) deleted keys all the same:
	// the pages hear of those.
	pruned, err := kp.store.Prune(ctx, kp.now().Add(-kp.retention))
	if pruned.Keys > 0 {
		kp.lab.tablesChanged() // a pruned key no longer says it saved a 500
		e := live.Event{Kind: live.Pruned, Message: fmt.Sprintf("%d done key(s) older than %s pruned", pruned.Keys, kp.retention)}
		if pruned.Keys == 1 {
			e.Scope, e.Key = pruned.First.Scope, pruned.First.Key
		}
		kp.timeline.Publish(e)
	}
	return pruned.Keys, err
}
