package step_test

import (
	"context"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// request is a step.Request with nothing behind it: no HTTP, no database.
type request struct {
	id       string
	progress step.Progress
	done     chan struct{}
	hub      *live.Hub
	renewals chan time.Duration
}

func (r *request) ID() string                 { return r.id }
func (r *request) Step() *step.Progress       { return &r.progress }
func (r *request) Done() <-chan struct{}      { return r.done }
func (r *request) PauseWork() (resume func()) { return func() {} }
func (r *request) RenewWork(lease time.Duration) {
	r.renewals <- lease
}
func (r *request) Describe() step.HeldRequest {
	return step.HeldRequest{Request: r.id, Key: "k", OrderID: "A-1", Scope: "s"}
}
func (r *request) Publish(kind live.Kind, msg string) {
	r.hub.Publish(live.Event{Kind: kind, Request: r.id, Message: msg})
}

// The stepper holds a request at each checkpoint it reaches while step
// mode is on, renews its work's lease while it waits, and lets it go on
// Next; it needs only the room, the hub and the clock it is given.
func TestStepperHoldsARequestUntilNext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hub := live.New(0, nil)
	r := room.New(room.Memory(), "id", "s1", room.Defaults, func(old, next room.State) {}, t.Logf)
	st := step.New(ctx, step.Config{Name: "s1", Lease: 30 * time.Second, Room: r, Hub: hub, Now: time.Now, Logf: t.Logf})
	st.After = func(time.Duration) <-chan time.Time { return nil }
	if err := st.Turn(true, "test"); err != nil || !st.On() {
		t.Fatalf("turn on: %v, on %v", err, st.On())
	}
	req := &request{id: "rq_1", done: make(chan struct{}), hub: hub, renewals: make(chan time.Duration, 10)}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		st.At(req, live.Claimed)
	}()
	select {
	case lease := <-req.renewals:
		if lease != 30*time.Second {
			t.Fatalf("lease %v", lease)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request's lease was never renewed")
	}
	held := st.State().Held
	if len(held) != 1 || held[0].Request != "rq_1" || held[0].Checkpoint != step.CheckClaimed.String() || held[0].Server != "s1" {
		t.Fatalf("held: %+v", held)
	}
	if id, err := st.Next("", false); err != nil || id != "rq_1" {
		t.Fatalf("next: %q %v", id, err)
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not let the request go on")
	}
	// A checkpoint it passed already does not hold it again.
	st.At(req, live.Received)
	if n := len(st.State().Held); n != 0 {
		t.Fatalf("%d held after Next", n)
	}
}

// holdThenNext holds a request of st at "key claimed" and lets it go on
// with Next, returning the leases its work was renewed with meanwhile.
func holdThenNext(t *testing.T, st *step.Stepper, hub *live.Hub) []time.Duration {
	t.Helper()
	if err := st.Turn(true, "test"); err != nil {
		t.Fatal(err)
	}
	req := &request{id: "rq_1", done: make(chan struct{}), hub: hub, renewals: make(chan time.Duration)}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		st.At(req, live.Claimed)
	}()
	var leases []time.Duration
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("the held request renews its lease without end")
		}
		select {
		case l := <-req.renewals:
			leases = append(leases, l)
			if len(leases) == 1 { // it is held now
				if _, err := st.Next("", false); err != nil {
					t.Fatal(err)
				}
			}
			continue
		case <-gone:
		case <-time.After(10 * time.Second):
			t.Fatal("Next did not let the request go on")
		}
		return leases
	}
}

// A hold that ends renews the lease once more: the work resumes with as
// much of its deadline as it had, and the sweepers must not take its key
// as soon as a lease from the last renewal during the hold runs out.
func TestStepperRenewsTheLeaseWhenTheHoldEnds(t *testing.T) {
	hub := live.New(0, nil)
	r := room.New(room.Memory(), "id", "s1", room.Defaults, func(old, next room.State) {}, t.Logf)
	st := step.New(t.Context(), step.Config{Name: "s1", Lease: 30 * time.Second, Room: r, Hub: hub, Now: time.Now, Logf: t.Logf})
	st.After = func(time.Duration) <-chan time.Time { return nil }
	st.Every = func(time.Duration) (<-chan time.Time, func()) { return nil, func() {} } // no tick during the hold
	leases := holdThenNext(t, st, hub)
	if len(leases) != 2 || leases[0] != 30*time.Second || leases[1] != 30*time.Second {
		t.Fatalf("leases renewed %v, want one when held and one when let go", leases)
	}
}

// A lease of a few nanoseconds (a lock timeout that small) renews on a
// ticker of a millisecond rather than panicking on a zero period.
func TestStepperRenewsATinyLeaseWithoutPanicking(t *testing.T) {
	hub := live.New(0, nil)
	r := room.New(room.Memory(), "id", "s1", room.Defaults, func(old, next room.State) {}, t.Logf)
	st := step.New(t.Context(), step.Config{Name: "s1", Lease: 2 * time.Nanosecond, Room: r, Hub: hub, Now: time.Now, Logf: t.Logf})
	st.After = func(time.Duration) <-chan time.Time { return nil }
	if leases := holdThenNext(t, st, hub); len(leases) < 2 {
		t.Fatalf("leases renewed %v", leases)
	}
}

// Play lets go a request the presenter stepped on a moment before, still
// on its way to its next checkpoint: it is not held there, nor after. A
// request that arrives after Play is held as ever (step mode stays on).
func TestPlayLetsGoARequestBetweenTwoCheckpoints(t *testing.T) {
	hub := live.New(0, nil)
	r := room.New(room.Memory(), "id", "s1", room.Defaults, func(old, next room.State) {}, t.Logf)
	st := step.New(t.Context(), step.Config{Name: "s1", Room: r, Hub: hub, Now: time.Now, Logf: t.Logf})
	st.After = func(time.Duration) <-chan time.Time { return nil }
	holdThenNext(t, st, hub) // rq_1 stepped on from "key claimed"
	// The request's goroutine has left "key claimed" and not reached the
	// gateway call yet when the presenter presses Play.
	req := &request{id: "rq_2", done: make(chan struct{}), hub: hub, renewals: make(chan time.Duration, 10)}
	held := make(chan struct{})
	go func() {
		defer close(held)
		st.At(req, live.Claimed)
	}()
	waitHeldCount(t, st, 1)
	if _, err := st.Next("rq_2", false); err != nil {
		t.Fatal(err)
	}
	<-held
	if n := st.Play(); n != 0 {
		t.Fatalf("Play let %d held requests go, want none held", n)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.At(req, live.GatewayCall)
		st.At(req, live.Charged)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the request stepped on before Play was held again: %+v", st.State().Held)
	}
	// A new request is held: Play did not turn step mode off.
	later := &request{id: "rq_3", done: make(chan struct{}), hub: hub, renewals: make(chan time.Duration, 10)}
	go st.At(later, live.Received)
	waitHeldCount(t, st, 1)
	st.Play()
}

// waitHeldCount waits, bounded, until st holds n requests.
func waitHeldCount(t *testing.T, st *step.Stepper, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for len(st.State().Held) != n {
		if time.Now().After(deadline) {
			t.Fatalf("held %d, want %d", len(st.State().Held), n)
		}
		time.Sleep(time.Millisecond)
	}
}
