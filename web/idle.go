package web

import (
	"context"
	"sync"
	"sync/atomic"

	"paytwice/pay"
)

// An idle server should cost nothing: no request, no page open, no CPU.
// The periodic sweep is the one thing that still woke it, to run a query
// that, once every key is closed, can only find nothing until the next
// claim. idleSweeps remembers that in memory, so that the sweeper asks the
// database again only after something could have started a key.
//
// This holds only when the storage is private to this process: a SQLite
// file is served by one server, and every key in it was either claimed
// here (and counted) or left by an earlier run, which the start-up sweep
// closes before anything is served. Several servers share a PostgreSQL
// database, where another server's crash leaves keys this one must sweep:
// there the sweeper queries every time, as before.
type idleSweeps struct {
	// private: every key in the storage is claimed through this process.
	private bool
	// claims counts the calls that may have left a key started, bumped
	// when each returns: a sweeper that reads it before its query sees the
	// key of every claim counted.
	claims atomic.Uint64
	// wake tells the job loop, whose sweep ticker stops while idle, that
	// a claim happened.
	wake chan struct{}

	mu sync.Mutex
	// quiet: when claims was quietAt, no key was started.
	quiet   bool
	quietAt uint64
}

func newIdleSweeps(private bool) *idleSweeps {
	return &idleSweeps{private: private, wake: make(chan struct{}, 1)}
}

// claimed counts a call that may have left a key started.
func (g *idleSweeps) claimed() {
	g.claims.Add(1)
	select {
	case g.wake <- struct{}{}:
	default: // a wake is already pending
	}
}

// idle reports whether no key can be started: none was when last looked
// at, and nothing has claimed one since.
func (g *idleSweeps) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.private && g.quiet && g.quietAt == g.claims.Load()
}

// noneStarted records that no key was started when claims was at.
func (g *idleSweeps) noneStarted(at uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.quiet, g.quietAt = true, at
}

// countingStorage is the protocol's storage, counting its claims.
type countingStorage struct {
	pay.Storage
	g *idleSweeps
}

func (c countingStorage) Claim(ctx context.Context, r pay.ClaimRequest) (pay.ClaimResult, error) {
	defer c.g.claimed()
	return c.Storage.Claim(ctx, r)
}

// periodicSweep is the sweeper's tick. It reports whether it asked the
// database anything. On private storage it first looks for any started
// key: when there is none it remembers so, and the next ticks cost
// nothing until a claim; when there are some it sweeps as always.
func (ks *keySweeper) periodicSweep(ctx context.Context) (queried bool, err error) {
	g := ks.idle
	if !g.private {
		_, err := ks.Sweep(ctx)
		return true, err
	}
	if g.idle() {
		return false, nil
	}
	at := g.claims.Load()
	started, err := ks.keys.StartedBefore(ctx, ks.now().Add(orphanHorizon))
	if err != nil {
		return true, err
	}
	if len(started) == 0 {
		g.noneStarted(at)
		return true, nil
	}
	_, err = ks.Sweep(ctx)
	return true, err
}
