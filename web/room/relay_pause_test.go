package room

import (
	"sync"
	"testing"
	"time"

	"paytwice/web/live"
)

// pacedRelay is s1's relay on a clock that only advance moves, joined with
// s2, whose pauses between batches the test takes in hand: each pause
// asked for goes to pauses, and the relay reads its hub again only when
// resume is called.
type pacedRelay struct {
	hub     *live.Hub
	advance func(time.Duration)
	pauses  chan time.Duration
	mu      sync.Mutex
	waiting []chan time.Time
}

func startPaced(t *testing.T) *pacedRelay {
	t.Helper()
	peers := SharedMemory()
	p := &pacedRelay{pauses: make(chan time.Duration, 16)}
	r, hub, advance := startOnAClockWith(t, peers, "paced-test", func(r *Relay) {
		r.after = func(d time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			p.mu.Lock()
			p.waiting = append(p.waiting, c)
			p.mu.Unlock()
			p.pauses <- d
			return c
		}
	})
	p.hub, p.advance = hub, advance
	b := startRelayed(t, peers, "s2")
	waitFor(t, "the relays to hear each other", func() bool { return r.Others() == 1 && b.relay.Others() == 1 })
	return p
}

// nextPause is the pause the relay asks for after its next batch.
func (p *pacedRelay) nextPause(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-p.pauses:
		return d
	case <-time.After(2 * time.Minute):
		t.Fatal("the relay sent no batch")
		return 0
	}
}

// resume ends the pause the relay is in.
func (p *pacedRelay) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.waiting {
		c <- time.Time{}
	}
	p.waiting = nil
}

// publish publishes n events of payments on s1.
func (p *pacedRelay) publish(n int) {
	for i := range n {
		p.hub.Publish(live.Event{Kind: live.Received, Request: "rq_" + string(rune('a'+i%26)), Key: "k"})
	}
}

// While the room's events come at busy mode's rate, every board draws
// totals rather than each request, and the relay sends its batches half
// as often: each batch costs every server a commit or a wake-up and a
// read, however few events it carries. At a classroom's pace, and after
// a quiet spell, it pauses as before.
func TestRelayPausesLongerOnlyWhileTheRoomIsBusy(t *testing.T) {
	p := startPaced(t)

	p.publish(1)
	if d := p.nextPause(t); d != relayPause {
		t.Fatalf("after its first batch the relay pauses %v, want %v", d, relayPause)
	}
	// 40 events in the 50 ms of the pause: 800 a second, a busy room.
	p.advance(relayPause)
	p.publish(40)
	p.resume()
	if d := p.nextPause(t); d != relayBusyPause {
		t.Fatalf("after 40 events in %v the relay pauses %v, want %v", relayPause, d, relayBusyPause)
	}
	// Still busy: 60 events in 100 ms.
	p.advance(relayBusyPause)
	p.publish(60)
	p.resume()
	if d := p.nextPause(t); d != relayBusyPause {
		t.Fatalf("after 60 events in %v the relay pauses %v, want %v", relayBusyPause, d, relayBusyPause)
	}
	// A classroom's pace: 4 events in 100 ms (40 a second).
	p.advance(relayBusyPause)
	p.publish(4)
	p.resume()
	if d := p.nextPause(t); d != relayPause {
		t.Fatalf("after 4 events in %v the relay pauses %v, want %v", relayBusyPause, d, relayPause)
	}
	// A lone event after a quiet spell.
	p.advance(10 * time.Second)
	p.publish(1)
	p.resume()
	if d := p.nextPause(t); d != relayPause {
		t.Fatalf("after a quiet spell the relay pauses %v, want %v", d, relayPause)
	}
}

// The threshold, event by event: busy from live.BusyEvents a second.
func TestPauseAfterTurnsAtBusyModesRate(t *testing.T) {
	for _, c := range []struct {
		n       int
		elapsed time.Duration
		want    time.Duration
	}{
		{29, 50 * time.Millisecond, relayPause},     // 580 a second
		{30, 50 * time.Millisecond, relayBusyPause}, // 600
		{600, time.Second, relayBusyPause},
		{599, time.Second, relayPause},
		{5, 0, relayPause}, // no time measured
	} {
		if got := pauseAfter(c.n, c.elapsed); got != c.want {
			t.Errorf("pauseAfter(%d, %v) = %v, want %v", c.n, c.elapsed, got, c.want)
		}
	}
}
