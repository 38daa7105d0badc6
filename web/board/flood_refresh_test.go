package board

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/web/live"
)

// TestFloodRefreshesSlowWithHundredsOfPages: a flood's refreshes go to
// every open page, so with hundreds open they come once a second rather
// than twice (floodRefresh); up to 200 pages nothing changes. A caller
// over its share has what its held requests changed drawn after
// shareRefresh with a few pages open, after a second with 500; the busy
// ticker ticks every busyRefresh with a few, every second with 500. The
// board counts its open streams; the test sets that count rather than
// opening 500 streams, which is all floodRefresh reads.
func TestFloodRefreshesSlowWithHundredsOfPages(t *testing.T) {
	for _, tc := range []struct {
		pages int64
		want  time.Duration
	}{{0, shareRefresh}, {200, shareRefresh}, {500, time.Second}} {
		t.Run(fmt.Sprintf("a caller over its share, %d pages", tc.pages), func(t *testing.T) {
			wall := newHeldWall()
			b := newTestBoard(t, func(c *Config) { c.Wall = wall.Now; c.After = wall.After; c.Batch = time.Millisecond }, 10)
			b.viewers.Store(tc.pages)
			start := wall.Now()
			// One instant's burst: past the caller's share after
			// shareBurst, its row drawn at the first request held and the
			// rest held for the row's next drawing.
			for i := range shareBurst + 5 {
				b.hub.Publish(live.Event{Kind: live.Received, Scope: "token:loop", Request: fmt.Sprintf("rq_%d", i),
					Key: fmt.Sprintf("k-%d", i), OrderID: fmt.Sprintf("O-%d", i), Amount: 100})
			}
			b.caughtUp(t)
			wall.mu.Lock()
			timers := append([]wallTimer(nil), wall.timers...)
			wall.mu.Unlock()
			if len(timers) != 1 {
				t.Fatalf("%d drawings of the held requests scheduled, want 1", len(timers))
			}
			if got := time.Duration(timers[0].due - start.UnixNano()); got != tc.want {
				t.Fatalf("the held requests are drawn %v after the row, want %v", got, tc.want)
			}
			// And they are drawn then, as a refresh every page gets.
			b.mu.Lock()
			frames := b.frames
			b.mu.Unlock()
			wall.advance(tc.want)
			waitUntil(t, "the held requests' refresh", func() bool {
				b.mu.Lock()
				defer b.mu.Unlock()
				return b.frames > frames && b.at(b.held()-1).refresh && b.at(b.held()-1).owner == ""
			})
		})
	}
	for _, tc := range []struct {
		pages int64
		want  time.Duration
	}{{0, busyRefresh}, {500, time.Second}} {
		t.Run(fmt.Sprintf("busy mode, %d pages", tc.pages), func(t *testing.T) {
			wall := newHeldWall()
			var every atomic.Int64
			b := newTestBoard(t, func(c *Config) {
				c.Wall = wall.Now
				c.Ticks = func(d time.Duration) (<-chan time.Time, func()) {
					every.Store(int64(d))
					return make(chan time.Time), func() {}
				}
			}, 10)
			b.viewers.Store(tc.pages)
			for i := range 300 {
				for _, e := range paymentEvents(i) {
					e.Scope = fmt.Sprintf("session:board-%d", i%64)
					b.hub.Publish(e)
				}
			}
			b.caughtUp(t)
			if !b.busyFlag.Load() {
				t.Fatal("the flood did not switch to busy mode")
			}
			waitUntil(t, "the ticker to start", func() bool { return b.tickerRuns.Load() > 0 })
			if d := time.Duration(every.Load()); d != tc.want {
				t.Fatalf("the busy ticker ticks every %v, want %v", d, tc.want)
			}
		})
	}
}

// TestAFloodOverItsShareIsTakenInBatches: with a page open, the board
// takes a run of events none of which is drawn by itself (a caller over
// its share) in batches, Config.Batch apart, as it does in busy mode:
// what they change is drawn at the share's refresh, not sooner. The
// payments drawn one by one are taken as they come.
func TestAFloodOverItsShareIsTakenInBatches(t *testing.T) {
	wall := newHeldWall()
	b := newTestBoard(t, func(c *Config) { c.Wall = wall.Now; c.After = wall.After; c.Batch = time.Millisecond }, 10)
	b.viewers.Store(1)
	pay := func(from, to int) {
		for i := from; i < to; i++ {
			for _, e := range payOf(i, "token:loop", false) {
				b.hub.Publish(e)
			}
		}
		b.caughtUp(t)
	}
	// Under the share, then over it, in one instant of the wall.
	pay(0, 2*shareBurst)
	waits := b.batchWaits.Load()
	quiet := b.quietN.Load()
	// Only requests over the share now.
	pay(2*shareBurst, 3*shareBurst)
	if b.quietN.Load()-quiet != 6*shareBurst {
		t.Fatalf("%d of %d events over the caller's share were not drawn by themselves", b.quietN.Load()-quiet, 6*shareBurst)
	}
	waitUntil(t, "the board to wait after a batch of the flood", func() bool { return b.batchWaits.Load() > waits })
}
