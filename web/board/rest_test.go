package board

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/views"
	"paytwice/web/live"
)

// restNow moves the board's wall two minutes on and publishes an event
// (publish), whose batch finds nobody reading the board: it rests.
func restNow(t *testing.T, b *testBoard, wall *sim.ManualClock, publish func()) {
	t.Helper()
	wall.Advance(2 * time.Minute)
	publish()
	b.caughtUp(t)
	waitUntil(t, "the board to rest", func() bool { return b.RestStats().Resting })
}

// restingBoard is a test board that rests after a minute nobody read it,
// on a wall the test moves, and pays saves each payment's charge and key
// in the books before it publishes the payment's events, as a server
// does.
func restingBoard(t *testing.T, tune ...func(*Config)) (b *testBoard, wall *sim.ManualClock, pays func(n int)) {
	t.Helper()
	wall = sim.NewManualClock(time.Date(2026, 12, 6, 16, 0, 0, 0, time.UTC))
	b = newTestBoard(t, func(c *Config) {
		c.RestAfter = time.Minute
		c.Wall = wall.Now
		c.ResyncNote = func(why Why) templ.Component {
			return views.StreamNote([whys]string{FellBehind: "fell behind", Restarted: "restarted", Moved: "moved", Reconnected: "reconnected"}[why], true)
		}
		for _, f := range tune {
			f(c)
		}
	}, 10)
	ctx := context.Background()
	i := 0
	pays = func(n int) {
		t.Helper()
		for range n {
			evs := paymentEvents(i)
			req := pay.ClaimRequest{Scope: evs[0].Scope, Key: evs[0].Key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: evs[0].OrderID, AmountSatang: 129900}
			res, err := b.db.Claim(ctx, req)
			if err != nil || !res.Claimed {
				t.Fatalf("claim %d: %+v %v", i, res, err)
			}
			ch := &pay.Charge{ID: evs[4].Charge, Scope: req.Scope, Key: req.Key, OrderID: req.OrderID, AmountSatang: 129900, GatewayRef: "gw_" + strconv.Itoa(i), CreatedAt: time.Now()}
			if _, err := b.db.Complete(ctx, pay.Completion{ClaimRequest: req, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
				t.Fatalf("complete %d: %v", i, err)
			}
			for _, e := range evs {
				b.hub.Publish(e)
			}
			i++
		}
	}
	return b, wall, pays
}

// A board nobody has read for RestAfter rests: the payments made then
// are counted and not drawn (no frame, no row). The first page that asks
// wakes it, and sees every one of them: the keys and charges the books
// hold, and the requests counted while it rested.
func TestABoardNobodyReadsRestsAndWakesToTheBooks(t *testing.T) {
	b, wall, pays := restingBoard(t)
	pays(2)
	b.caughtUp(t)
	if got := b.RestStats(); got.Resting || got.Rests != 0 {
		t.Fatalf("the board rests before RestAfter passed: %+v", got)
	}

	restNow(t, b, wall, func() { pays(1) }) // the batch that finds nobody reading it for two minutes
	b.mu.Lock()
	frames := b.frames
	b.mu.Unlock()

	pays(5)
	b.caughtUp(t)
	st := b.RestStats()
	if !st.Resting || st.Rests != 1 || st.Counted < 5*6 {
		t.Fatalf("rest stats %+v after five payments on a resting board, want it resting once, at least 30 events counted", st)
	}
	b.mu.Lock()
	framesAfter, rows := b.frames, len(b.rows)
	b.mu.Unlock()
	if framesAfter != frames {
		t.Errorf("a resting board made %d frames", framesAfter-frames)
	}

	snap := b.Snapshot()
	if st := b.RestStats(); st.Resting || st.Wakes != 1 {
		t.Fatalf("a snapshot did not wake the board: %+v", st)
	}
	if snap.Counters.Charges != 8 || snap.Counters.Requests != 8 || len(snap.Charges) != 8 || len(snap.Keys) != 8 {
		t.Errorf("woken board: %d charges counted, %d requests, %d charge rows, %d key rows; want 8 of each",
			snap.Counters.Charges, snap.Counters.Requests, len(snap.Charges), len(snap.Keys))
	}
	var orders []string
	for _, r := range snap.Timeline {
		orders = append(orders, r.Title)
	}
	if len(snap.Timeline) != 8 || len(snap.Timeline) <= rows {
		t.Errorf("woken board's timeline has %d rows (%v), want the 8 payments the hub kept", len(snap.Timeline), orders)
	}
	if snap.Seq != b.hub.LastSeq() {
		t.Errorf("the snapshot is at event %d, want the hub's last %d", snap.Seq, b.hub.LastSeq())
	}

	// Payments after the wake are drawn again, one frame each at least.
	pays(1)
	b.caughtUp(t)
	b.mu.Lock()
	drawn := b.frames - framesAfter
	b.mu.Unlock()
	if drawn == 0 {
		t.Error("the woken board made no frame for the next payment")
	}
}

// A page that resumes from an event before the board rested is drawn
// whole when the board wakes, never resumed from the frames before the
// rest with the payments in between missing; one that has the board's
// state at its wake resumes.
func TestAPageResumingAcrossARestIsDrawnWhole(t *testing.T) {
	b, wall, pays := restingBoard(t)
	pays(2)
	b.caughtUp(t)
	before := b.hub.LastSeq()
	restNow(t, b, wall, func() { pays(1) })
	pays(3)
	b.caughtUp(t)

	s := b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), before))
	id, data, _, err := s.next()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(data, "<!--resync-->") || !strings.Contains(data, `id="charges-body"`) {
		t.Fatalf("a page from before the rest was not drawn whole: %.300s", data)
	}
	for i := range 6 {
		if want := "B-" + strconv.Itoa(i); !strings.Contains(data, want) {
			t.Errorf("the whole board lacks order %s", want)
		}
	}
	if id != b.hub.LastSeq() {
		t.Errorf("the redraw is at event %d, want %d", id, b.hub.LastSeq())
	}
	s.close()

	// A page at the wake's event has all of it: it resumes.
	_, data, _, err = b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), id)).next()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(data, "<!--resync-->") {
		t.Fatalf("a page at the wake's event was drawn whole: %.200s", data)
	}
}

