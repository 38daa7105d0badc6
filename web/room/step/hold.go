package step

import (
	"slices"
	"time"

	"paytwice/web/live"
)

// At holds p at the checkpoint its event kind reaches, if step mode is on
// and p has not passed that checkpoint yet.
func (st *Stepper) At(p Request, k live.Kind) {
	if cp := At(k); cp != 0 {
		st.Hold(p, cp)
	}
}

// Hold waits at checkpoint cp until the presenter lets p go on.
func (st *Stepper) Hold(p Request, cp Checkpoint) {
	ps := p.Step()
	if !st.on.Load() || ps.free.Load() || cp <= ps.past {
		return
	}
	if st.closing.Load() {
		stopUnstepped(ps, cp)
		return
	}
	heldBefore := ps.past != 0
	ps.past = cp
	h := &heldRequest{r: p, at: cp, since: st.cfg.Now(), next: make(chan struct{})}
	st.mu.Lock()
	if !st.on.Load() {
		st.mu.Unlock()
		return
	}
	if heldBefore && ps.plays != st.plays {
		// Stepped on before the presenter pressed Play, and between two
		// checkpoints then: Play meant it too.
		st.mu.Unlock()
		ps.free.Store(true)
		return
	}
	ps.plays = st.plays
	if st.closing.Load() {
		st.mu.Unlock()
		stopUnstepped(ps, cp)
		return
	}
	if cp == CheckReceived && len(st.held) >= st.Max {
		st.mu.Unlock()
		ps.full = true
		ps.free.Store(true) // its refusal is not held either
		return
	}
	st.listChanged()
	st.held = append(st.held, h)
	off := st.off
	st.mu.Unlock()
	p.Publish(KindHeld, cp.String())

	// Time spent held is not the work being slow: the work's deadline
	// stops running, and every sweeper is told the key's work is alive by
	// a lease of one lock timeout, renewed every third of it while the
	// request is held. A server killed meanwhile renews no more, and its
	// keys are free a lock timeout later, as any dead server's are.
	resume := p.PauseWork()
	defer resume()
	p.RenewWork(st.lease)
	renew, stopRenewing := (<-chan time.Time)(nil), func() {}
	if st.lease > 0 {
		// A floor on the period: a ticker of 0 panics, and renewing more
		// often than every millisecond would only load the database.
		renew, stopRenewing = st.Every(max(st.lease/3, time.Millisecond))
	}
	defer stopRenewing()
	limit := st.After(st.limit)

	reason := ""
wait:
	for {
		select {
		case <-renew:
			p.RenewWork(st.lease)
			continue
		case <-h.next:
		case <-off:
		case <-p.Done():
			reason = "the client went away"
			ps.free.Store(true)
			st.wentOnAlone(h, AloneClientGone)
		case <-st.ctx.Done():
			ps.free.Store(true)
		case <-limit:
			reason = "held for " + st.limit.String() + ": the time limit let it go"
			ps.free.Store(true)
			st.wentOnAlone(h, AloneTimeLimit)
		}
		break wait
	}
	// The last renewal may be nearly a lease old, and the work goes on
	// now with as much of its deadline as it had left: one renewal more
	// keeps the sweepers off the key for a full lease from the resume.
	p.RenewWork(st.lease)
	st.mu.Lock()
	st.drop(h)
	st.mu.Unlock()
	p.Publish(KindResumed, reason)
}

// wentOnAlone tells Config.WentOnAlone of h, which goes on for why with
// nobody stepping it, before it goes on.
func (st *Stepper) wentOnAlone(h *heldRequest, why Alone) {
	if st.cfg.WentOnAlone == nil {
		return
	}
	st.mu.Lock()
	row := st.rowLocked(h)
	st.mu.Unlock()
	st.cfg.WentOnAlone(st.ctx, row, why)
}

// stopUnstepped ends, at shutdown, a request that step mode would have
// held at cp: nobody will step it on any more. One that has not called the
// gateway yet is stopped (Progress.Stopped), as StopHeld stops the held
// ones, so it releases its key and charges nothing; one past the gateway
// call (the presenter let it call) runs to the end to record what the
// gateway did. Either way it is not held again.
func stopUnstepped(ps *Progress, cp Checkpoint) {
	if cp <= CheckBeforeGateway {
		ps.stopped.Store(true)
	}
	ps.free.Store(true)
}

// StopHeld is for shutdown: every request step mode holds on this server
// ends at once, and none is held from now on (one that reaches a
// checkpoint later, arriving or between two, ends there: Hold), so that
// the server's wait for its requests in flight is short. Nobody stepped them on, so those
// held before their gateway call are marked stopped (Progress.Stopped):
// they release their key and charge nothing; those past it (the
// presenter let them call the gateway) record what the gateway did. The
// room's step mode stays as it is, for the other servers and for this
// one's next start. It returns how many requests it ended.
func (st *Stepper) StopHeld() int {
	st.closing.Store(true)
	st.mu.Lock()
	defer st.mu.Unlock()
	held := slices.Clone(st.held)
	for _, h := range held {
		stopUnstepped(h.r.Step(), h.at)
		st.letGo(h)
	}
	return len(held)
}
