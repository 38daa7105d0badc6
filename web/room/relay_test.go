package room

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/web/live"
)

// hubSink publishes what it hears into its hub, as a server does.
type hubSink struct {
	hub    *live.Hub
	missed atomic.Int64
}

func (h *hubSink) Heard(entries []live.Entry) { h.hub.PublishRemoteAll(entries) }

func (h *hubSink) Missed() { h.missed.Add(1) }

// relayedServer is one server's hub and relay on peers.
type relayedServer struct {
	hub   *live.Hub
	sink  *hubSink
	relay *Relay
}

// startRelayed starts a relay for a server named name on peers, which
// keeps the events of the local kinds to itself, and waits until it
// listens. Its idle check never runs: some tests' peers lie about the
// kept batches (cutListener.notKept) at moments a check on a real clock
// could hit. startRelayedTicked hands it the ticks.
func startRelayed(t *testing.T, peers Peers, name string, local ...live.Kind) relayedServer {
	t.Helper()
	return startRelayedTicked(t, peers, name, make(chan time.Time), local...)
}

// startRelayedTicked is startRelayed whose relay checks for missed batches
// at each of ticks.
func startRelayedTicked(t *testing.T, peers Peers, name string, ticks <-chan time.Time, local ...live.Kind) relayedServer {
	t.Helper()
	hub := live.New(0, nil)
	hub.SetServer(name)
	sink := &hubSink{hub: hub}
	r := StartRelay(t.Context(), RelayConfig{Peers: peers, Hub: hub, Sink: sink, Name: name, IdleChecks: ticks,
		Local: func(k live.Kind) bool {
			for _, l := range local {
				if k == l {
					return true
				}
			}
			return false
		}})
	if r == nil {
		t.Skip("built with -tags norelay")
	}
	waitFor(t, "the relay to listen", func() bool { return r.Listening() > 0 })
	return relayedServer{hub, sink, r}
}

// waitJoined waits until each relay has heard every other: until then a
// relay keeps its events to itself.
func waitJoined(t *testing.T, servers ...relayedServer) {
	t.Helper()
	for _, s := range servers {
		waitFor(t, "the relays to hear each other", func() bool { return s.relay.Others() >= len(servers)-1 })
	}
}

// waitFor polls cond, a condition on what other goroutines do, for up
// to ten seconds.
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

// remote returns the events hub received from other servers.
func remote(hub *live.Hub) []live.Event {
	var out []live.Event
	for _, e := range hub.Recent(live.DefaultSize) {
		if e.Remote {
			out = append(out, e.Event)
		}
	}
	return out
}

func TestRelayOnSharedMemory(t *testing.T) {
	peers := SharedMemory()
	const mine = live.Kind("mine")
	a := startRelayed(t, peers, "s1", mine)
	b := startRelayed(t, peers, "s2")
	waitJoined(t, a, b)

	a.hub.Publish(live.Event{Kind: mine, Message: "stays on s1"})
	a.hub.Publish(live.Event{Kind: live.Gap, Message: "stays on s1 too"})
	a.hub.Publish(live.Event{Kind: live.Received, Request: "rq_1", Key: "k1", Message: "POST /v1/payments"})
	b.hub.Publish(live.Event{Kind: live.Claimed, Request: "rq_2", Key: "k2"})

	waitFor(t, "each server to hear the other's event", func() bool { return len(remote(a.hub)) == 1 && len(remote(b.hub)) == 1 })
	if got := remote(b.hub)[0]; got.Kind != live.Received || got.Server != "s1" || got.Key != "k1" {
		t.Errorf("s2 heard %+v", got)
	}
	if got := remote(a.hub)[0]; got.Kind != live.Claimed || got.Server != "s2" {
		t.Errorf("s1 heard %+v", got)
	}
	// Nothing more comes: not s1's own kinds, not its own notifications.
	b.hub.Publish(live.Event{Kind: live.Completed, Request: "rq_2", Key: "k2"})
	waitFor(t, "s2's second event on s1", func() bool { return len(remote(a.hub)) == 2 })
	if n := len(remote(b.hub)); n != 1 {
		t.Errorf("s2 heard %d events of s1, want only the one it may send: %+v", n, remote(b.hub))
	}
	if a.sink.missed.Load() != 0 || b.sink.missed.Load() != 0 {
		t.Errorf("a relay that never lost its connection said it missed notifications")
	}
}

// recordingNotifier keeps the size of every notification sent.
type recordingNotifier struct {
	Peers
	mu    sync.Mutex
	sizes []int // of every notification
	calls int   // of Notify and NotifyNumbered
}

