package web

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestTheBoardDrawsThePresentersPaymentHandledByAnotherServer: on two
// servers of one database, server A's board is in busy mode (its clock
// held still, so that it stays busy), the presenter pays on server B,
// and A's board draws the presenter's payment, whole, above the busy
// row: the relay carries the presenter's mark to the other servers.
func TestTheBoardDrawsThePresentersPaymentHandledByAnotherServer(t *testing.T) {
	waitsOnRealClocks(t)
	const token = "front-of-the-room"
	held := time.Now()
	c := newClass(t)
	a := c.server(Config{Name: "a", PresenterToken: token, BoardClock: func() time.Time { return held }}, nil)
	b := c.server(Config{Name: "b", PresenterToken: token}, nil)
	board := a.Server.live()

	// A class busy enough for busy mode, each student within a share.
	for i := range 200 {
		for _, e := range paymentEvents(i) {
			e.Scope = fmt.Sprintf("session:student-%d", i%64)
			a.Server.hub.Publish(e)
		}
	}
	busyRow := func() int {
		for i, r := range board.Snapshot().Timeline {
			if r.Title == "Busy" {
				return i
			}
		}
		return -1
	}
	waitUntil(t, "A's board to go busy", func() bool { return busyRow() >= 0 })

	if r := payFrom(t, http.DefaultClient, b.URL, "presenter-on-b", "PRESENTER-1", "Bearer presenter", PresenterHeader, token); r.Status != http.StatusCreated {
		t.Fatalf("the presenter's payment on B: %d %s", r.Status, r.Body)
	}
	drawn := func() (int, string) {
		for i, r := range board.Snapshot().Timeline {
			if r.OrderID == "PRESENTER-1" {
				return i, r.Outcome.Text
			}
		}
		return -1, ""
	}
	waitUntil(t, "A's board to draw the presenter's payment on B", func() bool {
		_, outcome := drawn()
		return outcome != ""
	})
	at, _ := drawn()
	if busy := busyRow(); busy < 0 || at > busy {
		t.Fatalf("the presenter's payment is row %d, the busy row %d: not drawn while busy", at, busy)
	}
}
