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
// presenter steps it on): time spent so is not the work being slow, so
// the deadline, in memory and where the claim recorded it, grows by it.

// NewWorkContext is a context that ends with parent or once d has passed,
// whose deadline a payment's ExtendWork moves later (or back) while it
// runs. Service.WorkContext may return it.
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

	mu       sync.Mutex
	deadline time.Time
	timer    *time.Timer
}

func (w *workContext) Deadline() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadline, true
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

// extend moves the deadline by d, unless the work has already ended.
func (w *workContext) extend(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.Context.Err() != nil || !w.timer.Stop() {
		return // ended, or its deadline is firing now
	}
	w.deadline = w.deadline.Add(d)
	w.timer.Reset(max(time.Until(w.deadline), 0))
}

// claimedWork is what a payment knows of its claimed work, so that it can
// extend the work's deadline.
type claimedWork struct {
	s     *Service
	ctx   context.Context
	claim string
}

// ExtendWork moves the deadline of the payment's claimed work by d (a
// negative d gives back time that turned out unused): its work context's,
// when Service.WorkContext made it with NewWorkContext, and the one its
// claim recorded in the store. It does nothing before the claim or once
// the work is over. It is to be called from Observe, on the payment's own
// goroutine.
func (p *Payment) ExtendWork(ctx context.Context, d time.Duration) error {
	w := p.work
	if w.s == nil || d == 0 || !w.s.running.has(w.claim) || w.ctx.Err() != nil {
		return nil
	}
	if wc, ok := w.ctx.(*workContext); ok {
		wc.extend(d)
	}
	c := p.claimRequest()
	return w.s.Store.ExtendWork(ctx, c.Scope, c.Key, w.claim, d)
}
