package step

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

// fakeRequest is a Request with nothing behind it.
type fakeRequest struct {
	id       string
	progress Progress
	done     chan struct{}
	hub      *live.Hub
}

func (r *fakeRequest) ID() string                 { return r.id }
func (r *fakeRequest) Step() *Progress            { return &r.progress }
func (r *fakeRequest) Done() <-chan struct{}      { return r.done }
func (r *fakeRequest) PauseWork() (resume func()) { return func() {} }
func (r *fakeRequest) RenewWork(time.Duration)    {}
func (r *fakeRequest) Describe() HeldRequest {
	return HeldRequest{Request: r.id, Key: "k", OrderID: "A-1", Scope: "s"}
}
func (r *fakeRequest) Publish(kind live.Kind, msg string) {
	r.hub.Publish(live.Event{Kind: kind, Request: r.id, Message: msg})
}

// announcements records the held lists a stepper announces, and fails
// them while failing is set.
type announcements struct {
	room.Peers
	failing atomic.Bool
	mu      sync.Mutex
	failed  int
	lists   [][]heldWire // those that went out
}

func (a *announcements) Notify(ctx context.Context, channel string, payloads ...string) error {
	if len(payloads) != 1 {
		return a.Peers.Notify(ctx, channel, payloads...)
	}
	payload := payloads[0]
	var cmd stepCommand
	if json.Unmarshal([]byte(payload), &cmd) != nil || cmd.Op != stepOpHolding {
		return a.Peers.Notify(ctx, channel, payload)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failing.Load() {
		a.failed++
		return errors.New("the database is away")
	}
	a.lists = append(a.lists, cmd.Held)
	return nil
}

func (a *announcements) count() (failed int, lists [][]heldWire) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failed, append([][]heldWire(nil), a.lists...)
}

// sharedStepper is a stepper among other servers (on shared memory
// peers), whose tickers are the channels the test sends on and whose
// real time is *now.
type sharedStepper struct {
	st                *Stepper
	hub               *live.Hub
	peers             *announcements
	announce, members chan time.Time
	now               atomic.Pointer[time.Time]
}

func newSharedStepper(t *testing.T) *sharedStepper {
	t.Helper()
	s := &sharedStepper{hub: live.New(0, nil), peers: &announcements{Peers: room.SharedMemory()},
		announce: make(chan time.Time), members: make(chan time.Time)}
	t.Cleanup(s.hub.Close)
	start := time.Now()
	s.now.Store(&start)
	r := room.New(room.Memory(), "id-s1", "s1", room.Defaults, func(old, next room.State) {}, t.Logf)
	ctx, cancel := context.WithCancel(context.Background())
	s.st = New(ctx, Config{Name: "s1", Room: r, Peers: s.peers, Hub: s.hub, Now: time.Now, Logf: t.Logf})
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
	return s
}

// tick sends one tick on c, which the stepper takes.
func tick(t *testing.T, c chan time.Time) {
	t.Helper()
	select {
	case c <- time.Now():
	case <-time.After(10 * time.Second):
		t.Fatal("the stepper did not take the tick")
	}
}

// waitFor polls cond, a condition on what the stepper's goroutines do,
// for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// Another server's held row that no announcement confirms goes at the
// next tick of the watch once it is stale, and the pages are told: the
// board, which draws the step bar from its own copy, redraws it.
func TestStaleRowsOfOtherServersGoAndThePagesAreTold(t *testing.T) {
	s := newSharedStepper(t)
	s.st.Heard(live.Event{Kind: KindHeld, Request: "rq_far", Server: "s2", Message: CheckClaimed.String(), Time: time.Now()})
	if held := s.st.State().Held; len(held) != 1 || held[0].Request != "rq_far" {
		t.Fatalf("held: %+v", held)
	}
	sub := s.hub.Subscribe(s.hub.LastSeq())
	later := s.now.Load().Add(stepStaleAfter + time.Second)
	s.now.Store(&later)
	tick(t, s.members)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for told := false; !told; {
		entries, err := sub.Next(ctx)
		if err != nil {
			t.Fatal("the pages were not told that the stale row went")
		}
		for _, e := range entries {
			told = told || e.Kind == KindHeldList
		}
	}
	if held := s.st.State().Held; len(held) != 0 {
		t.Fatalf("a stale row is still listed: %+v", held)
	}
	s.st.mu.Lock()
	n := len(s.st.others)
	s.st.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d stale rows kept", n)
	}
}

// The announcement that the held list emptied is sent again at the next
// refresh when it could not go out: else the other servers would list
// requests that are gone until their rows go stale.
func TestAnEmptyListThatFailedToGoOutIsAnnouncedAgain(t *testing.T) {
	s := newSharedStepper(t)
	if err := s.st.Turn(true, "test"); err != nil {
		t.Fatal(err)
	}
	req := &fakeRequest{id: "rq_1", done: make(chan struct{}), hub: s.hub}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		s.st.Hold(req, CheckClaimed)
	}()
	waitFor(t, "the held request to be announced", func() bool {
		_, lists := s.peers.count()
		return len(lists) > 0 && len(lists[len(lists)-1]) == 1
	})

	s.peers.failing.Store(true)
	if _, err := s.st.Next("rq_1", false); err != nil {
		t.Fatal(err)
	}
	<-gone
	waitFor(t, "the empty list to be tried", func() bool {
		failed, _ := s.peers.count()
		return failed > 0
	})
	s.peers.failing.Store(false)
	tick(t, s.announce)
	waitFor(t, "the empty list to go out", func() bool {
		_, lists := s.peers.count()
		return len(lists[len(lists)-1]) == 0
	})
	if _, lists := s.peers.count(); strings.Count(fmtLists(lists), "[]") != 1 {
		t.Fatalf("announced %s", fmtLists(lists))
	}
}

func fmtLists(lists [][]heldWire) string {
	b, _ := json.Marshal(lists)
	return strings.ReplaceAll(string(b), "null", "[]")
}
