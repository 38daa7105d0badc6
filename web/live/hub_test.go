package live

import (
	"context"
	"testing"
	"time"
)

func TestPublishNumbersEventsAndViewersResume(t *testing.T) {
	h := New(16, nil)
	for range 5 {
		h.Publish(Event{Kind: Received})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := h.Subscribe(0).Next(ctx)
	if err != nil || len(got) != 5 || got[0].Seq != 1 || got[4].Seq != 5 {
		t.Fatalf("from the start: %d events, err %v", len(got), err)
	}
	// A browser reconnecting with Last-Event-ID 3 gets 4 and 5 only.
	got, err = h.Subscribe(3).Next(ctx)
	if err != nil || len(got) != 2 || got[0].Seq != 4 {
		t.Fatalf("resume after 3: %v %v", got, err)
	}
}

func TestViewerWakesOnPublish(t *testing.T) {
	h := New(16, nil)
	sub := h.Subscribe(h.LastSeq())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan []*Entry, 1)
	go func() {
		es, _ := sub.Next(ctx)
		got <- es
	}()
	h.Publish(Event{Kind: Claimed, Key: "k"})
	if es := <-got; len(es) != 1 || es[0].Key != "k" {
		t.Fatalf("woke with %v", es)
	}
}

func TestSlowViewerIsDroppedNotWaitedOn(t *testing.T) {
	h := New(64, nil)
	h.Publish(Event{Kind: Received})
	slow := h.Subscribe(h.LastSeq()) // never reads while events pour in
	done := make(chan struct{})
	go func() {
		for range 10_000 {
			h.Publish(Event{Kind: Received})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publishing blocked on a viewer that does not read")
	}
	if _, err := slow.Next(context.Background()); err != ErrTooSlow {
		t.Fatalf("slow viewer got %v, want ErrTooSlow", err)
	}
	// A fresh viewer still gets the newest events.
	es, err := h.Subscribe(0).Next(context.Background())
	if err != nil || len(es) != 64 || es[63].Seq != 10_001 {
		t.Fatalf("fresh viewer: %d events, err %v", len(es), err)
	}
}

func TestCloseWakesViewers(t *testing.T) {
	h := New(4, nil)
	sub := h.Subscribe(0)
	errc := make(chan error, 1)
	go func() { _, err := sub.Next(context.Background()); errc <- err }()
	h.Close()
	if err := <-errc; err != ErrClosed {
		t.Fatalf("got %v", err)
	}
	h.Publish(Event{}) // must not panic after Close
}

func TestEventsNameTheirServer(t *testing.T) {
	h := New(16, nil)
	h.SetServer("s1")
	own := h.Publish(Event{Kind: Received})
	// One of two servers inside this process names itself: its name is kept.
	inner := h.Publish(Event{Kind: Received, Server: "s1b"})
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	remote := h.PublishRemote(Event{Seq: 99, Kind: Claimed, Server: "s2", Time: at})
	if own.Server != "s1" || inner.Server != "s1b" || remote.Server != "s2" {
		t.Fatalf("servers %q, %q and %q, want s1 (this hub's own event), s1b and s2 (kept)", own.Server, inner.Server, remote.Server)
	}
	if !remote.Time.Equal(at) || remote.Seq != 3 {
		t.Fatalf("the remote event has time %v and seq %d: it keeps its time and takes this hub's number", remote.Time, remote.Seq)
	}
	held := h.Recent(16)
	if held[0].Remote || held[1].Remote || !held[2].Remote {
		t.Fatalf("remote marks: %v, %v, %v", held[0].Remote, held[1].Remote, held[2].Remote)
	}
	if lone := New(16, nil).Publish(Event{Kind: Received}); lone.Server != "" {
		t.Fatalf("a hub never named stamps %q", lone.Server)
	}
}
