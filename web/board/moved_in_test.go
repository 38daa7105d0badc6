package board

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room/lesson"
)

// placeAt hands the board events as the relay hands it another server's:
// part 1 of batch n of generation 1 of the room's order. It returns the
// last event's place.
func placeAt(b *testBoard, n uint64, events []live.Event) live.Place {
	entries := make([]live.Entry, len(events))
	for j := range events {
		entries[j].Event = events[j]
		entries[j].Place = live.Place{G: 1, N: n, I: 1, J: uint64(j) + 1}
	}
	last := entries[len(entries)-1].Place
	b.hub.Place(1, n, 1, entries)
	b.hub.PublishRemoteAll(entries)
	return last
}

// TestAPageMovedHereShowsWhatAPageThatNeverLeftShows: a page that resumes
// on this server from another server's frames, at its place in the room's
// order, skips the frames this board made of its own events before that
// place, which have none: the "Watch for" ticks (and the vote's changes),
// the busy row, the row of a gap. It must end up showing what a page that
// was here all along shows: it is told to ask for the lesson and the
// vote, and a board whose timeline holds a row of its own draws the page
// whole.
func TestAPageMovedHereShowsWhatAPageThatNeverLeftShows(t *testing.T) {
	movedBoard := func(t *testing.T, tune func(*Config)) *testBoard {
		return newTestBoard(t, func(c *Config) {
			c.Origin = func(context.Context, string) Why { return Moved }
			c.ResyncNote = func(Why) templ.Component { return views.StreamNote("moved", true) }
			if tune != nil {
				tune(c)
			}
		}, 10)
	}
	fromElsewhere := func(place live.Place) string { return live.PlacedEventID(otherServerEpoch, 40, place) }

	for _, own := range []struct {
		what string
		kind live.Kind
	}{{"a Watch for tick", lesson.WatchKind}, {"a change of the vote", lesson.PollKind}} {
		t.Run(own.what+" made before its place has the page ask for the lesson and the vote", func(t *testing.T) {
			// The vote's change marks the room as the server's wiring
			// says (web/room.go's changesRoom).
			b := movedBoard(t, func(c *Config) { c.RoomChanged = func(e live.Event) bool { return e.Kind == lesson.PollKind } })
			at := placeAt(b, 1, paymentEvents(0))
			// This server publishes it for itself: a frame with no place of
			// its own, made after the page's place.
			b.hub.Publish(live.Event{Kind: own.kind})
			b.caughtUp(t)
			s := b.open(t, "Last-Event-ID", fromElsewhere(at))
			placeAt(b, 2, paymentEvents(1))
			asked := false
			for {
				_, data, _, err := s.next()
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(data, "<!--resync-->") {
					t.Fatalf("the page was drawn whole, not resumed: %.200s", data)
				}
				asked = asked || strings.Contains(data, "<!--room-->")
				if strings.Contains(data, `data-order="B-1"`) {
					break
				}
			}
			if !asked {
				t.Fatalf("the page moved here was never told to ask for the lesson and the vote: %s made before its place is lost to it", own.what)
			}
		})
	}

	t.Run("a busy board draws the page whole, with its busy row", func(t *testing.T) {
		wall := newHeldWall()
		b := movedBoard(t, func(c *Config) {
			c.Wall = wall.Now
			c.Hub.SetWall(wall.Now)
		})
		at := placeAt(b, 1, paymentEvents(0))
		// Then a class's flood, here, within one instant of the held wall.
		for i := 1; i <= 300; i++ {
			for _, e := range paymentEvents(i) {
				e.Scope = fmt.Sprintf("session:board-%d", i%64)
				b.hub.Publish(e)
			}
			if i%50 == 49 {
				b.caughtUp(t)
			}
		}
		b.caughtUp(t)
		if !b.busyFlag.Load() {
			t.Fatal("the flood did not switch the board to busy mode")
		}
		s := b.open(t, "Last-Event-ID", fromElsewhere(at))
		_, data, _, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(data, "<!--resync-->") || !strings.Contains(data, `id="`+busyRowPrefix) {
			t.Fatalf("the first frame is not the whole room with the busy row: %.300s", data)
		}
	})

	t.Run("a board that had a gap draws the page whole, with the gap's row", func(t *testing.T) {
		b := movedBoard(t, nil)
		placeAt(b, 1, paymentEvents(0))
		b.hub.Publish(live.Event{Kind: live.Gap, Message: "the connection to the other servers was lost and restored"})
		// The page's place is after the gap: the room's order here holds it.
		at := placeAt(b, 2, paymentEvents(1))
		b.caughtUp(t)
		s := b.open(t, "Last-Event-ID", fromElsewhere(at))
		_, data, _, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(data, "<!--resync-->") || !strings.Contains(data, gapRow) {
			t.Fatalf("the first frame is not the whole room with the gap's row: %.300s", data)
		}
	})
}
