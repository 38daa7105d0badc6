package pay

import (
	"context"
	"testing"
	"time"
)

func TestWorkContextDeadlineMoves(t *testing.T) {
	ctx, cancel := NewWorkContext(context.Background(), time.Hour)
	defer cancel()
	first, _ := ctx.Deadline()
	w := ctx.(*workContext)
	w.extend(time.Hour)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(first.Add(time.Hour)) || ctx.Err() != nil {
		t.Fatalf("an hour on: deadline %v (first %v), err %v", d, first, ctx.Err())
	}
	// Giving back more time than is left ends the work at once, as a
	// deadline that passed does.
	w.extend(-3 * time.Hour)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline moved into the past did not end the work")
	}
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("err %v, want the deadline's", ctx.Err())
	}
	// An ended work's deadline no longer moves.
	ended, _ := ctx.Deadline()
	w.extend(time.Hour)
	if d, _ := ctx.Deadline(); !d.Equal(ended) {
		t.Fatalf("an ended work's deadline moved from %v to %v", ended, d)
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if child.Err() == nil {
		t.Fatal("a context made from the ended work is not done")
	}
}