// The counters a resting board keeps are the ones a board that drew every
// event shows: replays, conflicts and refusals included, and a reset
// empties them as it empties a drawing board's.
func TestARestingBoardCountsAsADrawingOne(t *testing.T) {
	kinds := []live.Event{
		{Kind: live.Received, Request: "rq_x1", Scope: "session:board"},
		{Kind: live.Replayed, Request: "rq_x1", Scope: "session:board", Key: "k1", Status: 201},
		{Kind: live.Received, Request: "rq_x2", Scope: "session:board"},
		{Kind: live.Conflict, Request: "rq_x2", Scope: "session:board", Key: "k2", Status: 409},
		{Kind: live.Received, Request: "rq_x3", Scope: "session:board"},
		{Kind: live.Rejected, Request: "rq_x3", Scope: "session:board", Status: 400},
		{Kind: live.Received, Request: "rq_x4", Scope: "session:board"},
		{Kind: live.Mismatch, Request: "rq_x4", Scope: "session:board", Key: "k1", Status: 422},
	}
	counters := func(rest bool) views.Counters {
		b, wall, _ := restingBoard(t)
		if rest {
			restNow(t, b, wall, func() {
				b.hub.Publish(live.Event{Kind: live.LookedUp, Request: "rq_look", Scope: "session:board", Lookup: "never_seen"})
			})
		}
		for _, e := range kinds {
			b.hub.Publish(e)
		}
		b.caughtUp(t)
		if got := b.RestStats().Resting; got != rest {
			t.Fatalf("resting %v, want %v", got, rest)
		}
		return b.Snapshot().Counters
	}
	drawing, resting := counters(false), counters(true)
	drawing.Orders, resting.Orders = nil, nil
	if !reflect.DeepEqual(drawing, resting) {
		t.Errorf("a resting board counts %+v, a drawing one %+v", resting, drawing)
	}
	if drawing.Requests == 0 || drawing.Replays != 1 || drawing.Conflicts != 1 || drawing.Mismatches != 1 {
		t.Errorf("counters %+v, want requests and one of each answer", drawing)
	}
}

// This server's own payment, made while its board rested, whose echo
// comes back from the relay after a page woke the board: its row is drawn
// once, by the echo, and counted once, not drawn from the kept timeline
// at the wake and again by the echo.
func TestAWokenBoardDrawsItsOwnEventsOnceWhenTheirEchoComesAfter(t *testing.T) {
	b, wall, _ := restingBoard(t, func(c *Config) {
		c.Ordered = func(e *live.Entry) bool { return !e.Remote && !e.Echo }
	})
	restNow(t, b, wall, func() {
		b.hub.PublishRemoteAll([]live.Entry{{Event: live.Event{Kind: live.Received, Request: "rq_other", Scope: "session:other", Server: "s2", Message: "POST /v1/payments"}}})
	})

	var own []live.Event
	for _, e := range paymentEvents(7) {
		own = append(own, b.hub.Publish(e))
	}
	b.caughtUp(t)
	b.Snapshot() // a page wakes the board before the echo comes
	echoes := make([]live.Entry, len(own))
	for i, e := range own {
		echoes[i] = live.Entry{Event: e, Own: e.Seq}
	}
	b.hub.PublishEchoes(echoes)
	b.caughtUp(t)

	snap := b.Snapshot()
	var row *views.TimelineRow
	for i := range snap.Timeline {
		if snap.Timeline[i].ID == "tl-rq_b0000007" {
			row = &snap.Timeline[i]
		}
	}
	if row == nil {
		t.Fatal("the own payment has no row")
	}
	seen := map[string]bool{}
	for _, s := range row.Steps {
		k := fmt.Sprintf("%v>%v %s", s.From, s.To, s.Label)
		if seen[k] {
			t.Errorf("the own payment's row draws %q twice", k)
		}
		seen[k] = true
	}
	if snap.Counters.Requests != 2 {
		t.Errorf("%d requests counted, want 2 (the other server's and this one's)", snap.Counters.Requests)
	}
}

// A student the presenter hid stays hidden when the board wakes from its
// rest and draws its timeline again from the kept events.
func TestAHiddenStudentStaysHiddenAcrossARest(t *testing.T) {
	b, wall, pays := restingBoard(t)
	pays(1)
	b.caughtUp(t)
	if _, err := b.Hide("tl-rq_b0000000", true); err != nil {
		t.Fatal(err)
	}
	restNow(t, b, wall, func() { pays(1) })
	pays(1)
	b.caughtUp(t)
	for _, r := range b.Snapshot().Timeline {
		if r.Scope == "session:board" {
			t.Errorf("the hidden student's row %s is drawn again after the rest", r.ID)
		}
	}
}
