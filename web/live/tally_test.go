package live

import (
	"testing"
	"time"
)

// The hub counts this server's answers and, apart, the other servers'
// answers it published, each of the room's newest reset gen it saw: an
// echo (an own event handed back) is not counted again, and another
// server's event from before a reset it already saw is not counted.
func TestHubCountsOwnAndOtherServersAnswersByGen(t *testing.T) {
	h := New(8, time.Now)
	t.Cleanup(h.Close)
	sub := h.Subscribe(0)
	gen := uint64(1)
	h.SetGeneration(func() uint64 { return gen })
	h.RestartTally(1)
	other := func(kind Kind, g uint64) {
		h.PublishRemoteAll([]Entry{{Event: Event{Kind: kind, Server: "s2", Gen: g}}})
	}
	mine := h.Publish(Event{Kind: Received})
	h.PublishEchoes([]Entry{{Event: mine, Own: mine.Seq}})
	h.Publish(Event{Kind: Replayed})
	other(Received, 1)
	other(Conflict, 1)
	other(Received, 2) // another server reset the room: its gen starts again
	other(Received, 1) // relayed late from before the reset
	other(Mismatch, 2)
	for range 20 { // round the ring twice: the counts do not go with it
		other(Received, 2)
	}

	own, remote, seq := h.Counts()
	if own != (Tally{Gen: 1, Requests: 1, Replays: 1}) {
		t.Errorf("own %+v, want gen 1's one request and one replay, the echo not counted", own)
	}
	if remote != (Tally{Gen: 2, Requests: 21, Mismatches: 1}) {
		t.Errorf("others' %+v, want gen 2's 21 requests and one 422", remote)
	}
	if _, err := sub.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	if o, r := sub.Counts(); o != own || r != remote {
		t.Errorf("a viewer that read the newest event has the counts %+v, %+v; the hub %+v, %+v", o, r, own, remote)
	}
	if seq != h.LastSeq() {
		t.Errorf("counts up to %d, the hub's newest event is %d", seq, h.LastSeq())
	}
}
