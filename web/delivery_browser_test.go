package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"paytwice/pay"
)

// respStep finds the answer's arrow of the timeline row whose heading
// names order.
func respStep(order string) string {
	return `[...document.querySelectorAll("#timeline > li")].filter(li => li.querySelector(".tl-head").textContent.includes(` +
		"`" + order + "`" + `)).map(li => li.querySelector(".step[id$='-resp']")).find(s => s)`
}

// TestBrowserAnswerArrivesWhenThePageSaysSo: the board draws an answer
// reaching the browser only once the page says it received it. An answer
// to a page that gave up waiting is drawn as never delivered, and one no
// page has spoken for stays drawn as sent.
func TestBrowserAnswerArrivesWhenThePageSaysSo(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newRealClockEnv(t, Config{})
	board := liveBrowser(t, 1920, 1080)
	liveStill(t, board)
	phone := liveTab(t, board, true)
	liveOpen(t, board, env.URL+"/board")

	t.Run("an answer nobody has spoken for is drawn as sent", func(t *testing.T) {
		attempt := uuid.NewString()
		if r := env.pay(uuid.NewString(), `{"order_id":"A-7001","amount_satang":100}`, pageAttemptHeader, attempt); r.Status != http.StatusCreated {
			t.Fatalf("pay: %d %s", r.Status, r.Body)
		}
		liveWait(t, board, "the answer drawn as sent", waitUntilBound, `(s => s && s.classList.contains("sent") && !s.classList.contains("lost"))(`+respStep("A-7001")+`)`)
		// The word of another scope changes nothing; the caller's does.
		other := env.send(http.MethodPost, "/api/delivery", map[string]any{"attempt": attempt, "received": true, "status": 201}, "Cookie", sessionCookie+"="+uuid.NewString())
		if other.Status != http.StatusNoContent {
			t.Fatalf("delivery from another browser: %d %s", other.Status, other.Body)
		}
		// Events reach the board in order: once a later payment shows, the
		// other browser's word has been applied.
		env.pay(uuid.NewString(), `{"order_id":"A-7002","amount_satang":100}`)
		liveWait(t, board, "a later row", waitUntilBound, respStep("A-7002")+` !== undefined`)
		if !liveEval[bool](t, board, `(s => s.classList.contains("sent"))(`+respStep("A-7001")+`)`) {
			t.Fatal("another browser's word drew the answer as arrived")
		}
		if r := env.send(http.MethodPost, "/api/delivery", map[string]any{"attempt": attempt, "received": true, "status": 201}); r.Status != http.StatusNoContent {
			t.Fatalf("delivery: %d %s", r.Status, r.Body)
		}
		liveWait(t, board, "the answer drawn as arrived", waitUntilBound, `(s => s && !s.classList.contains("sent") && !s.classList.contains("lost"))(`+respStep("A-7001")+`)`)
	})

	t.Run("a bad report is a 400", func(t *testing.T) {
		for _, body := range []any{
			map[string]any{"attempt": "x", "received": true, "status": 201},
			map[string]any{"attempt": uuid.NewString(), "received": true},
			map[string]any{"attempt": uuid.NewString(), "received": false},
			map[string]any{"attempt": uuid.NewString(), "received": false, "why": strings.Repeat("x", 200)},
			map[string]any{"attempt": uuid.NewString(), "received": true, "status": 201, "extra": 1},
		} {
			if r := env.send(http.MethodPost, "/api/delivery", body); r.Status != http.StatusBadRequest {
				t.Errorf("%v: %d %s", body, r.Status, r.Body)
			}
		}
	})

	t.Run("the page's answer arrives once the page has it", func(t *testing.T) {
		liveOpen(t, phone, env.URL+"/")
		liveDo(t, phone, "paying", liveClick("#pay"))
		liveWait(t, phone, "paid", waitUntilBound, paidNow)
		order := liveEval[string](t, phone, `document.getElementById("order-id").textContent`)
		liveWait(t, board, "the answer drawn as arrived", waitUntilBound, `(s => s && !s.classList.contains("sent") && !s.classList.contains("lost"))(`+respStep(order)+`)`)
	})

	t.Run("an answer the page gave up on is drawn as not delivered", func(t *testing.T) {
		if err := env.Server.faultSwitches().applyFaults(t.Context(), pay.Faults{Server: pay.ServerFaults{DelayMS: 1500}}, "test"); err != nil {
			t.Fatal(err)
		}
		liveOpen(t, phone, env.URL+"/?attempt_ms=300")
		liveDo(t, phone, "a new order, paid", liveClick("#new-order"), liveClick("#pay"))
		order := liveEval[string](t, phone, `document.getElementById("order-id").textContent`)
		liveWait(t, phone, "the page gave up", waitUntilBound, `document.querySelectorAll('#attempts li[data-status="network"]').length === 1`)
		liveWait(t, board, "the answer drawn as never delivered", waitUntilBound,
			`(s => s && s.classList.contains("lost") && /never reached the browser: timed out/.test(s.textContent))(`+respStep(order)+`)`)
		liveDo(t, board, "the row on screen", chromedp.Evaluate[chromedp.Void](respStep(order)+`.closest("#timeline > li").scrollIntoView({block: "center"})`))
		boardScreenshot(t, board, "board-not-delivered.png")
		if n, err := env.DB.CountCharges(t.Context()); err != nil || n != 4 {
			t.Errorf("%d charges (%v): want 4: the order the page gave up on is still charged once", n, err)
		}
	})
	liveNoCSPViolations(t, board)
	liveNoCSPViolations(t, phone)
}
