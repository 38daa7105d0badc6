package step

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

// clockedStepper is one server's stepper on peers shared with others,
// its room followed on them, its tickers the channels the test sends on
// and its real time *now.
type clockedStepper struct {
	st                *Stepper
	hub               *live.Hub
	announce, members chan time.Time
	now               atomic.Pointer[time.Time]
}

func newClockedStepper(t *testing.T, peers room.Peers, id, name string) *clockedStepper {
	t.Helper()
	s := &clockedStepper{hub: live.New(0, nil), announce: make(chan time.Time), members: make(chan time.Time)}
	start := time.Now()
	s.now.Store(&start)
	t.Cleanup(s.hub.Close)
	ctx, cancel := context.WithCancel(context.Background())
	r := room.New(peers, id, name, room.Defaults, func(old, next room.State) {}, t.Logf)
	r.Start(ctx)
	s.st = New(ctx, Config{Name: name, Room: r, Peers: peers, Hub: s.hub, Now: time.Now, Logf: t.Logf})
	s.st.After = func(time.Duration) <-chan time.Time { return nil }
	s.st.wallNow = func() time.Time { return *s.now.Load() }
	s.st.ticker = func(d time.Duration) (<-chan time.Time, func()) {
		if d == stepMembersEvery {
			return s.members, func() {}
		}
		return s.announce, func() {}
	}
	s.st.StartCommands(false)
	t.Cleanup(func() { cancel(); s.st.WaitCommands() })
	waitFor(t, name+" to listen for commands", s.st.Listening)
	return s
}

// advance moves s's real time on by d.
func (s *clockedStepper) advance(d time.Duration) {
	later := s.now.Load().Add(d)
	s.now.Store(&later)
}

// listed reports whether s's step list shows request.
func (s *clockedStepper) listed(request string) bool {
	for _, h := range s.st.State().Held {
		if h.Request == request {
			return true
		}
	}
	return false
}

// A request held on another server stays on this server's step list for
// as long as it is held, however long that is: each of the holder's
// announcements (every stepAnnounceEvery) renews its row, which would go
// stale stepStaleAfter after the last. Once the holder lets it go, its
// next announcement takes it off at once.
func TestARequestHeldOnAnotherServerStaysListedWhileItIsHeld(t *testing.T) {
	peers := room.SharedMemory()
	s1 := newClockedStepper(t, peers, "id-s1", "s1")
	s2 := newClockedStepper(t, peers, "id-s2", "s2")
	if err := s2.st.Turn(true, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s2 to hold its requests", s2.st.On)

	req := &fakeRequest{id: "rq_long", done: make(chan struct{}), hub: s2.hub}
	released := make(chan struct{})
	go func() {
		defer close(released)
		s2.st.Hold(req, CheckClaimed)
	}()
	waitFor(t, "s1 to list s2's held request", func() bool { return s1.listed("rq_long") })

	// Ten announcements' worth of time, well past stepStaleAfter: each
	// refresh of s2 renews the row before s1's watch looks.
	for round := range 10 {
		s1.advance(stepAnnounceEvery)
		tick(t, s2.announce)
		waitFor(t, "s1 to take s2's announcement", func() bool {
			s1.st.mu.Lock()
			defer s1.st.mu.Unlock()
			for _, h := range s1.st.others {
				if h.Request == "rq_long" && !h.heard.Before(*s1.now.Load()) {
					return true
				}
			}
			return false
		})
		tick(t, s1.members)
		tick(t, s1.members) // the second tick waits for the first look to end
		if !s1.listed("rq_long") {
			t.Fatalf("round %d: s1 dropped s2's request, %s after it was first listed, while s2 still holds it", round, time.Duration(round+1)*stepAnnounceEvery)
		}
	}

	if _, err := s2.st.Next("rq_long", false); err != nil {
		t.Fatal(err)
	}
	<-released
	waitFor(t, "s1 to take s2's request off its list once released", func() bool { return !s1.listed("rq_long") })
}
