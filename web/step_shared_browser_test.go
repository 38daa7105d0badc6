package web

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserStepModeAcrossServers drives step mode from one server's
// board while the payment runs on another, as behind a load balancer: S
// on s1's board holds a payment sent to s2, the bar lists it with its
// server, N moves it on and F lets it finish.
func TestBrowserStepModeAcrossServers(t *testing.T) {
	browserSideBySide(t)
	s, _ := stepServers(t, 2)
	board := liveBrowser(t, 1920, 1080)
	liveStill(t, board)
	liveOpen(t, board, s[0].URL+"/board")

	liveDo(t, board, "pressing S", chromedp.KeyEvent("s"))
	liveWait(t, board, "step mode on", waitUntilBound, `document.getElementById("step-bar").classList.contains("step-on")`)
	s[1].waitStepMode(true)

	ans := s[1].payAsync("board-across", "A-1")
	liveWait(t, board, "s2's request held on s1's board", waitUntilBound,
		heldAt("received")+` !== undefined && `+heldAt("received")+`.textContent.includes("on s2")`)
	liveEval[bool](t, board, `document.getElementById("step-bar").scrollIntoView(), true`)
	boardScreenshot(t, board, "board-step-servers.png")
	liveDo(t, board, "pressing N", chromedp.KeyEvent("n"))
	liveWait(t, board, "s2's request held after its claim", waitUntilBound, heldAt("key claimed")+` !== undefined`)
	// Clicked inside a wait: the step bar can be drawn again between the
	// wait above and the click (a relay that reconnects makes the board
	// reload its held requests), and the click goes to the row as it is.
	liveWait(t, board, "Finish pressed on s2's held request", waitUntilBound,
		`(() => { const li = `+heldAt("key claimed")+`; if (li === undefined) return false; li.querySelector('button[data-step="finish"]').click(); return true })()`)
	wantStatus(t, ans, http.StatusCreated)
	liveWait(t, board, "nothing held", waitUntilBound, `document.querySelectorAll("#step-bar .held li").length === 0`)
	liveWait(t, board, "no refusal shown", waitUntilBound, `document.getElementById("step-status").textContent === ""`)
	liveNoCSPViolations(t, board)
}
