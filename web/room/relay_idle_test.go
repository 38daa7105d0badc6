package room

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
	"paytwice/web/live"
)

// droppingListener is peers whose listening connection stays up but loses
// the first notification that contains lose, and says so on dropped.
type droppingListener struct {
	Peers
	lose    string
	once    sync.Once
	dropped chan struct{}
}

func (d *droppingListener) ListenEach(ctx context.Context, channels []string, onListen func(), onNotify func(channel, payload string)) error {
	return d.Peers.ListenEach(ctx, channels, onListen, func(channel, payload string) {
		lost := false
		if strings.Contains(payload, d.lose) {
			d.once.Do(func() { lost = true; close(d.dropped) })
		}
		if !lost {
			onNotify(channel, payload)
		}
	})
}

// idleWaitBound bounds a wait on the relay's goroutines in these tests:
// generous, for a loaded machine; they take far less when all is well.
const idleWaitBound = 2 * time.Minute

// A notification of the room's newest batch lost on a connection that
// stays up is read back at the relay's next idle checks, not only when a
// later batch comes: a quiet room's last events reach every server within
// a bounded time, once, and the pages are not told to reload.
func TestRelayReadsBackTheNewestBatchLostWhileTheRoomIsQuiet(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		peers := SharedMemory()
		testIdleReadBack(t, peers, peers)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		testIdleReadBack(t, openPostgresPeers(t, url), openPostgresPeers(t, url))
	})
}

func testIdleReadBack(t *testing.T, pa, pb Peers) {
	a := startRelayed(t, pa, "s1")
	ticks := make(chan time.Time)
	dl := &droppingListener{Peers: pb, lose: "quiet-last ", dropped: make(chan struct{})}
	b := startRelayedTicked(t, dl, "s2", ticks)
	waitJoined(t, a, b)
	a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: "first sent"})
	waitFor(t, "s2 to hear first", func() bool { return received(b.hub, "first") })

	a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: "quiet-last sent"})
	select {
	case <-dl.dropped:
	case <-time.After(idleWaitBound):
		t.Fatal("s1's last batch never reached s2's listening connection")
	}
	if received(b.hub, "quiet-last") {
		t.Fatal("s2 heard the dropped notification")
	}
	// Each tick is taken once the check of the one before it is done. The
	// first after a batch arrived only notes that the room was not quiet;
	// nothing arrives now, so the second reads back.
	tick := func() {
		select {
		case ticks <- time.Now():
		case <-time.After(idleWaitBound):
			t.Fatal("s2's relay never took its idle check's tick")
		}
	}
	tick()
	for range 10 {
		tick()
		if received(b.hub, "quiet-last") {
			break
		}
	}
	tick() // the last check is done
	if !received(b.hub, "quiet-last") {
		t.Fatal("s2 never heard s1's last batch, lost on its way while the room was quiet")
	}
	if got := remoteMessages(b.hub); len(got) != 2 || got[0] != "first" || got[1] != "quiet-last" {
		t.Errorf("s2 heard %q, want each of s1's events once, in order", got)
	}
	if n := b.sink.missed.Load(); n != 0 {
		t.Errorf("s2's pages were told %d times to reload", n)
	}
	if b.relay.ReadBack() == 0 {
		t.Error("s2 read nothing back")
	}
}
