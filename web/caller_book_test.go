package web

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/sim"
)

// One student behind a class's shared address sends every request under
// a new bearer token. Each of its tokens is new, so all of them together
// are counted as one caller, "new callers": thirty classmates behind the
// same address, each with its own token, keep their share.
func TestAStudentMintingTokensCannotStarveItsClassmates(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	l := DefaultLimits.withDefaults()
	limits := newRequestLimits(l, clock.Now, func(r *http.Request) string {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		return host
	}, func(*http.Request) bool { return false })
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) { _ = c.String(http.StatusTooManyRequests, err.Error()) }
	e.Use(limits.middleware)
	e.GET("/lab", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	send := func(token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/lab", nil)
		req.RemoteAddr = "192.168.1.1:50000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}

	// The class arrives: each student's first request.
	for s := range 30 {
		if rec := send(fmt.Sprintf("student-%d", s)); rec.Code != http.StatusNoContent {
			t.Fatalf("student %d's first request: %d %s", s, rec.Code, rec.Body)
		}
	}
	// The minting student: far more requests than the address's burst,
	// each under a token of its own, all at once.
	let, refused := 0, 0
	var why string
	for i := range 2 * l.Requests.Burst {
		switch rec := send(fmt.Sprintf("mint-%d", i)); rec.Code {
		case http.StatusNoContent:
			let++
		default:
			refused++
			why = rec.Body.String()
		}
	}
	// The class's first requests came out of the same share of new
	// callers.
	newcomers := callerRate(l.Requests, l.CallerShare).Burst - 30
	t.Run("its new tokens together have one caller's share", func(t *testing.T) {
		if let != newcomers {
			t.Errorf("%d of its requests were let in, want what the class left of the new callers' share, %d", let, newcomers)
		}
		if !strings.Contains(why, "new to your address") {
			t.Errorf("the refusal does not say why: %q", why)
		}
	})
	t.Run("each of the thirty classmates still gets its own share", func(t *testing.T) {
		// Ten each, at the same instant: 300 requests, within the
		// address's burst once the minter's share is taken from it.
		for s := range 30 {
			for i := range 10 {
				if rec := send(fmt.Sprintf("student-%d", s)); rec.Code != http.StatusNoContent {
					t.Fatalf("student %d's request %d: %d %s", s, i, rec.Code, rec.Body)
				}
			}
		}
	})
	t.Run("the book of callers stays within its bound", func(t *testing.T) {
		if n := limits.callers.size(); n != 30+newcomers {
			t.Errorf("the book holds %d callers, want the %d let in", n, 30+newcomers)
		}
	})
}

// The same for payments: a student paying with a new token every time
// takes the turns of one caller of its address, not the turns of as many
// callers as it made tokens.
func TestAStudentMintingTokensTakesOneCallersTurns(t *testing.T) {
	t.Parallel()
	a := newPaymentAdmission(Limits{PaymentsPerAddress: 1, PaymentsAtWork: 1}.withDefaults(), time.Now, true)
	a.callers = newCallerBook(time.Now, 1024, time.Hour)
	const ip = "192.168.1.1"
	honest := []string{"token:a", "token:b", "token:c"}
	for _, caller := range honest { // the class has paid before
		slot, no := a.admit(t.Context(), ip, caller, false)
		if no != nil {
			t.Fatal(no.err)
		}
		slot.done()
	}
	first, no := a.admit(t.Context(), ip, "token:a", false)
	if no != nil {
		t.Fatal(no.err)
	}
	// Twenty payments, each under a new token, then one of each
	// classmate's, all waiting for the one turn of the address.
	type admitted struct {
		caller string
		slot   *paySlot
	}
	in := make(chan admitted)
	queue := func(caller string) {
		go func() {
			slot, no := a.admit(t.Context(), ip, caller, false)
			if no != nil {
				t.Error(no.err)
			}
			in <- admitted{caller, slot}
		}()
	}
	waitQueued := func(n int) {
		for i := 0; ; i++ {
			if _, q, _ := a.counts(); q == n {
				return
			}
			if i > 5000 {
				t.Fatalf("%d payments never queued", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 20 {
		queue(fmt.Sprintf("token:mint-%d", i))
		waitQueued(i + 1)
	}
	for i, caller := range honest {
		queue(caller)
		waitQueued(20 + i + 1)
	}
	first.done()
	var order []string
	for range 23 {
		got := <-in
		order = append(order, got.caller)
		got.slot.done()
	}
	// The address's callers take turns: new callers (all twenty), then
	// each classmate, so every classmate is in by the fourth turn.
	for _, caller := range honest {
		at := slicesIndex(order, caller)
		if at < 0 || at >= 4 {
			t.Errorf("%s was let in %d-th: %v", caller, at+1, order)
		}
	}
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
