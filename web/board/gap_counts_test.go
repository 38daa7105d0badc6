package board

import (
	"testing"

	"paytwice/web/live"
)

// A board that fell further behind than the hub holds states every
// answer the room gave, also those whose events went round the ring
// before it read them: the counters are what the room's answers were.
func TestABoardThatFellBehindCountsTheAnswersItDidNotRead(t *testing.T) {
	b, hub := newBoardOnSmallHub(t, nil)
	own := func(kind live.Kind, request string) {
		hub.Publish(live.Event{Kind: kind, Request: request, Scope: "session:me", Message: "POST /v1/payments"})
	}
	remote := func(kind live.Kind, request string) { publishRemote(hub, kind, request, 0) }
	own(live.Received, "rq_first")
	b.caughtUp(t)

	// The board is held while the ring goes round several times.
	b.applying.Lock()
	for i := range 30 {
		own(live.Received, "rq_own")
		remote(live.Received, "rq_other")
		if i%3 == 0 {
			own(live.Replayed, "rq_own")
			remote(live.Conflict, "rq_other")
		}
	}
	b.applying.Unlock()
	own(live.Received, "rq_after")
	b.caughtUp(t)

	c := b.Snapshot().Counters
	if c.Requests != 1+30+30+1 || c.Replays != 10 || c.Conflicts != 10 {
		t.Errorf("after falling behind the board counts %d requests, %d replays, %d 409s; the room answered 62, 10, 10",
			c.Requests, c.Replays, c.Conflicts)
	}
}

// The same with the relay's order: this server's own payments are
// counted at their echo, and a board that fell behind while some echoes
// were lost and others still to come counts each payment once.
func TestABoardThatFellBehindCountsItsOwnEchoedAnswersOnce(t *testing.T) {
	b, hub := newBoardOnSmallHub(t, ownAtEcho)
	own := func(request string) live.Event {
		return hub.Publish(live.Event{Kind: live.Received, Request: request, Scope: "session:me", Message: "POST /v1/payments"})
	}
	echo := func(e live.Event) { hub.PublishEchoes([]live.Entry{{Event: e, Own: e.Seq}}) }
	remote := func(request string) { publishRemote(hub, live.Received, request, 0) }
	echo(own("rq_first"))
	b.caughtUp(t)

	b.applying.Lock()
	var later []live.Event
	for i := range 20 {
		e := own("rq_own")
		remote("rq_other")
		if i%2 == 0 {
			echo(e) // lost with the ring
		} else {
			later = append(later, e)
		}
	}
	b.applying.Unlock()
	b.caughtUp(t)
	for _, e := range later {
		echo(e) // after the board read the tallies
	}
	echo(own("rq_after"))
	b.caughtUp(t)

	if c := b.Snapshot().Counters; c.Requests != 1+20+20+1 {
		t.Errorf("after falling behind the board counts %d requests; the room answered 42", c.Requests)
	}
}

// A reset among the events a board fell behind on empties its counters
// as the reset's event would have: they count the answers since, this
// server's and the other servers' of the new reset gen, not those of
// before it, nor another server's relayed late from before it.
func TestABoardThatFellBehindAResetCountsFromTheReset(t *testing.T) {
	b, hub := newBoardOnSmallHub(t, nil)
	hub.RestartTally(1)
	own := func(kind live.Kind) {
		hub.Publish(live.Event{Kind: kind, Request: "rq_own", Scope: "session:me", Message: "POST /v1/payments"})
	}
	remote := func(gen uint64) { publishRemote(hub, live.Received, "rq_other", gen) }
	own(live.Received)
	remote(1)
	b.caughtUp(t)

	b.applying.Lock()
	for range 20 {
		own(live.Received)
		remote(1)
	}
	own(live.Reset)
	hub.RestartTally(2)
	for range 5 {
		own(live.Received)
		remote(2)
		remote(1) // relayed late, from before the reset
	}
	b.applying.Unlock()
	b.caughtUp(t)

	if c := b.Snapshot().Counters; c.Requests != 10 {
		t.Errorf("after falling behind over a reset the board counts %d requests; the room answered 10 since", c.Requests)
	}
}
