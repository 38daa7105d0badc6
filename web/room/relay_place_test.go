package room

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
	"paytwice/web/live"
)

// placedNames lists the events hub placed in the room's order, each as
// "<its place> <its message's first word>", and how many.
func placedNames(hub *live.Hub) []string {
	placed, _ := hub.PlacedAfter(live.Place{})
	out := make([]string, 0, len(placed))
	for _, p := range placed {
		out = append(out, p.Place.String()+" "+strings.Fields(p.Event.Message)[0])
	}
	return out
}

// Three servers on one PostgreSQL database send their events at once.
// Every server keeps every event, its own included, at the same place in
// the room's order, in the order its server published them, each once;
// one server that lost a notification on its way reads it back and keeps
// the same order. From any event's place, every server gives the same
// events after it: what a page resuming on another server needs.
func TestEveryServerPlacesTheRoomsEventsInOneOrder(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a := startRelayed(t, openPostgresPeers(t, url), "s1")
	cl := newCutListener(openPostgresPeers(t, url))
	cl.lose = "s1-20 "
	b := startRelayed(t, cl, "s2")
	c := startRelayed(t, openPostgresPeers(t, url), "s3")
	servers := []relayedServer{a, b, c}
	waitJoined(t, servers...)

	const each = 40
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			for k := range each {
				name := fmt.Sprintf("%s-%d", s.relay.cfg.Name, k)
				s.hub.Publish(live.Event{Kind: live.Received, Request: name, Time: time.Now(), Message: name + " sent"})
				if k%7 == 0 {
					time.Sleep(time.Millisecond) // spread them over several batches
				}
			}
		})
	}
	wg.Wait()
	// A last event after all: s2 hears a number skip before it at the
	// latest, and reads back what it lost. It must take its number after
	// every other batch, the lost one included, so it is published only
	// once the servers that lose nothing have placed them all: sent at
	// once, it can share a batch committed before the lost one, and then
	// no later number tells s2 what it missed.
	for _, s := range []relayedServer{a, c} {
		waitFor(t, s.relay.cfg.Name+" to place the servers' events", func() bool { return len(placedNames(s.hub)) == 3*each })
	}
	c.hub.Publish(live.Event{Kind: live.Received, Request: "last", Time: time.Now(), Message: "last sent"})
	for _, s := range servers {
		waitFor(t, s.relay.cfg.Name+" to place every event", func() bool { return len(placedNames(s.hub)) == 3*each+1 })
	}

	want := placedNames(a.hub)
	for _, s := range servers[1:] {
		if got := placedNames(s.hub); !slices.Equal(got, want) {
			t.Fatalf("%s placed the room's events otherwise than s1:\n%v\nwant\n%v", s.relay.cfg.Name, got, want)
		}
	}
	if b.relay.ReadBack() == 0 {
		t.Errorf("s2 read nothing back: the lost notification never happened, the test proves nothing about it")
	}
	if b.sink.missed.Load() != 0 {
		t.Errorf("s2's pages were told to reload; it read back what it lost")
	}
	placed, ok := a.hub.PlacedAfter(live.Place{})
	if !ok {
		t.Fatal("s1 holds no unbroken order")
	}
	next := map[string]int{}
	seen := map[string]bool{}
	for i, p := range placed {
		if i > 0 && !p.Place.After(placed[i-1].Place) {
			t.Fatalf("place %v after %v", p.Place, placed[i-1].Place)
		}
		name := p.Event.Request
		if seen[name] {
			t.Fatalf("%s placed twice", name)
		}
		seen[name] = true
		if name == "last" {
			continue
		}
		server, num, _ := strings.Cut(name, "-")
		if fmt.Sprint(next[server]) != num {
			t.Fatalf("%s placed where %s-%d was due: a server's events out of its order", name, server, next[server])
		}
		next[server]++
	}

	// From any place, each server gives what comes after it in the order:
	// the same events everywhere.
	for _, at := range []int{0, 17, 60, len(placed) - 2, len(placed) - 1} {
		from := placed[at].Place
		wantAfter := want[at+1:]
		for _, s := range servers {
			after, ok := s.hub.PlacedAfter(from)
			if !ok {
				t.Fatalf("%s does not hold %v", s.relay.cfg.Name, from)
			}
			got := make([]string, 0, len(after))
			for _, p := range after {
				got = append(got, p.Place.String()+" "+strings.Fields(p.Event.Message)[0])
			}
			if !slices.Equal(got, wantAfter) {
				t.Fatalf("%s after %v gives\n%v\nwant\n%v", s.relay.cfg.Name, from, got, wantAfter)
			}
		}
	}
}

