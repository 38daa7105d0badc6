package web

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestPriorityGateLetsThePresenterInBeforeStudentsWhoCameEarlier(t *testing.T) {
	t.Parallel()
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

func TestHerdQueueServesThePresenterFirst(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	// A sweep runs and the students' queue is full.
	if err := env.Server.sims.herd.gate.acquire(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	env.Server.sims.herd.waiting.Add(1 + herdQueue)
	released := false
	release := func() {
		if !released {
			released = true
			env.Server.sims.herd.waiting.Add(-(1 + herdQueue))
			env.Server.sims.herd.gate.release()
		}
	}
	defer release()
	seed := time.Now().UnixNano() % 1_000_000_000 // no earlier run's: nothing from the cache
	q := fmt.Sprintf("/api/herd?min=5&max=10&step=5&trials=1&seed=%d", seed)
	if r := getFrom(t, fromAddress("127.0.0.2"), env.URL+q); r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a student with the queue full: %d %s", r.Status, r.Body)
	}
	answer := make(chan response, 1)
	go func() {
		answer <- sendFrom(t, http.DefaultClient, http.MethodGet, env.URL+q, "", PresenterHeader, token)
	}()
	waitUntil(t, "the presenter's run to wait first in line", func() bool { f, _ := env.Server.sims.herd.gate.waiting(); return f == 1 })
	release()
	if r := <-answer; r.Status != http.StatusOK {
		t.Fatalf("the presenter's run: %d %s", r.Status, r.Body)
	}
}
