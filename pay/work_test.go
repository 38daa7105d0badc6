package pay

import (
	"context"
	"testing"
	"time"
)

func TestWorkContextDeadlineStopsWhilePaused(t *testing.T) {
	ctx, cancel := NewWorkContext(context.Background(), time.Hour)
	defer cancel()
	w := ctx.(*workContext)
	if !w.pause() || w.pause() {
		t.Fatal("a running work pauses once")
	}
	// While paused, the deadline keeps the time that was left ahead of
	// now.
	left := w.left
	if d, ok := ctx.Deadline(); !ok || d.Before(time.Now().Add(left-time.Second)) || left <= 59*time.Minute {
		t.Fatalf("paused with %v left: deadline %v", left, d)
	}
	// Resumed with no time left, the work ends at once, as a deadline
	// that passed does.
	w.left = 0
	w.resume()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a work resumed with no time left did not end")
	}
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("err %v, want the deadline's", ctx.Err())
	}
	// An ended work no longer pauses.
	if w.pause() {
		t.Fatal("an ended work paused")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if child.Err() == nil {
		t.Fatal("a context made from the ended work is not done")
	}
}
