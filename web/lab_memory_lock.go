package web

import (
	"context"
	"errors"

	"paytwice/pay"
)

// The lab's lock in memory: mistake 3's unguarded check-then-insert
// (lab_naive.go) behind a lock that only this server's requests meet.

// memoryLockPrefix files the lock in memory's rows in the unguarded
// tables apart from check-then-insert's: the lab measures each mistake on
// its own, and a client's key can never start with it.
const memoryLockPrefix = pay.LabKeyPrefix + "memory-lock "

// payMemoryLock is the lock in memory: the unguarded check-then-insert of
// mistake 3, run while holding this server's own lock on (scope, key)
// (keylocks.go). On one server that works: a second request with the key
// waits for the lock, then finds the first one's row and replays it. But
// the lock is in this process's memory. Two servers on one database have
// a lock each, so the two requests of a double-click that land on two of
// them never meet: both find no row, both insert, both charge.
//
// Waiting for the lock, the look-up and the pause come before anything is
// written, so they run under the client's connection: a client that hangs
// up leaves the queue, or gives the lock back, with nothing to undo. From
// the insert on, the work runs to its end under the gateway time-out, and
// the lock is released when it ends, whatever the client does.
func (h *paymentHandlers) payMemoryLock(p *payment) error {
	c := p.c
	locks := h.switches.lab.locks.mine
	if name, twin, ok := h.inProcessServer(); ok {
		// One of the two servers inside this process takes the request,
		// with its own lock table: the timeline names it.
		p.server = name
		if twin {
			locks = h.switches.lab.locks.twin
		}
	}
	if ok, err := p.parse(" (lab: a lock in memory)"); !ok {
		return err
	}
	clientCtx := c.Request().Context()
	// The wait ends with the client, or with the server's work at
	// shutdown: AbandonWork does not end the client's connection, and a
	// waiter would otherwise lose it unanswered when the grace runs out.
	waitCtx, stopWaiting := context.WithCancel(clientCtx)
	defer stopWaiting()
	defer context.AfterFunc(h.work.ctx, stopWaiting)()
	unlock, err := locks.lock(waitCtx, p.scope, p.key, func() {
		h.switches.lab.locks.waits.Add(1)
		p.note(0, memoryLockWaiting)
		// Waiting for another request costs the server nothing: the turn
		// goes back, or a class double-clicking behind one address would
		// have its waiters take every turn the holders need.
		p.slot.pause()
	})
	p.slot.resume()
	switch {
	case errors.Is(err, errTooManyLocks):
		return p.fail(pay.Errorf(pay.EUNAVAILABLE, "This server already holds a lock on %d keys, its limit. Retry with the same key in a moment.", labMaxTracked))
	case err != nil && clientCtx.Err() == nil && h.work.ctx.Err() != nil:
		p.note(0, "the server is stopping: this request stops waiting for the lock, having written nothing")
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is stopping and ended this payment while it waited for another request with the same key to finish: it never called the gateway, nothing was charged and nothing was written. Send it again with the same key once the server is back."))
	case err != nil:
		return p.hungUp("while waiting for this server's lock on the key")
	}
	defer unlock()
	p.note(0, "this server's lock on the key is taken: any other request with it, on this server, waits here. A server beside it has a lock of its own")
	return p.checkThenInsertLoose(clientCtx, 0, memoryLockPrefix+p.key, "memory-lock ")
}

// The two servers a server with its database to itself runs inside its
// process for the lock in memory, as the timeline names them.
const (
	inProcessServerA = "in-process A"
	inProcessServerB = "in-process B"
)

// inProcessServer deals a request of the lock in memory to one of the two
// servers inside this process, in turn, as a round-robin front door
// would: its name, and whether it is the second (the twin lock table).
// ok is false when the lab runs one server, and on servers that share
// their database: those are real servers, each with its own memory.
func (h *paymentHandlers) inProcessServer() (name string, twin, ok bool) {
	if h.switches.shared || h.switches.lab.Settings().Server.Servers < 2 {
		return "", false, false
	}
	if h.switches.lab.locks.door.Add(1)%2 == 0 {
		return inProcessServerB, true, true
	}
	return inProcessServerA, false, true
}

// memoryLockWaiting is the note of a request that waits for the lock.
const memoryLockWaiting = "another request with this key holds this server's lock: waiting for it"