func (n *recordingNotifier) Notify(ctx context.Context, channel string, payloads ...string) error {
	n.mu.Lock()
	for _, p := range payloads {
		n.sizes = append(n.sizes, len(p))
	}
	n.calls++
	n.mu.Unlock()
	return n.Peers.Notify(ctx, channel, payloads...)
}

func (n *recordingNotifier) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	n.mu.Lock()
	for _, p := range payloads {
		n.sizes = append(n.sizes, len(p))
	}
	n.calls++
	n.mu.Unlock()
	return n.Peers.NotifyNumbered(ctx, channel, payloads...)
}

func TestRelayBatchesKeepOrderAndFitTheLimit(t *testing.T) {
	peers := SharedMemory()
	b := startRelayed(t, peers, "s2")
	const limit = 1000
	rec := &recordingNotifier{Peers: peers}
	r := newRelay(RelayConfig{Peers: rec, Name: "s1"}, "batch-test")
	r.maxPayload = limit

	var events []live.Event
	for i := range 40 {
		events = append(events, live.Event{Kind: live.Pruned, Server: "s1", Time: time.Now(), Message: fmt.Sprintf("event %02d", i)})
	}
	// One message longer than a whole notification: it is cut short, not dropped.
	events[20].Message = "event 20 " + strings.Repeat("é", limit)
	if failed, gapLost := r.notify(context.Background(), events, false); failed != 0 || gapLost {
		t.Fatalf("notify: %d failed", failed)
	}
	if len(rec.sizes) < 2 || len(rec.sizes) > 20 {
		t.Errorf("40 events went out in %d notifications, want a few", len(rec.sizes))
	}
	if rec.calls != 1 {
		t.Errorf("one batch was sent in %d calls, want 1 (one commit)", rec.calls)
	}
	for _, n := range rec.sizes {
		if n > limit {
			t.Errorf("a notification of %d bytes, over the limit of %d", n, limit)
		}
	}
	var got []live.Event
	waitFor(t, "s2 to receive the 40 events", func() bool {
		got = remote(b.hub)
		return len(got) == 40
	})
	for i, e := range got {
		if !strings.HasPrefix(e.Message, fmt.Sprintf("event %02d", i)) || e.Server != "s1" {
			t.Fatalf("event %d arrived as %q from %q", i, e.Message, e.Server)
		}
	}
	if m := got[20].Message; !strings.HasSuffix(m, "…") || len(m) > limit {
		t.Errorf("the long message arrived as %d bytes ending %q", len(m), m[max(0, len(m)-10):])
	}
}

// gatedNotifier fails every notification that carries "drop", and holds
// the first one until gate is closed.
type gatedNotifier struct {
	Peers
	entered, gate chan struct{}
	once          sync.Once
}

func (n *gatedNotifier) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	n.once.Do(func() {
		close(n.entered)
		<-n.gate
	})
	for _, p := range payloads {
		if strings.Contains(p, "drop") {
			return 0, errors.New("the database is away")
		}
	}
	return n.Peers.NotifyNumbered(ctx, channel, payloads...)
}

// The relay tells the others each event they missed once. A batch goes
// out whole or not at all: one that fails is owed whole, the gap it
// carried included, and told in the next batch's gap, once.
func TestRelayTellsEachMissedEventOnce(t *testing.T) {
	peers := SharedMemory()
	b := startRelayed(t, peers, "s2")
	hub := live.New(0, nil)
	hub.SetServer("s1")
	n := &gatedNotifier{Peers: peers, entered: make(chan struct{}), gate: make(chan struct{})}
	r := newRelay(RelayConfig{Peers: n, Hub: hub, Name: "s1"}, "gap-once")
	r.maxPayload = 600   // each event below a notification of its own
	r.joined.Store(true) // as if it had heard s2 (it does not listen)
	start := hub.LastSeq()
	go r.send(t.Context(), hub.Subscribe(start), start)
	pad := strings.Repeat("x", 450)
	publish := func(msg string) {
		hub.Publish(live.Event{Kind: live.Pruned, Server: "s1", Time: time.Now(), Message: msg + " " + pad})
	}

	publish("drop 1") // fails: one event missed
	select {
	case <-n.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never sent")
	}
	// While the first batch is on its way, the next one gathers: the gap
	// of "drop 1", "keep 2" and "drop 3", which fails whole.
	publish("keep 2")
	publish("drop 3")
	close(n.gate)
	waitFor(t, "the second batch to fail", func() bool { return r.Skipped() == 3 })
	publish("keep 4") // goes out after the gap of all three
	waitFor(t, "s2 to receive keep 4", func() bool { return received(b.hub, "keep 4") })
	if received(b.hub, "keep 2") {
		t.Fatal("keep 2 arrived, from a batch that failed")
	}

	told := 0
	for _, e := range remote(b.hub) {
		if e.Kind == live.Gap {
			count, _, _ := strings.Cut(e.Message, " ")
			c, err := strconv.Atoi(count)
			if err != nil {
				t.Fatalf("gap %q", e.Message)
			}
			told += c
		}
	}
	if told != 3 || r.Skipped() != 3 {
		t.Fatalf("three events missed; the gaps told %d, the relay counts %d skipped", told, r.Skipped())
	}
}

