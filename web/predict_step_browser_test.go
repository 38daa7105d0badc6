package web

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserPredictStepQuestion: with step mode on, the presenter asks
// from a held request's row on the board (1280x720) what its next step
// will do; the question leaves the step bar uncovered, a phone (390x844)
// answers, the presenter's Next on the row closes the vote and runs the
// step, and the reveal outlines what the request did.
//
// It runs alone, not beside the other browser tests: beside them on a
// loaded machine the board redrew the question between finding its
// reveal button and scrolling to it.
func TestBrowserPredictStepQuestion(t *testing.T) {
	browserFullOnly(t)
	const token = "teach-step-q"
	env := newTestEnv(t, Config{PresenterToken: token})
	if r := env.send(http.MethodPut, "/api/step", map[string]any{"on": true}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("step mode on: %d %s", r.Status, r.Body)
	}
	board := liveBrowser(t, 1280, 720)
	liveStill(t, board)
	liveOpen(t, board, env.URL+"/board?token="+token)
	phone := liveTab(t, board, true)
	liveDo(t, phone, "a phone's window", liveResize(390, 844))
	liveOpen(t, phone, env.URL+"/")

	paid := make(chan response, 1)
	go func() {
		r, _ := env.tryPay("step-browser", `{"order_id":"A-77","amount_satang":100}`)
		paid <- r
	}()
	liveWait(t, board, "the held row's Ask button", waitUntilBound, `!!document.querySelector("#step-held [data-poll-step]")`)
	liveDo(t, board, "asking the class", liveClick("#step-held [data-poll-step]"))
	liveWait(t, phone, "the question on the phone", waitUntilBound,
		`document.querySelectorAll("#poll [data-poll-answer]").length === 5 && document.getElementById("poll-q").textContent.includes("order A-77")`)
	liveDo(t, phone, "the phone answers: it claims the key", liveClick(`#poll [data-poll-answer="0"]`))
	liveWait(t, board, "one answer on the board", waitUntilBound, `document.getElementById("poll-answered").dataset.answered === "1"`)
	if !liveEval[bool](t, board, `(() => { const b = document.querySelector('#step-held [data-step="next"]').getBoundingClientRect();
		const at = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
		return !!at && at.dataset.step === "next"; })()`) {
		t.Fatal("the question covers the held request's Next button")
	}
	png, err := chromedp.Run(board, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	writePNG(t, filepath.Join(screenshotDir(t), "predict-step-board.png"), png)

	liveDo(t, board, "Next on the row", liveClick(`#step-held [data-step="next"]`))
	liveWait(t, phone, "the vote closed by the step", waitUntilBound, `!document.querySelector("#poll [data-poll-answer]")`)
	liveDo(t, board, "revealing", liveClick("#poll [data-poll-reveal]"))
	liveWait(t, phone, "the phone's answer outlined as what the request did", waitUntilBound,
		`!!document.querySelector('#poll .poll-choice.right.mine[data-choice="0"]') && document.getElementById("poll-outcome").textContent.includes("claimed the key")`)
	if r := env.send(http.MethodPost, "/api/step/play", nil, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("play: %d %s", r.Status, r.Body)
	}
	select {
	case r := <-paid:
		if r.Status != http.StatusCreated {
			t.Fatalf("the payment: %d %s", r.Status, r.Body)
		}
	case <-time.After(waitUntilBound):
		t.Fatal("the payment did not finish")
	}
	liveNoCSPViolations(t, board)
	liveNoCSPViolations(t, phone)
}
