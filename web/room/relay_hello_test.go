package room

import (
	"testing"
	"time"

	"paytwice/web/live"
)

// A crash of the database may forget the newest batches and number the
// next ones again. When the batch a relay heard last was its own hello,
// and the number is given again to another hello of its own, the relay
// reading back after reconnecting must not take that new hello for the
// one it heard: the batches forgotten before it, and those numbered
// again meanwhile, would be missed in silence. Every hello is its own,
// so the relay sees that the order went back, and its pages reload.
func TestRelayTellsARenumberedHelloOfItsOwnFromTheOneItHeard(t *testing.T) {
	peers := SharedMemory()
	a := startRelayed(t, peers, "s1")
	cl := newCutListener(peers)
	b := startRelayed(t, cl, "s2")
	waitJoined(t, a, b)
	newest := func() uint64 {
		peers.mu.Lock()
		defer peers.mu.Unlock()
		return peers.lastNumbered
	}
	taken := func(r *Relay) uint64 {
		r.listenMu.Lock()
		defer r.listenMu.Unlock()
		return r.at.N
	}
	// One event of s1's, then a hello of s2's: the batch s2 heard last.
	a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: "before sent"})
	waitFor(t, "s2 to hear before", func() bool { return received(b.hub, "before") })
	event := newest()
	b.relay.sayHello()
	waitFor(t, "s2 to take its own hello, the newest batch", func() bool {
		return newest() == event+1 && taken(b.relay) == event+1 && taken(a.relay) == event+1
	})

	heard := taken(b.relay)
	cl.cut()
	// The crash forgets the two newest batches, s1's event and s2's hello.
	peers.mu.Lock()
	peers.lastNumbered -= 2
	peers.numbered = peers.numbered[:len(peers.numbered)-2]
	peers.mu.Unlock()
	// Numbered again while s2 hears nothing: an event of s1's, then a
	// hello of s2's, under the number of the hello it heard.
	a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: "renumbered sent"})
	waitFor(t, "s1's event to be numbered again", func() bool { return newest() == heard-1 })
	b.relay.sayHello()
	waitFor(t, "s2's hello to be numbered like the one it heard", func() bool { return newest() == heard })
	cl.restore()
	waitFor(t, "s2 to listen again", func() bool { return b.relay.Listening() == 2 })
	waitFor(t, "s2's pages to be told to reload", func() bool { return b.sink.missed.Load() == 1 })
}