// received reports whether hub got from another server an event whose
// message starts with msg.
func received(hub *live.Hub, msg string) bool {
	for _, e := range remote(hub) {
		if strings.HasPrefix(e.Message, msg+" ") {
			return true
		}
	}
	return false
}

// A relay that has heard no other sends nothing but its hello. A second
// relay's hello makes the two know of each other; the events the first
// kept to itself just before are sent to the newcomer then, late but
// whole, before the events that follow, and no gap is told.
func TestARelayAloneSendsOnlyItsHello(t *testing.T) {
	peers := SharedMemory()
	rec := &recordingNotifier{Peers: peers}
	a := startRelayed(t, rec, "s1")
	a.hub.Publish(live.Event{Kind: live.Received, Request: "rq_1", Key: "k1"})
	a.hub.Publish(live.Event{Kind: live.Claimed, Request: "rq_1", Key: "k1"})
	waitFor(t, "s1's relay to keep its two events", func() bool { return a.relay.Kept() == 2 })
	rec.mu.Lock()
	sent := slices.Clone(rec.sizes)
	rec.mu.Unlock()
	hello := len(a.relay.helloPayload(1)) // as long as its next eight
	for _, n := range sent {
		if n != hello {
			t.Fatalf("a relay alone sent a notification of %d bytes; only hellos (%d bytes) were due: %v", n, hello, sent)
		}
	}
	if len(sent) == 0 {
		t.Fatal("the relay never said hello")
	}

	b := startRelayed(t, peers, "s2")
	waitJoined(t, a, b)
	a.hub.Publish(live.Event{Kind: live.Completed, Request: "rq_1", Key: "k1", Status: 201})
	waitFor(t, "s2 to hear s1's event after joining", func() bool {
		return slices.ContainsFunc(remote(b.hub), func(e live.Event) bool { return e.Kind == live.Completed })
	})
	if got, want := kindsOf(remote(b.hub)), []live.Kind{live.Received, live.Claimed, live.Completed}; !slices.Equal(got, want) {
		t.Errorf("s2 heard %v of s1, want %v: the events kept while alone, then the one after", got, want)
	}
	if a.relay.Skipped() != 0 {
		t.Errorf("s1's relay counts %d events skipped; it sent every one", a.relay.Skipped())
	}
}

