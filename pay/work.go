package pay

import (
	"context"
	"sync"
	"time"
)

// A claimed payment's work runs under a deadline (Service.WorkContext)
// that its claim records, so that no sweeper takes the key while the
// work may still run. Something outside the protocol may pause the work
// between two steps (the lab's step mode holds a request until a
// presenter steps it on): time spent so is not the work being slow. While
// paused, the deadline in memory stops running (PauseWork), and the one
// the claim recorded is renewed as a short lease (RenewWork), again and
// again for as long as the pause lasts: a server that dies while it holds
// a request stops renewing, and its key is free for the sweepers once the
// lease runs out, as any other key of a dead server is.

// NewWorkContext is a context that ends with parent or once d has passed,
// whose deadline stops running while a payment's PauseWork holds it.
// Service.WorkContext may return it.
func NewWorkContext(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &workContext{Context: ctx, cancel: cancel, deadline: time.Now().Add(d)}
	w.timer = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return w, func() { w.timer.Stop(); cancel(context.Canceled) }
}

// workContext is the context NewWorkContext makes.
type workContext struct {
	context.Context
	cancel context.CancelCauseFunc

	// first says the work's writes go first (WriteFirst), as the
	// payment's own did (workWritesFirst).
	first bool

	mu       sync.Mutex
	deadline time.Time
	timer    *time.Timer
	// left is the time the work had left when it was paused, while
	// paused is set.
	left   time.Duration
	paused bool
}

func (w *workContext) Deadline() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused {
		return time.Now().Add(w.left), true
	}
	return w.deadline, true
}

// Value is the parent's, but for the mark WriteFirst sets when first.
func (w *workContext) Value(key any) any {
	if _, ok := key.(firstKey); ok && w.first {
		return true
	}
	return w.Context.Value(key)
}

// KeepWriteFirst marks work, the context a payment's work runs under
// (the protocol's claimed payment, the lab's modes), so that its writes
// go first when the payment's own (ctx) do.
// The work is made apart from the request, which it outlives, so it
// carries none of its values: the presenter's claim went first, and then
// its charge at the gateway's ledger and its saved answer queued behind
// every write of a class flooding the writer (a presenter's payment went
// unanswered for 20 s so, its gateway write waiting behind the class's
// batches). A work of NewWorkContext is marked in place, so that it
// keeps its type: PauseWork finds it by it.
func KeepWriteFirst(ctx, work context.Context) context.Context {
	if !WritesFirst(ctx) || WritesFirst(work) {
		return work
	}
	if w, ok := work.(*workContext); ok {
		w.first = true
		return w
	}
	return WriteFirst(work)
}

// Err says DeadlineExceeded once the deadline ended the work, as a
// context of WithTimeout does.
func (w *workContext) Err() error {
	err := w.Context.Err()
	if err != nil && context.Cause(w.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// pause stops the deadline's clock, unless the work has already ended or
// is paused; it reports whether it paused it.
func (w *workContext) pause() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused || w.Context.Err() != nil || !w.timer.Stop() {
		return false // paused already, ended, or its deadline is firing now
	}
	w.left, w.paused = max(time.Until(w.deadline), 0), true
	return true
}

// resume starts the deadline's clock again with the time that was left.
func (w *workContext) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.paused {
		return
	}
	w.paused = false
	w.deadline = time.Now().Add(w.left)
	w.timer.Reset(w.left)
}

// claimedWork is what a payment knows of its claimed work, so that it can
// pause it.
type claimedWork struct {
	s     *Service
	ctx   context.Context
	claim string
}

// PauseWork stops the deadline of the payment's claimed work from running
// (when Service.WorkContext made it with NewWorkContext) until resume is
// called: time spent paused is not the work's. It does nothing before the
// claim or once the work is over. It is to be called from Observe, on the
// payment's own goroutine, together with RenewWork for the record the
// other servers' sweepers read.
func (p *Payment) PauseWork() (resume func()) {
	w := p.work
	if w.s == nil || !w.s.running.has(w.claim) {
		return func() {}
	}
	if wc, ok := w.ctx.(*workContext); ok && wc.pause() {
		return wc.resume
	}
	return func() {}
}

// RenewWork tells every sweeper that the payment's claimed work is alive
// though paused: none takes its key for lease from now (Storage.RenewWork).
// The caller renews well within lease for as long as the pause lasts, so
// that the key of a server that died is free soon after. It does nothing
// before the claim or once the work is over.
func (p *Payment) RenewWork(ctx context.Context, lease time.Duration) error {
	w := p.work
	if w.s == nil || !w.s.running.has(w.claim) || w.ctx.Err() != nil {
		return nil
	}
	c := p.claimRequest()
	return w.s.Store.RenewWork(ctx, c.Scope, c.Key, w.claim, lease)
}
