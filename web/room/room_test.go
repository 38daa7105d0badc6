package room_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"paytwice/web/room"
)

// class is the state of a test room.
type class struct {
	Lesson string `json:"lesson"`
	Count  int    `json:"count"`
}

func defaults() class { return class{Lesson: "none"} }

// follower is one server's copy of the room, with the snapshots it
// applied.
type follower struct {
	*room.Room[class]
	mu      sync.Mutex
	applied []class
}

func follow(t *testing.T, peers room.Peers, name string) *follower {
	t.Helper()
	f := &follower{}
	f.Room = room.New(peers, name+"-id", name, defaults, func(_, next class) {
		f.mu.Lock()
		f.applied = append(f.applied, next)
		f.mu.Unlock()
	}, t.Logf)
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx)
	t.Cleanup(func() { cancel(); f.Wait() })
	return f
}

// waitFor waits until f's snapshot satisfies ok.
func (f *follower) waitFor(t *testing.T, what string, ok func(class) bool) {
	t.Helper()
	for {
		s, _, changed := f.Watch()
		if ok(s) {
			return
		}
		select {
		case <-changed:
		case <-time.After(within):
			t.Fatalf("%s never came: %+v", what, s)
		}
	}
}

func TestRoomIsOneRoomForEveryServer(t *testing.T) {
	peers := room.SharedMemory()
	a := follow(t, peers, "a")
	if s := a.Load(); s != defaults() {
		t.Fatalf("a room never changed is %+v, want the defaults", s)
	}
	b := follow(t, peers, "b")
	ctx := context.Background()

	// Changes made on both servers at once all count.
	var wg sync.WaitGroup
	for _, f := range []*follower{a, b} {
		for range 10 {
			wg.Go(func() {
				if _, _, err := f.Change(ctx, func(s *class) error { s.Count++; return nil }); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	for _, f := range []*follower{a, b} {
		f.waitFor(t, "every change", func(s class) bool { return s.Count == 20 })
	}

	// A refused edit changes nothing, anywhere.
	refused := errors.New("refused")
	if _, _, err := a.Change(ctx, func(s *class) error { s.Lesson = "half"; return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused edit: %v", err)
	}
	old, next, err := b.Change(ctx, func(s *class) error { s.Lesson = "fails-halfway"; return nil })
	if err != nil || old.Lesson != "none" || next.Lesson != "fails-halfway" {
		t.Fatalf("change: %+v → %+v, %v", old, next, err)
	}
	a.waitFor(t, "the lesson", func(s class) bool { return s.Lesson == "fails-halfway" })

	// A server that joins late starts from the room, not the defaults.
	c := follow(t, peers, "c")
	if s := c.Load(); s.Lesson != "fails-halfway" || s.Count != 20 {
		t.Fatalf("a late server starts with %+v", s)
	}
	// and follows it from then on, as the members say.
	for deadline := time.Now().Add(within); ; {
		m, err := c.Members(ctx)
		if err == nil && len(m) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v %v, want a, b and c", m, err)
		}
		time.Sleep(time.Millisecond)
	}

	// Each server applied the snapshots in version order, never one older
	// than the last.
	for _, f := range []*follower{a, b} {
		f.mu.Lock()
		for i := 1; i < len(f.applied); i++ {
			if f.applied[i].Count < f.applied[i-1].Count {
				t.Errorf("applied %+v after %+v", f.applied[i], f.applied[i-1])
			}
		}
		f.mu.Unlock()
	}
}