// kindsOf lists the kinds of events, in order.
func kindsOf(events []live.Event) []live.Kind {
	out := make([]live.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}

// A server just started takes payments before its relay has heard the
// others, which listened all along. What it kept then reaches them when
// the relays hear each other, and its own pages, which drew those events
// at once, do not get them again when they come back in the room's order;
// the events after the join come back placed, as ever.
func TestARelayAloneHandsItsKeptEventsBackOnce(t *testing.T) {
	peers := SharedMemory()
	var mu sync.Mutex
	var echoed []live.Entry
	hub := live.New(0, nil)
	hub.SetServer("s1")
	r := StartRelay(t.Context(), RelayConfig{Peers: peers, Hub: hub, Sink: &hubSink{hub: live.New(0, nil)}, Name: "s1",
		IdleChecks: make(chan time.Time),
		Echo:       func(entries []live.Entry) { mu.Lock(); echoed = append(echoed, entries...); mu.Unlock() }})
	if r == nil {
		t.Skip("built with -tags norelay")
	}
	echoes := func() []live.Entry { mu.Lock(); defer mu.Unlock(); return slices.Clone(echoed) }
	waitFor(t, "the relay to listen", func() bool { return r.Listening() > 0 })
	hub.Publish(live.Event{Kind: live.Received, Request: "rq_1", Key: "k1"})
	hub.Publish(live.Event{Kind: live.Claimed, Request: "rq_1", Key: "k1"})
	waitFor(t, "s1's pages to get the two events kept", func() bool { return len(echoes()) == 2 })

	b := startRelayed(t, peers, "s2")
	waitFor(t, "the relays to hear each other", func() bool { return r.Others() == 1 && b.relay.Others() == 1 })
	hub.Publish(live.Event{Kind: live.Completed, Request: "rq_1", Key: "k1", Status: 201})
	// s1's own batches come back to it in the order they were sent: the
	// kept events' first, so once the last event is back, so are they.
	waitFor(t, "s1's pages to get the event after the join", func() bool { return len(echoes()) >= 3 })
	waitFor(t, "s2 to hear s1's three events", func() bool { return len(remote(b.hub)) >= 3 })

	got := echoes()
	var kinds []live.Kind
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	if want := []live.Kind{live.Received, live.Claimed, live.Completed}; !slices.Equal(kinds, want) {
		t.Fatalf("s1's pages got %v of its own events, want %v, each once", kinds, want)
	}
	if !got[0].Place.IsZero() || !got[1].Place.IsZero() || got[2].Place.IsZero() {
		t.Errorf("places handed back %v %v %v: the kept events at once, unplaced, the last one at its place", got[0].Place, got[1].Place, got[2].Place)
	}
	if got, want := kindsOf(remote(b.hub)), []live.Kind{live.Received, live.Claimed, live.Completed}; !slices.Equal(got, want) {
		t.Errorf("s2 heard %v of s1, want %v", got, want)
	}
}

// A relay alone holds on to at most maxKeptEvents events to send when it
// joins the others: those beyond are told to them as a gap.
func TestARelayOwesAsAGapWhatItKeptBeyondItsBound(t *testing.T) {
	peers := SharedMemory()
	a := startRelayed(t, peers, "s1")
	const over = 3
	for i := range maxKeptEvents + over {
		a.hub.Publish(live.Event{Kind: live.Received, Request: fmt.Sprintf("rq_%d", i)})
	}
	waitFor(t, "s1's relay to keep every event", func() bool { return a.relay.Kept() == maxKeptEvents+over })
	b := startRelayed(t, peers, "s2")
	waitJoined(t, a, b)
	a.hub.Publish(live.Event{Kind: live.Completed, Request: "rq_0", Status: 201})
	waitFor(t, "s2 to hear s1's event after joining", func() bool {
		return slices.ContainsFunc(remote(b.hub), func(e live.Event) bool { return e.Kind == live.Completed })
	})
	heard := remote(b.hub)
	want := maxKeptEvents + 2 // the events held on to, the gap, the last one
	if len(heard) != want {
		t.Fatalf("s2 heard %d events of s1, want %d", len(heard), want)
	}
	for i, e := range heard[:maxKeptEvents] {
		if e.Kind != live.Received || e.Request != fmt.Sprintf("rq_%d", i) {
			t.Fatalf("s2's event %d is %s %s, want the %d-th event kept", i, e.Kind, e.Request, i)
		}
	}
	if gap := heard[maxKeptEvents]; gap.Kind != live.Gap || !strings.HasPrefix(gap.Message, fmt.Sprintf("%d events", over)) {
		t.Errorf("after the events held on to s2 heard %s %q, want a gap of %d events", gap.Kind, gap.Message, over)
	}
	if a.relay.Skipped() != over {
		t.Errorf("s1's relay counts %d events skipped, want %d", a.relay.Skipped(), over)
	}
}

// startOnAClock starts s1's relay, with id, on a real-time clock that only
// advance moves.
func startOnAClock(t *testing.T, peers Peers, id string) (r *Relay, hub *live.Hub, advance func(time.Duration)) {
	t.Helper()
	return startOnAClockWith(t, peers, id, nil)
}

// startOnAClockWith is startOnAClock with configure (unless nil) called on
// the relay before it starts.
func startOnAClockWith(t *testing.T, peers Peers, id string, configure func(*Relay)) (r *Relay, hub *live.Hub, advance func(time.Duration)) {
	t.Helper()
	hub = live.New(0, nil)
	hub.SetServer("s1")
	var mu sync.Mutex
	now := time.Now()
	r = newRelay(RelayConfig{Peers: peers, Hub: hub, Sink: &hubSink{hub: live.New(0, nil)}, Name: "s1"}, id)
	r.realNow = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	if configure != nil {
		configure(r)
	}
	start := hub.LastSeq()
	go r.send(t.Context(), hub.Subscribe(start), start)
	go r.greet(t.Context())
	go r.listen(t.Context())
	waitFor(t, "s1's relay to listen", func() bool { return r.Listening() > 0 })
	return r, hub, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
}

// Events a relay kept to itself long before another relay came are owed
// to nobody: the newcomer was not listening then.
func TestARelayOwesNothingKeptBeforeTheJoinWindow(t *testing.T) {
	peers := SharedMemory()
	r, hub, advance := startOnAClock(t, peers, "window-test")

	hub.Publish(live.Event{Kind: live.Received, Request: "rq_1", Key: "k1"})
	waitFor(t, "s1's relay to keep the event", func() bool { return r.Kept() == 1 })
	advance(relayJoinWindow + time.Second)

	b := startRelayed(t, peers, "s2")
	waitFor(t, "the relays to hear each other", func() bool { return r.Others() == 1 && b.relay.Others() == 1 })
	hub.Publish(live.Event{Kind: live.Completed, Request: "rq_1", Key: "k1", Status: 201})
	waitFor(t, "s2 to hear s1's event", func() bool { return len(remote(b.hub)) > 0 })
	if got := remote(b.hub); len(got) != 1 || got[0].Kind != live.Completed {
		t.Errorf("s2 heard %+v, want s1's one event after the join and no gap", got)
	}
	if r.Skipped() != 0 {
		t.Errorf("the relay counts %d events skipped; none were owed", r.Skipped())
	}
}

// The events a relay kept just before another relay joined are owed to
// it however long the relay then waits for its next event: the join
// window is counted back from the join, not from the next event.
func TestARelayOwesWhatItKeptJustBeforeTheJoinWhenItsNextEventIsLate(t *testing.T) {
	peers := SharedMemory()
	r, hub, advance := startOnAClock(t, peers, "late-test")

	hub.Publish(live.Event{Kind: live.Received, Request: "rq_1", Key: "k1"})
	waitFor(t, "s1's relay to keep the event", func() bool { return r.Kept() == 1 })
	b := startRelayed(t, peers, "s2")
	waitFor(t, "the relays to hear each other", func() bool { return r.Others() == 1 && b.relay.Others() == 1 })
	// s1 publishes nothing for longer than the window after the join.
	advance(relayJoinWindow + time.Second)
	hub.Publish(live.Event{Kind: live.Completed, Request: "rq_1", Key: "k1", Status: 201})
	waitFor(t, "s2 to hear s1's event", func() bool {
		return slices.ContainsFunc(remote(b.hub), func(e live.Event) bool { return e.Kind == live.Completed })
	})
	if got, want := kindsOf(remote(b.hub)), []live.Kind{live.Received, live.Completed}; !slices.Equal(got, want) {
		t.Errorf("s2 heard %v of s1, want %v: the event kept just before it joined, then the one after", got, want)
	}
}

// payloadsNotifier keeps every payload sent, in order.
type payloadsNotifier struct {
	Peers
	payloads []string
}

func (n *payloadsNotifier) NotifyNumbered(_ context.Context, _ string, payloads ...string) (uint64, error) {
	n.payloads = append(n.payloads, payloads...)
	return uint64(len(n.payloads)), nil
}

// A batch split over several notifications books each one's own events
// for its echo, and only those: the payloads' events share one array,
// and no payload's events may be overwritten by the next one's.
func TestRelayBooksEachNotificationsOwnEvents(t *testing.T) {
	n := &payloadsNotifier{}
	r := newRelay(RelayConfig{Peers: n, Name: "s1", Echo: func([]live.Entry) {}}, "book-test")
	r.maxPayload = 600
	var events []live.Event
	for i := range 12 {
		events = append(events, live.Event{Seq: uint64(100 + i), Kind: live.Pruned, Server: "s1", Time: time.Now(),
			Message: fmt.Sprintf("event %02d %s", i, strings.Repeat("x", 150))})
	}
	want := slices.Clone(events) // notify clears the Seqs it sends
	if failed, gapLost := r.notify(t.Context(), events, false); failed != 0 || gapLost {
		t.Fatalf("notify: %d failed", failed)
	}
	if len(n.payloads) < 3 {
		t.Fatalf("the batch went out in %d notifications, want several", len(n.payloads))
	}
	next := 0
	for i, p := range n.payloads {
		booked, ok := r.echoes.take(p)
		if !ok || len(booked) == 0 {
			t.Fatalf("notification %d: nothing booked", i)
		}
		for _, e := range booked {
			if next >= len(want) || e.Message != want[next].Message || e.Seq != want[next].Seq {
				t.Fatalf("notification %d booked %q (seq %d), want event %d", i, e.Message, e.Seq, next)
			}
			if !strings.Contains(p, e.Message[:len("event 00")]) {
				t.Errorf("notification %d booked %q, which it does not carry", i, e.Message[:len("event 00")])
			}
			next++
		}
	}
	if next != len(want) {
		t.Errorf("%d events booked of %d", next, len(want))
	}
}
