package web

import (
	"context"
	"slices"
	"sync"
)

// priorityGate lets one holder in at a time; when it is let go, the
// presenter's waiters are let in before any student's, each kind in the
// order it came. The presenter is never behind students in its queue.
type priorityGate struct {
	mu          sync.Mutex
	busy        bool
	first, rest []chan struct{}
}

// acquire waits for the gate, or for ctx to end.
func (g *priorityGate) acquire(ctx context.Context, priority bool) error {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if priority {
		g.first = append(g.first, ch)
	} else {
		g.rest = append(g.rest, ch)
	}
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		queued := g.drop(&g.first, ch) || g.drop(&g.rest, ch)
		g.mu.Unlock()
		if !queued {
			g.release() // handed over as ctx ended: pass it on
		}
		return ctx.Err()
	}
}

func (g *priorityGate) drop(q *[]chan struct{}, ch chan struct{}) bool {
	i := slices.Index(*q, ch)
	if i < 0 {
		return false
	}
	*q = slices.Delete(*q, i, i+1)
	return true
}

// release hands the gate to the next waiter, the presenter's first.
func (g *priorityGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	var next chan struct{}
	switch {
	case len(g.first) > 0:
		next, g.first = g.first[0], g.first[1:]
	case len(g.rest) > 0:
		next, g.rest = g.rest[0], g.rest[1:]
	default:
		g.busy = false
		return
	}
	close(next)
}

// waiting is how many wait, the presenter's and the students'.
func (g *priorityGate) waiting() (first, rest int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.first), len(g.rest)
}