// A place a hub never held, or one before the order broke, is not
// followed: a page resuming from it is redrawn whole.
func TestAPlaceBeforeABreakIsNotFollowed(t *testing.T) {
	hub := live.New(0, nil)
	ev := func(names ...string) []live.Entry {
		out := make([]live.Entry, len(names))
		for i, n := range names {
			out[i].Event = live.Event{Kind: live.Received, Request: n}
		}
		return out
	}
	hub.Place(0, 1, 1, ev("a", "b"))
	hub.Place(0, 2, 1, ev("c"))
	if after, ok := hub.PlacedAfter(live.Place{N: 1, I: 1, J: 2}); !ok || len(after) != 1 || after[0].Event.Request != "c" {
		t.Fatalf("after 1.1.2: %v %v, want c", after, ok)
	}
	if _, ok := hub.PlacedAfter(live.Place{N: 1, I: 1, J: 3}); ok {
		t.Fatal("a place never held is followed")
	}
	hub.BreakOrder()
	hub.Place(0, 5, 1, ev("d"))
	if _, ok := hub.PlacedAfter(live.Place{N: 2, I: 1, J: 1}); ok {
		t.Fatal("a place before the break is followed across it")
	}
	if after, ok := hub.PlacedAfter(live.Place{N: 5, I: 1, J: 1}); !ok || len(after) != 0 {
		t.Fatalf("after the newest: %v %v, want nothing", after, ok)
	}
	for _, p := range []live.Place{{N: 5, I: 2, J: 3}, {G: 7, N: 5, I: 2, J: 3}} {
		if back, ok := live.ParsePlace(p.String()); !ok || back != p {
			t.Fatalf("%v read back as %v %v", p, back, ok)
		}
	}
	for _, bad := range []string{"", "1.2", "0.1.1", "1.0.1", "1.1.0", "a.b.c", "1.1.1.0", "1.1.1.1.1", "1.1.1.", "-1.1.1"} {
		if _, ok := live.ParsePlace(bad); ok {
			t.Errorf("%q read as a place", bad)
		}
	}
}

// An event made before a reset whose batch reaches the room's order after
// the reset's is placed on no server, its own included; an event made
// after the reset, sent in the same batch, is placed on every one. Each
// notification names the generation of its events, so the two travel
// apart.
func TestNoServerPlacesAnEventOfAnOlderGenerationAfterAReset(t *testing.T) {
	peers := SharedMemory()
	a := startRelayed(t, peers, "s1")
	b := startRelayed(t, peers, "s2")
	c := startRelayed(t, peers, "s3")
	servers := []relayedServer{a, b, c}
	waitJoined(t, servers...)

	a.hub.Publish(live.Event{Kind: live.Reset, Gen: 2, Time: time.Now(), Message: "reset by s1"})
	for _, s := range servers {
		waitFor(t, s.relay.cfg.Name+" to place the reset", func() bool { return len(placedNames(s.hub)) == 1 })
	}
	// s2 made one before the reset (generation 1) and one after it.
	b.hub.Publish(live.Event{Kind: live.Received, Request: "late", Gen: 1, Time: time.Now(), Message: "late paid"})
	b.hub.Publish(live.Event{Kind: live.Received, Request: "fresh", Gen: 2, Time: time.Now(), Message: "fresh paid"})
	for _, s := range servers {
		waitFor(t, s.relay.cfg.Name+" to place the event after the reset", func() bool { return len(placedNames(s.hub)) >= 2 })
		if got, want := placedNames(s.hub), []string{"reset", "fresh"}; len(got) != 2 || !strings.HasSuffix(got[0], " reset") || !strings.HasSuffix(got[1], " fresh") {
			t.Errorf("%s placed %q, want %q", s.relay.cfg.Name, got, want)
		}
	}
	for _, s := range []relayedServer{a, c} {
		for _, e := range remote(s.hub) {
			if e.Request == "late" {
				t.Errorf("%s published s2's event made before the reset: %+v", s.relay.cfg.Name, e)
			}
		}
	}
}
