package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// restartToken is the presenter's token in the restart tests: the server
// is started again with the same one, as a teacher does.
const restartToken = "restart-lecture"

// phoneSays is a JavaScript expression: the checkout card's state, its
// count of charges (when it states one) and its words.
const phoneSays = `(() => { const s = document.getElementById("pay-status");
	return s.getAttribute("data-state") + "|" + (s.getAttribute("data-charges") || "") + "|" + s.textContent; })()`

// TestBrowserClassSurvivesARestart restarts a SQLite server mid-class on
// the same address and the same file, with three phones (390x844) and the
// board open, one payment paid and one held in step mode. Within ten
// seconds of the restart every phone is back with the class: the chapter
// the presenter chose, a note that says the server restarted, which
// chapter it is and that step mode is on (the board shows its step bar);
// no card states a count or a reset the server does not have; the held
// payment was not charged (nobody stepped it), and its retry waits on the
// new server, as does a payment made after the restart, until the
// presenter, still signed in, plays them from the board; and the next
// chapter the presenter picks, with its lab mode, reaches every phone.
func TestBrowserClassSurvivesARestart(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	r := newRestartable(t, Config{PresenterToken: restartToken})
	asPresenter := func(method, path, body string) {
		t.Helper()
		if code := r.call(method, path, body, nil, PresenterHeader, restartToken); code != http.StatusOK {
			t.Fatalf("%s %s as the presenter: %d", method, path, code)
		}
	}
	asPresenter(http.MethodPut, "/api/lessons/current", `{"slug":"retry-every-4xx"}`)

	board := liveBrowser(t, 1280, 720)
	liveOpen(t, board, r.URL()+"/board?token="+restartToken)
	liveWait(t, board, "the board drawn for the presenter", waitUntilBound, `document.querySelector(".board").dataset.presenter === "true"`)
	var phones []context.Context
	for range 3 {
		phone := liveTab(t, board, true) // each its own cookies and storage: three students
		liveDo(t, phone, "a phone's window", liveResize(390, 844))
		liveOpen(t, phone, r.URL()+"/")
		liveWait(t, phone, "the chapter on the phone", waitUntilBound, `document.getElementById("lesson").dataset.slug === "retry-every-4xx"`)
		phones = append(phones, phone)
	}
	paid, held, later := phones[0], phones[1], phones[2]

	liveDo(t, paid, "paying", liveClick("#pay"))
	liveWait(t, paid, "the payment", waitUntilBound, `document.getElementById("pay-status").dataset.state === "paid"`)
	asPresenter(http.MethodPut, "/api/step", `{"on":true}`)
	liveWait(t, board, "step mode on the board", waitUntilBound, `document.getElementById("step-bar").classList.contains("step-on")`)
	liveDo(t, held, "paying in step mode", liveClick("#pay"))
	waitHeldCount(t, r, 1)

	r.restart()
	restarted := time.Now()

	// Every phone, within ten seconds: live again, the chapter, step mode
	// and the note.
	for i, phone := range phones {
		liveWait(t, phone, fmt.Sprintf("phone %d back with the class", i+1), 10*time.Second-time.Since(restarted), `(() => {
			const note = document.getElementById("stream-note");
			return document.getElementById("stream-state").textContent === "live" &&
				document.getElementById("lesson").dataset.slug === "retry-every-4xx" &&
				!note.hidden && note.textContent.includes("restarted") && note.textContent.includes("chapter 9") &&
				note.textContent.includes("Step mode is on");
		})()`)
	}
	t.Logf("every phone back with the class %s after the restart", time.Since(restarted).Round(time.Millisecond))
	liveWait(t, board, "the board back, in the chapter, step mode on", 10*time.Second-time.Since(restarted), `
		document.getElementById("stream-state").textContent === "live" && document.getElementById("step-bar").classList.contains("step-on") &&
		document.getElementById("lesson").dataset.slug === "retry-every-4xx" && !document.getElementById("lesson-start")`)

	// The paid order is still paid, once, and no card tells of a reset.
	if says := liveEval[string](t, paid, phoneSays); !strings.HasPrefix(says, "paid|1|") {
		t.Errorf("the paid phone's card after the restart: %q", says)
	}
	for i, phone := range phones {
		if says := liveEval[string](t, phone, phoneSays); strings.Contains(says, "reset") || strings.Contains(says, "closed") {
			t.Errorf("phone %d tells of a reset nobody made: %q", i+1, says)
		}
	}
	// The held payment: nobody stepped it, so the stopping server charged
	// nothing (it answered 503, nothing charged, same key afresh); the
	// page retried with the same key and the new server holds it, as step
	// mode is still on.
	waitHeldCount(t, r, 1)
	if says := liveEval[string](t, held, phoneSays); strings.HasPrefix(says, "paid") {
		t.Errorf("the held payment's card says paid: %q", says)
	}
	if n, err := r.db.CountCharges(context.Background()); err != nil || n != 1 {
		t.Fatalf("%d charges (%v) while the presenter stepped nothing, want the one paid before", n, err)
	}
	assertCardsMatchTheBooks(t, phones)

	// A payment after the restart waits for the presenter too.
	liveDo(t, later, "paying after the restart", liveClick("#pay"))
	waitHeldCount(t, r, 2)
	if n, err := r.db.CountCharges(context.Background()); err != nil || n != 1 {
		t.Fatalf("%d charges (%v) while the presenter stepped nothing, want the one paid before", n, err)
	}
	// The presenter, still signed in, lets it go from the board.
	liveWait(t, board, "the board's step bar", waitUntilBound, `!document.querySelector('#step-bar [data-step="play"]').disabled`)
	liveDo(t, board, "Play on the board", liveClick(`#step-bar [data-step="play"]`))
	for _, phone := range []context.Context{held, later} {
		liveWait(t, phone, "the stepped payment", waitUntilBound, `document.getElementById("pay-status").dataset.state === "paid"`)
	}
	if says := liveEval[string](t, board, `document.getElementById("step-status").textContent`); strings.Contains(says, "403") {
		t.Fatalf("the board was refused after the restart: %q", says)
	}
	assertCardsMatchTheBooks(t, phones)

	// The next chapter, from the board, with its lab mode, on every phone.
	liveDo(t, board, "Continue on the board", liveClick("#lesson-next"))
	chose := time.Now()
	for i, phone := range phones {
		liveWait(t, phone, fmt.Sprintf("phone %d in the next chapter", i+1), 10*time.Second-time.Since(chose), `
			document.getElementById("lesson").dataset.slug === "new-key-after-500" &&
			document.querySelector('[data-lab="client.new_key_after_500"]').checked`)
	}
	assertCardsMatchTheBooks(t, phones)
}

