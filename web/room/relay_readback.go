package room

import (
	"context"
	"hash/maphash"
	"math"
	"time"

	"paytwice/pay/peers"
)

// relay_readback.go holds how the relay reads back batches it never heard:
// after its listening connection was restored, and when the room is quiet
// (the idle check). It is apart from the order because it reads the kept
// batches from the database, where the order only takes what comes.

// watchIdle runs the idle check at each tick until ctx ends.
func (r *Relay) watchIdle(ctx context.Context) {
	ticks := r.cfg.IdleChecks
	if ticks == nil {
		t := time.NewTicker(relayIdleCheck)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ticks:
		case <-ctx.Done():
			return
		}
		r.listenMu.Lock()
		r.checkIdle(ctx)
		r.listenMu.Unlock()
	}
}

// checkIdle reads back the batches after the last one taken, unless one
// arrived since the last check: a lost notification of the room's newest
// batch is then taken within relayIdleCheck, not when the next batch
// comes. One in flight, read back here, is dropped when it arrives
// (readBackSums). A read that fails is tried again at the next check; a
// batch no longer kept, or an order gone back, is lost for good as after
// a reconnection. r.listenMu is held.
func (r *Relay) checkIdle(ctx context.Context) {
	if r.heardLive {
		r.heardLive = false
		return
	}
	if r.at.N == 0 {
		return // no batch taken yet to read on from
	}
	rctx, cancel := context.WithTimeout(ctx, relayReadTimeout)
	payloads, kept, err := r.cfg.Peers.ReadNumbered(rctx, r.at.N, math.MaxUint64)
	cancel()
	if err != nil {
		if !r.idleFailing && ctx.Err() == nil {
			r.cfg.Logf("live relay: looking for missed events while the room is quiet: %v", err)
		}
		r.idleFailing = true
		return
	}
	r.idleFailing = false
	if !r.takeReadBack(payloads, kept, math.MaxUint64, 0) {
		r.at = peers.Part{}
		r.missed()
	}
}

// relistened runs each time the relay (re)starts listening. The batches
// sent while it was not are read back from those the peers keep; when
// they are no longer kept (or cannot be read), they are lost for good and
// the sink is told.
func (r *Relay) relistened() {
	r.sayHello()
	if r.listening.Add(1) == 1 {
		return // the first start: there was nothing to miss yet
	}
	if r.at.N == 0 || !r.catchUp(math.MaxUint64, 0) {
		// Lost for good: the pages reload, and the next batch heard is
		// where the relay starts again.
		r.at = peers.Part{}
		r.missed()
	}
}

// relayIdleCheck is how often a relay that heard no batch since its
// last look reads the batches after the last one it took: a notification
// lost on a connection that stays up is otherwise noticed only when a
// later batch comes, and a quiet room's newest events would wait for it
// without end. It costs one indexed read of the kept batches per server
// per interval, which finds the last batch taken alone when nothing was
// lost.
const relayIdleCheck = 3 * time.Second

// relayReadTimeout bounds reading back missed batches, which holds the
// listening goroutine.
const relayReadTimeout = 5 * time.Second

// catchUp reads back the parts after r.at up to, not including, part i of
// batch n (every kept one when n is MaxUint64) and takes them in order. It
// reports whether none was missing.
//
// It reads from r.at's own batch on, and takes nothing unless r.at is
// there as it was taken. The numbers may go back: PostgreSQL commits the
// order's counter without waiting for the disk, so a crash can forget the
// newest batches, which their listeners took already, and number the next
// ones again. Nothing then reads as missing (no batch after r.at is
// numbered yet, or the batch numbered like r.at is another), while every
// batch numbered again would be dropped as taken: the relay would go deaf
// in silence. A changed or vanished r.at says so, and the relay starts
// again from the next batch it hears, the pages reloaded.
func (r *Relay) catchUp(n, i uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), relayReadTimeout)
	defer cancel()
	payloads, kept, err := r.cfg.Peers.ReadNumbered(ctx, r.at.N, n)
	if err != nil {
		r.cfg.Logf("live relay: reading back the events missed: %v", err)
		return false
	}
	return r.takeReadBack(payloads, kept, n, i)
}

// takeReadBack takes the parts of payloads, read back from r.at's batch
// on (kept as ReadNumbered said), after r.at and before part i of batch
// n, as catchUp does, and reports whether none was missing.
func (r *Relay) takeReadBack(payloads []string, kept bool, n, i uint64) bool {
	anchor, anchored := r.at, false
	for _, p := range payloads {
		part, rest, ok := peers.CutPart(p)
		if !ok {
			continue
		}
		if part == anchor {
			anchored = rest == r.atRest
			continue
		}
		if !part.After(r.at) {
			continue
		}
		if !anchored || part.N > n || part.N == n && part.I >= i {
			break
		}
		if !part.Follows(r.at) {
			kept = false
		}
		r.at, r.atRest = part, rest
		r.readBackSums[part] = maphash.String(r.sumSeed, rest)
		r.readBack.Add(1)
		r.take(part, rest)
	}
	if !anchored {
		if !kept {
			return false // forgotten with the oldest batches
		}
		r.cfg.Logf("live relay: the batch last heard, #%d, is no longer in the database as it was heard: the order of batches went back", anchor.N)
		return false
	}
	return kept && (n == math.MaxUint64 || peers.Part{N: n, I: i}.Follows(r.at))
}

// ReadBack counts the notifications this relay read back from the kept
// batches after missing them.
func (r *Relay) ReadBack() uint64 { return r.readBack.Load() }
