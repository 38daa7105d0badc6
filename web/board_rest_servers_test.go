package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/web/live"
)

// twoServersS2OnAWall starts two servers of one class, s1 and s2, s2's
// board on a clock the test moves (so that it rests when told), and
// waits for both relays to listen.
func twoServersS2OnAWall(t *testing.T) (a, b *testEnv, wall *sim.ManualClock) {
	t.Helper()
	c := newClass(t)
	wall = sim.NewManualClock(time.Now())
	a = c.server(Config{Name: "s1"}, nil)
	b = c.server(Config{Name: "s2", BoardClock: wall.Now}, nil)
	for _, e := range []*testEnv{a, b} {
		waitUntil(t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
	}
	return a, b, wall
}

// TestAServerWithNoPageOpenDrawsNoneOfTheRoomsPaymentsYetShowsThemAll: two
// servers of one class (on PostgreSQL with PAYTWICE_TEST_POSTGRES); s2's
// home page was drawn once and then nobody read its board for longer than
// it waits (boardRestAfter). The payments made on s1 meanwhile reach s2
// by the relay and are counted there, not drawn. The first page opened on
// s2 then shows every one of them: the books' keys and charges and the
// requests counted while nobody looked.
func TestAServerWithNoPageOpenDrawsNoneOfTheRoomsPaymentsYetShowsThemAll(t *testing.T) {
	waitsOnRealClocks(t)
	a, b, wall := twoServersS2OnAWall(t)
	if r := b.get("/", "Accept", "text/html"); r.Status != http.StatusOK {
		t.Fatalf("s2's home page: %d", r.Status)
	}
	board := b.Server.live()

	pay := func(i int) {
		t.Helper()
		if r := a.pay(fmt.Sprintf("rest-k%d", i), fmt.Sprintf(`{"order_id":"REST-%d","amount_satang":1000}`, i)); r.Status != http.StatusCreated {
			t.Fatalf("payment %d on s1: %d %s", i, r.Status, r.Body)
		}
	}
	pay(0)
	waitProjector(t, b)
	wall.Advance(boardRestAfter + time.Minute)
	// The relay's next batch finds nobody reading s2's board.
	pay(1)
	waitUntil(t, "s2's board to rest", func() bool { return board.RestStats().Resting })
	before := board.RestStats()
	const n = 6
	for i := 2; i < 2+n; i++ {
		pay(i)
	}
	// The books are shared: s1's payments are in them before their
	// events reach s2 by the relay, so s2 is waited for by its hub.
	waitUntil(t, "s2 to take s1's payments", func() bool {
		done := 0
		for _, e := range b.Server.hub.Kept() {
			if e.Kind == live.Completed && strings.HasPrefix(e.Key, "rest-k") {
				done++
			}
		}
		return done == 2+n && board.Caught(b.Server.hub.LastSeq()) && countCharges(t, b.Server.db) == 2+n
	})
	// Every one of them reached s2's hub, the relay's way, and its board
	// counted them without drawing.
	waitUntil(t, "s2's board to count the payments' events", func() bool {
		return board.RestStats().Counted-before.Counted >= n*4
	})
	if st := board.RestStats(); !st.Resting || st.Wakes != 0 {
		t.Fatalf("s2's board woke with no page open: %+v", st)
	}

	page := b.get("/board", "Accept", "text/html")
	if page.Status != http.StatusOK {
		t.Fatalf("s2's board page: %d", page.Status)
	}
	if st := board.RestStats(); st.Resting || st.Wakes != 1 {
		t.Fatalf("the page did not wake s2's board once: %+v", st)
	}
	body := string(page.Body)
	for i := range 2 + n {
		if want := fmt.Sprintf("rest-k%d", i); !strings.Contains(body, want) {
			t.Errorf("s2's page lacks the key %s paid on s1", want)
		}
	}
	l := board.Snapshot()
	if l.Counters.Charges != 2+n || len(l.Charges) != 2+n {
		t.Errorf("s2's board: %d charges counted, %d listed; the books hold %d", l.Counters.Charges, len(l.Charges), 2+n)
	}
	if l.Counters.Requests < 2+n {
		t.Errorf("s2's board counts %d requests, want the %d paid on s1", l.Counters.Requests, 2+n)
	}

	// Open now, it draws the next payment again.
	stream := openStream(t, b, "")
	stream.nextFrame() // the first drawing
	pay(99)
	for {
		if f := stream.nextFrame(); strings.Contains(f.Data, "REST-99") {
			break
		}
	}
}
