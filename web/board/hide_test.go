package board

import (
	"errors"
	"strings"
	"testing"

	"paytwice/web/live"
)

func TestPresenterHidesARowOrAStudent(t *testing.T) {
	b := newTestBoard(t, nil, 10)
	pay := func(i int, scope string) {
		for _, e := range paymentEvents(i) {
			e.Scope = scope
			b.hub.Publish(e)
		}
	}
	shown := func() map[string]string {
		out := map[string]string{}
		for _, r := range b.caughtUp(t).Snapshot().Timeline {
			out[r.OrderID] = r.Scope
		}
		return out
	}
	pay(1, "session:mallory")
	pay(2, "session:mallory")
	pay(3, "session:alice")
	s := b.open(t)
	defer s.close()

	t.Run("one row", func(t *testing.T) {
		b.caughtUp(t) // the presenter hides what the board has drawn
		n, err := b.Hide("tl-rq_b0000003", false)
		if err != nil || n != 1 {
			t.Fatalf("hid %d rows, %v", n, err)
		}
		if _, ok := shown()["B-3"]; ok {
			t.Fatal("the hidden row is still on the board")
		}
		// Its later events do not bring it back.
		b.hub.Publish(live.Event{Kind: live.Replayed, Request: "rq_b0000003", Scope: "session:alice", OrderID: "B-3", Status: 201})
		if _, ok := shown()["B-3"]; ok {
			t.Fatal("a later event of the hidden request drew it again")
		}
	})
	t.Run("a student, now and until a reset", func(t *testing.T) {
		n, err := b.Hide("tl-rq_b0000001", true)
		if err != nil || n != 2 {
			t.Fatalf("hid %d rows, %v; want both of the student's", n, err)
		}
		pay(4, "session:mallory")
		pay(5, "session:alice")
		rows := shown()
		if _, ok := rows["B-4"]; ok || len(rows) != 1 || rows["B-5"] != "session:alice" {
			t.Fatalf("the board shows %v; want only the other student's new row", rows)
		}
		if c := b.Snapshot().Counters; c.Charges != 5 {
			t.Fatalf("hiding changed the counters: %+v", c)
		}
		b.hub.Publish(live.Event{Kind: live.Reset})
		pay(6, "session:mallory")
		if _, ok := shown()["B-6"]; !ok {
			t.Fatal("after a reset the student is still hidden")
		}
	})
	t.Run("every open page is told", func(t *testing.T) {
		for {
			_, data, _, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(data, `id="tl-rq_b0000001"`) && strings.Contains(data, "delete") {
				return
			}
		}
	})
	if _, err := b.Hide("tl-nope", false); !errors.Is(err, ErrNoSuchRow) {
		t.Fatalf("hiding a row not shown: %v", err)
	}
}
