package board

import (
	"testing"

	"paytwice/web/live"
)

// The timeline's rows of events without a request (a switch, a reset, a
// sweep) are named by the server's life as well as the event's number:
// a page that resumes on another server of the room keeps the rows the
// first one drew, and an event numbered alike there is another event,
// which must neither take the old row's place nor be deleted with it.
func TestRowsOfEventsWithoutARequestAreNamedByTheServersLife(t *testing.T) {
	a, b := newTestBoard(t, nil, 4), newTestBoard(t, nil, 4)
	switched := live.Event{Kind: live.Switched, Message: "delay_ms set to 200"}
	var ids []string
	for _, board := range []*testBoard{a, b, a} {
		board.hub.Publish(switched)
		board.caughtUp(t)
		rows := board.Snapshot().Timeline
		if len(rows) == 0 {
			t.Fatal("no row for the switch")
		}
		ids = append(ids, rows[0].ID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two servers name their first switch's row alike: %q", ids[0])
	}
	if ids[0] == ids[2] {
		t.Fatalf("one server names two switches' rows alike: %q", ids[0])
	}
}
