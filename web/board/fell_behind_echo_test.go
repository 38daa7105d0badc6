package board

import (
	"testing"
	"time"

	"paytwice/views"
	"paytwice/web/live"
)

// ownAtEcho is Config.Ordered with the relay's order: this server's own
// events are drawn at their echo.
func ownAtEcho(e *live.Entry) bool { return !e.Remote && !e.Echo }

// newBoardOnSmallHub is a test board on a hub of 16 events, which a board
// held for a moment falls behind; ordered is its Config.Ordered.
func newBoardOnSmallHub(t *testing.T, ordered func(*live.Entry) bool) (*testBoard, *live.Hub) {
	t.Helper()
	hub := live.New(16, time.Now)
	t.Cleanup(hub.Close)
	b := newTestBoard(t, func(c *Config) {
		c.Hub = hub
		c.Ordered = ordered
	}, 4)
	b.hub = hub
	return b, hub
}

// publishRemote publishes another server's event of kind, of the room's
// reset gen.
func publishRemote(hub *live.Hub, kind live.Kind, request string, gen uint64) {
	hub.PublishRemoteAll([]live.Entry{{Event: live.Event{Kind: kind, Request: request, Scope: "session:other", Server: "s2", Gen: gen, Message: "POST /v1/payments"}}})
}

// A board that fell further behind than the hub holds loads the books
// again and goes on from the hub's newest event; this server's own
// events, which it draws when the relay hands them back in the room's
// order (their echoes), are still drawn after that.
func TestABoardThatFellBehindStillDrawsItsOwnEventsEchoes(t *testing.T) {
	b, hub := newBoardOnSmallHub(t, ownAtEcho)
	remote := func(request string) { publishRemote(hub, live.Received, request, 0) }
	caught := func() {
		t.Helper()
		b.caughtUp(t)
	}
	remote("rq_first")
	caught()

	// The board is held while the hub's ring goes round twice: its next
	// read finds the events it had not read gone.
	b.applying.Lock()
	for range 40 {
		remote("rq_flood")
	}
	b.applying.Unlock()
	caught()

	own := hub.Publish(live.Event{Kind: live.Received, Request: "rq_own", Scope: "session:me", Message: "POST /v1/payments"})
	hub.PublishEchoes([]live.Entry{{Event: own, Own: own.Seq}})
	remote("rq_after")
	caught()
	rows := b.Snapshot().Timeline
	if !hasRequestRow(rows, "rq_after") {
		t.Fatal("the board did not draw the event after the echo")
	}
	if !hasRequestRow(rows, "rq_own") {
		t.Error("after falling behind, the board no longer draws this server's own payments (their echoes)")
	}
}

func hasRequestRow(rows []views.TimelineRow, request string) bool {
	for _, r := range rows {
		if r.ID == "tl-"+request {
			return true
		}
	}
	return false
}
