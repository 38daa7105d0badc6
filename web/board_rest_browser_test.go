package web

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestBrowserABoardOpenedOnAServerThatRestedShowsTheClass: two servers of
// one class; s2's board was drawn once and then rested (nobody read it
// for longer than boardRestAfter on its board clock) while the class paid
// on s1. A browser that opens s2's board then sees every one of those
// payments in its tables and counters, and the next payment made on s1
// arrive live.
func TestBrowserABoardOpenedOnAServerThatRestedShowsTheClass(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	a, b, wall := twoServersS2OnAWall(t)
	board := b.Server.live()
	pay := func(i int) {
		t.Helper()
		if r := a.pay(fmt.Sprintf("rest-b%d", i), fmt.Sprintf(`{"order_id":"RB-%d","amount_satang":1000}`, i)); r.Status != http.StatusCreated {
			t.Fatalf("payment %d on s1: %d %s", i, r.Status, r.Body)
		}
	}
	wall.Advance(boardRestAfter + time.Minute)
	pay(0)
	waitUntil(t, "s2's board to rest", func() bool { return board.RestStats().Resting })
	for i := 1; i < 5; i++ {
		pay(i)
	}
	waitUntil(t, "s2 to take s1's payments", func() bool { return board.Caught(b.Server.hub.LastSeq()) })

	ctx := liveBrowser(t, 1280, 720)
	liveOpen(t, ctx, b.URL+"/board")
	liveWait(t, ctx, "the five charges made while s2 rested", waitUntilBound,
		`document.querySelectorAll("#charges-body tr[id^='c-']").length === 5`)
	pay(5)
	liveWait(t, ctx, "the next charge, live", waitUntilBound,
		`document.querySelectorAll("#charges-body tr[id^='c-']").length === 6`)
	if st := board.RestStats(); st.Wakes != 1 || st.Resting {
		t.Errorf("s2's board: %+v, want it woken once by the page", st)
	}
	liveNoCSPViolations(t, ctx)
}
