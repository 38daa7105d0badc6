package live

import (
	"fmt"
	"testing"
	"time"
)

func TestKeptTimelineHoldsEverySourceShareWhateverOneSourceSends(t *testing.T) {
	h := New(64, func() time.Time { return time.Unix(0, 0) })
	h.SetShares(100, 200)
	// The class: three students' payments, and the room's own events.
	for i := range 20 {
		for _, who := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
			h.Publish(Event{Kind: Charged, Source: who, Request: fmt.Sprintf("%s-%d", who, i)})
		}
	}
	h.Publish(Event{Kind: Switched, Message: "delay on"})
	// One student floods deliveries, look-ups and payments.
	for i := range 5000 {
		h.Publish(Event{Kind: Delivered, Source: "10.0.0.9"})
		h.Publish(Event{Kind: LookedUp, Source: "10.0.0.9"})
		h.Publish(Event{Kind: Charged, Source: "10.0.0.9", Request: fmt.Sprint(i)})
	}
	kept := h.Kept()
	if len(kept) > 200 {
		t.Fatalf("%d events kept, more than the total of 200", len(kept))
	}
	count := map[string]int{}
	switched := 0
	for i, e := range kept {
		if i > 0 && kept[i-1].Seq >= e.Seq {
			t.Fatalf("kept events out of order at %d: %d then %d", i, kept[i-1].Seq, e.Seq)
		}
		if e.Kind == Charged {
			count[e.Source]++
		}
		if e.Kind == Switched {
			switched++
		}
	}
	for _, who := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		if count[who] != 20 {
			t.Errorf("%s has %d of its 20 payments kept", who, count[who])
		}
	}
	if switched != 1 {
		t.Errorf("the room's switch is kept %d times, want once", switched)
	}
	if count["10.0.0.9"] == 0 || count["10.0.0.9"] > 100 {
		t.Errorf("the flooding student holds %d payment events, want some and at most its share of 100", count["10.0.0.9"])
	}
	// Events from another server carry no address: their caller's scope
	// stands in for it.
	h.PublishRemote(Event{Kind: Charged, Scope: "s1", Request: "r1"})
	if k := h.Kept(); k[len(k)-1].Scope != "s1" {
		t.Fatalf("a remote event was not kept: %+v", k[len(k)-1])
	}
	h.Clear()
	if n := len(h.Kept()); n != 0 {
		t.Fatalf("a reset left %d kept events", n)
	}
}
