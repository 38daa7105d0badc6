package board

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCallersOfOneAddressPastAFewShareItsRow: forty callers of one
// address, each over its own share (a load test, or a script paying under
// many bearer tokens), get callerRowsPerAddress rows between them and the
// address's row counts the rest; they do not fill the timeline with forty
// rows pushing each other off it. A caller of another address over its
// share still gets a row of its own, and the counters stay complete.
func TestCallersOfOneAddressPastAFewShareItsRow(t *testing.T) {
	wall := newHeldWall()
	b := newTestBoard(t, func(c *Config) { c.Wall = wall.Now; c.After = wall.After; c.Batch = time.Millisecond }, 10)
	b.viewers.Store(1)
	const callers, each = 40, shareBurst + 5
	n := 0
	pay := func(scope, source string) {
		for range each {
			for _, e := range payOf(n, scope, false) {
				e.Source = source
				b.hub.Publish(e)
			}
			n++
		}
		b.caughtUp(t)
	}
	for c := range callers {
		pay(fmt.Sprintf("token:bench-%d", c), "192.0.2.66")
	}
	pay("token:other", "192.0.2.10")
	if b.busyFlag.Load() {
		t.Fatal("the callers over their share put the board in busy mode")
	}
	b.mu.Lock()
	callerRows, addressRows, counted := 0, 0, 0
	for key, r := range b.shares.rows {
		switch {
		case r.address && key == addressRow+"192.0.2.66":
			addressRows++
		case !r.address && r.source == "192.0.2.66":
			callerRows++
		}
		counted += r.n
	}
	other := b.shares.rows["token:other"]
	quiet := b.quietN.Load()
	b.mu.Unlock()
	if callerRows != callerRowsPerAddress || addressRows != 1 {
		t.Errorf("forty callers of one address over their share: %d callers' rows and %d of the address, want %d and 1", callerRows, addressRows, callerRowsPerAddress)
	}
	if other == nil || other.address {
		t.Errorf("the caller of another address over its share has no row of its own: %+v", other)
	}
	// A payment is six events, each of them quiet when its request is
	// counted in a row rather than drawn.
	if want := int(quiet / 6); counted != want {
		t.Errorf("the rows count %d requests not drawn, want %d", counted, want)
	}
	l := b.Snapshot()
	if l.Counters.Requests != n || l.Counters.Charges != n {
		t.Errorf("the counters are not complete after %d payments: %+v", n, l.Counters)
	}
	shown, address := 0, false
	for _, r := range l.Timeline {
		if strings.HasSuffix(r.Title, "too fast") {
			shown++
		}
		address = address || r.Title == "One address, too fast"
	}
	if most := callerRowsPerAddress + 2; shown > most || !address {
		t.Errorf("%d rows over a share on the timeline, want at most %d, the address's among them: %v", shown, most, outcomes(l.Timeline))
	}
}

// TestHeldRowsAreDrawnInOneRefresh: what several callers over their share
// changed after their rows were drawn goes out in one refresh frame at the
// end of the share's interval, every row in it, not a refresh a row: with
// forty such callers the pages got forty frames of the tables a second.
func TestHeldRowsAreDrawnInOneRefresh(t *testing.T) {
	wall := newHeldWall()
	b := newTestBoard(t, func(c *Config) { c.Wall = wall.Now; c.After = wall.After; c.Batch = time.Millisecond }, 10)
	b.viewers.Store(1)
	const callers, over = 3, 5
	n := 0
	pay := func(c, requests int) {
		for range requests {
			for _, e := range payOf(n, fmt.Sprintf("token:loop-%d", c), false) {
				b.hub.Publish(e)
			}
			n++
		}
	}
	// Each caller's share first, drawn one by one; then each goes over
	// it, its row drawn at once and the rest of its requests held (the
	// three rows are the timeline's newest).
	for c := range callers {
		pay(c, shareBurst)
	}
	for c := range callers {
		pay(c, over)
	}
	b.caughtUp(t)
	wall.mu.Lock()
	timers := len(wall.timers)
	wall.mu.Unlock()
	if timers != 1 {
		t.Fatalf("%d drawings of the held requests scheduled for %d callers, want 1", timers, callers)
	}
	b.mu.Lock()
	frames := b.frames
	var ids []string
	for c := range callers {
		r := b.shares.rows[fmt.Sprintf("token:loop-%d", c)]
		if r == nil || !r.held {
			b.mu.Unlock()
			t.Fatalf("caller %d over its share has no row holding requests: %+v", c, r)
		}
		ids = append(ids, r.row.ID)
	}
	b.mu.Unlock()
	wall.advance(shareRefresh)
	var data string
	waitUntil(t, "the held requests' refresh", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.frames == frames {
			return false
		}
		f := b.at(b.held() - 1)
		data = string(f.render.bytes(f.seq))
		return true
	})
	b.mu.Lock()
	added := b.frames - frames
	refresh := b.at(b.held() - 1).refresh
	b.mu.Unlock()
	if added != 1 || !refresh {
		t.Fatalf("%d frames for the held requests (the last a refresh: %v), want one refresh", added, refresh)
	}
	for _, id := range ids {
		if !strings.Contains(data, `id="`+id+`-out"`) {
			t.Errorf("the refresh does not redraw the row %s", id)
		}
	}
	if got := strings.Count(data, fmt.Sprintf("%d requests not drawn", over)); got != callers {
		t.Errorf("the refresh counts %d of the %d rows at %d requests not drawn", got, callers, over)
	}
}
