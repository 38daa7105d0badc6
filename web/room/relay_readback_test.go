package room

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/web/live"
)

// cutListener is peers whose listening connection can be cut and restored,
// as a database restart or a network blip does, and which can lose single
// notifications on their way. Notifications sent while it is cut never
// reach it; restoring it listens again, which runs onListen again.
type cutListener struct {
	Peers
	mu       sync.Mutex
	cutOff   context.CancelFunc // ends the listening under way
	restored chan struct{}      // closed by restore
	// lose drops notifications that contain it.
	lose string
	// notKept makes ReadNumbered say nothing is kept any more.
	notKept bool
}

func newCutListener(p Peers) *cutListener { return &cutListener{Peers: p} }

func (c *cutListener) ListenEach(ctx context.Context, channels []string, onListen func(), onNotify func(channel, payload string)) error {
	for {
		lctx, cancel := context.WithCancel(ctx)
		c.mu.Lock()
		c.cutOff = cancel
		c.mu.Unlock()
		_ = c.Peers.ListenEach(lctx, channels, onListen, func(channel, payload string) {
			c.mu.Lock()
			lose := c.lose != "" && strings.Contains(payload, c.lose)
			c.mu.Unlock()
			if !lose {
				onNotify(channel, payload)
			}
		})
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.mu.Lock()
		restored := c.restored
		c.mu.Unlock()
		select {
		case <-restored:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *cutListener) ReadNumbered(ctx context.Context, from, to uint64) ([]string, bool, error) {
	c.mu.Lock()
	notKept := c.notKept
	c.mu.Unlock()
	if notKept {
		return nil, false, nil
	}
	return c.Peers.ReadNumbered(ctx, from, to)
}

func (c *cutListener) cut() {
	c.mu.Lock()
	c.restored = make(chan struct{})
	c.cutOff()
	c.mu.Unlock()
}

func (c *cutListener) restore() {
	c.mu.Lock()
	close(c.restored)
	c.mu.Unlock()
}

// remoteMessages lists the first words of the events hub heard from
// other servers, in the order heard.
func remoteMessages(hub *live.Hub) []string {
	var out []string
	for _, e := range remote(hub) {
		if e.Kind != live.Gap {
			out = append(out, strings.Fields(e.Message)[0])
		}
	}
	return out
}

// waitKept waits until the kept batches hold an event whose message is
// msg: the relay sent it.
func waitKept(t *testing.T, p Peers, msg string) {
	t.Helper()
	waitFor(t, msg+" to be sent", func() bool {
		kept, _, err := p.ReadNumbered(t.Context(), 1, 1<<62)
		return err == nil && slices.ContainsFunc(kept, func(s string) bool { return strings.Contains(s, msg) })
	})
}

// A relay whose listening connection was lost and restored reads back the
// batches sent meanwhile, and a relay that sees a number skip reads back
// the batch it skipped: every event arrives once, in the order sent, and
// the pages are not told to reload. Only when the batches are no longer
// kept are the pages told.
func TestRelayReadsBackWhatItMissed(t *testing.T) {
	peers := SharedMemory()
	a := startRelayed(t, peers, "s1")
	cl := newCutListener(peers)
	b := startRelayed(t, cl, "s2")
	waitJoined(t, a, b)
	publish := func(msg string) {
		a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: msg + " kept"})
	}
	var want []string
	sendAll := func(msgs ...string) {
		for _, m := range msgs {
			publish(m)
			waitKept(t, peers, m+" ")
			want = append(want, m)
		}
	}

	sendAll("before")
	waitFor(t, "s2 to hear before", func() bool { return received(b.hub, "before") })

	t.Run("a lost connection", func(t *testing.T) {
		cl.cut()
		sendAll("cut-1", "cut-2", "cut-3")
		cl.restore()
		sendAll("after-cut")
		waitFor(t, "s2 to hear after-cut", func() bool { return received(b.hub, "after-cut") })
		if got := remoteMessages(b.hub); !slices.Equal(got, want) {
			t.Errorf("s2 heard %q, want %q", got, want)
		}
		if n := b.sink.missed.Load(); n != 0 {
			t.Errorf("s2's pages were told %d times to reload", n)
		}
		if b.relay.ReadBack() == 0 {
			t.Error("s2 read nothing back")
		}
	})

	t.Run("a lost notification", func(t *testing.T) {
		cl.mu.Lock()
		cl.lose = "lost-1 "
		cl.mu.Unlock()
		sendAll("lost-1", "next")
		waitFor(t, "s2 to hear next", func() bool { return received(b.hub, "next") })
		if got := remoteMessages(b.hub); !slices.Equal(got, want) {
			t.Errorf("s2 heard %q, want %q", got, want)
		}
		if n := b.sink.missed.Load(); n != 0 {
			t.Errorf("s2's pages were told %d times to reload", n)
		}
	})

	t.Run("batches no longer kept", func(t *testing.T) {
		cl.mu.Lock()
		cl.notKept = true
		cl.mu.Unlock()
		cl.cut()
		publish("forgotten")
		waitKept(t, peers, "forgotten ")
		cl.restore()
		waitFor(t, "s2's pages to be told to reload", func() bool { return b.sink.missed.Load() == 1 })
		sendAll("last")
		waitFor(t, "s2 to hear last", func() bool { return received(b.hub, "last") })
		if n := b.sink.missed.Load(); n != 1 {
			t.Errorf("s2's pages were told %d times to reload for one loss", n)
		}
		if received(b.hub, "forgotten") {
			t.Error("s2 heard an event sent while it did not listen, not read back")
		}
	})
}
