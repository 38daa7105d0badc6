package web

import (
	"context"
	"testing"
)

func TestPriorityGateLetsThePresenterInBeforeStudentsWhoCameEarlier(t *testing.T) {
	var g priorityGate
	ctx := context.Background()
	if err := g.acquire(ctx, false); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	enter := func(who string, presenter bool) {
		if err := g.acquire(ctx, presenter); err != nil {
			t.Error(err)
			return
		}
		order <- who
	}
	go enter("student 1", false)
	waitUntil(t, "the first student to queue", func() bool { _, r := g.waiting(); return r == 1 })
	go enter("student 2", false)
	waitUntil(t, "the second student to queue", func() bool { _, r := g.waiting(); return r == 2 })
	go enter("presenter", true)
	waitUntil(t, "the presenter to queue", func() bool { f, _ := g.waiting(); return f == 1 })

	// A student whose wait ends leaves the queue and is never let in.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.acquire(gone, false); err == nil {
		t.Fatal("a cancelled wait was let in while the gate was held")
	}
	for _, want := range []string{"presenter", "student 1", "student 2"} {
		g.release()
		if got := <-order; got != want {
			t.Fatalf("let in %s, want %s", got, want)
		}
	}
	g.release()
	if f, r := g.waiting(); f != 0 || r != 0 || g.busy {
		t.Fatalf("after the last release: %d, %d waiting, busy %v", f, r, g.busy)
	}
}