// waitHeldCount waits until step mode holds n requests.
func waitHeldCount(t *testing.T, r *restartable, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st StepState
		if r.call(http.MethodGet, "/api/step", "", &st) == http.StatusOK && len(st.Held) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("step mode does not hold %d requests: %+v", n, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertCardsMatchTheBooks checks that a card that states a count of
// charges states the count the server has for its order, as the page's
// own session looks it up.
func assertCardsMatchTheBooks(t *testing.T, phones []context.Context) {
	t.Helper()
	for i, phone := range phones {
		got, err := chromedp.Run(phone, chromedp.Evaluate[string](`(async () => {
			const s = document.getElementById("pay-status"), n = s.getAttribute("data-charges");
			if (n === null) { return "ok"; }
			const order = document.getElementById("order-id").textContent;
			const res = await fetch("/v1/payments?order_id=" + encodeURIComponent(order), { credentials: "same-origin", cache: "no-store" });
			const body = await res.json();
			const have = (body.charges || []).length;
			return String(have) === n ? "ok" : "the card says " + n + " charges for " + order + ", the server has " + have + ": " + s.textContent;
		})()`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("phone %d: %v", i+1, err)
		}
		if got != "ok" {
			t.Errorf("phone %d: %s", i+1, got)
		}
	}
}

// TestBrowserBoardSaysWhenThePresenterIsNotRecognised restarts the server
// with another presenter token: the board, drawn for the presenter, is
// refused, and says in words that the server no longer recognises this
// browser and that the presenter's link signs it in again.
func TestBrowserBoardSaysWhenThePresenterIsNotRecognised(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	r := newRestartable(t, Config{PresenterToken: restartToken})
	board := liveBrowser(t, 1280, 720)
	liveOpen(t, board, r.URL()+"/board?token="+restartToken)
	liveWait(t, board, "the board drawn for the presenter", waitUntilBound, `document.querySelector(".board").dataset.presenter === "true"`)
	r.cfg.PresenterToken = restartToken + "-changed"
	r.restart()
	liveWait(t, board, "the board back", waitUntilBound, `document.getElementById("stream-state").textContent === "live"`)
	liveDo(t, board, "step mode on from the board", liveClick(`#step-bar [data-step="on"]`))
	liveWait(t, board, "the board's words for the refusal", waitUntilBound, `(() => {
		const s = document.getElementById("step-status").textContent;
		return s.includes("no longer recognises this browser as the presenter") && s.includes("/board?token=");
	})()`)
}
