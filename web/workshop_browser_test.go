package web

import (
	"context"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserWorkshopScoreboard: on a phone a student is refused a
// forbidden address with a sentence, registers their endpoint, starts it
// with the gateway the page gives and asks for a run; the board shows
// their row: a double charge, in red, beside a classmate's correct
// server that passed.
func TestBrowserWorkshopScoreboard(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "teach-ws-41"
	env := newWorkshopEnvWith(t, token)
	phone := liveBrowserFor(t, 390, 844, 8*time.Minute)
	board := liveTab(t, phone, true)
	boardViewport(t, board, 1366, 900)

	// A classmate's correct server, registered through the API.
	goodAddr := freeAddr(t, "127.0.0.3")
	goodTok := "ana-" + hex.EncodeToString(randomBytes(8))
	good := registerStudent(t, env, goodTok, "Ana", "http://"+goodAddr)
	startGoReference(t, goodAddr, good.Gateway)
	if r := env.send("POST", workshopAPI+"/run", nil, "Authorization", "Bearer "+goodTok); r.Status != 202 {
		t.Fatalf("Ana's run: %d %s", r.Status, r.Body)
	}

	liveDo(t, phone, "opening the workshop page", chromedp.Navigate(env.URL+"/workshop"))
	liveWait(t, phone, "the form", waitUntilBound, `!!document.getElementById("ws-url")`)
	liveDo(t, phone, "registering the metadata address",
		liveType("#ws-name", "Gus"), liveType("#ws-url", "http://169.254.169.254/latest"), liveClick("#ws-register"))
	liveWaitAcross(t, phone, "the refusal's sentence", waitUntilBound,
		`(document.getElementById("workshop-error")||{}).textContent?.includes("never calls 169.254.169.254")`)
	if v := liveEval[string](t, phone, `document.getElementById("ws-url").value`); v != "http://169.254.169.254/latest" {
		t.Errorf("the refused address is not kept in the field to correct: %q", v)
	}

	addr := freeAddr(t, "127.0.0.2")
	liveEval[string](t, phone, `document.getElementById("ws-url").value = ""`)
	liveDo(t, phone, "registering the laptop's endpoint", liveType("#ws-url", "http://"+addr), liveClick("#ws-register"))
	liveWaitAcross(t, phone, "the student's gateway", waitUntilBound, `!!document.getElementById("ws-gateway")`)
	gateway := liveEval[string](t, phone, `document.getElementById("ws-gateway").textContent`)
	naiveServer(t, addr, gateway)
	liveDo(t, phone, "asking for a run", liveClick("#ws-run"))
	liveWaitAcross(t, phone, "the run's double charge on the phone", waitUntilBound,
		`!!document.querySelector("#workshop-mine .workshop-facts dd.bad")`)

	liveOpen(t, board, env.URL+"/board?token="+token)
	liveWait(t, board, "Gus's row, red, on the scoreboard", waitUntilBound,
		`(() => { const r = document.querySelector('#workshop-scores tr[data-student="Gus"]');
			return !!r && r.querySelector(".badge.bad")?.textContent === "unsafe" && /[2-9]\d* (effects|charges)/.test(r.querySelector(".workshop-reason.bad")?.textContent || "") })()`)
	liveWait(t, board, "Ana's row, passed", waitUntilBound,
		`document.querySelector('#workshop-scores tr[data-student="Ana"] .badge.ok')?.textContent === "passed"`)
	liveWait(t, phone, "the phone's run over", waitUntilBound, `document.getElementById("workshop-mine").dataset.state === "done"`)
	if got := liveEval[string](t, board, `document.getElementById("ws-address").textContent`); got == "" {
		t.Error("the board does not say where students open the workshop")
	}
	if liveEval[bool](t, phone, `!!document.querySelector(".workshop-switches")`) || !liveEval[bool](t, board, `!!document.getElementById("ws-run-all")`) {
		t.Error("the presenter's switches should be on the presenter's board, not on a student's phone")
	}
	liveStill(t, board)
	liveStill(t, phone)
	boardScreenshot(t, phone, "workshop-phone.png")
	liveEval[bool](t, phone, `(document.getElementById("ws-gw-h").scrollIntoView(), true)`)
	boardScreenshot(t, phone, "workshop-phone-run.png")
	boardScreenshot(t, board, "workshop-board.png")
	liveNoCSPViolations(t, phone)
	liveNoCSPViolations(t, board)
}

// liveWaitAcross is liveWait for a condition reached through a form's
// navigation: while the next page loads the condition cannot be read,
// and is asked again, every 50 ms until timeout.
func liveWaitAcross(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	// What the page is, to tell a refused form (an error page) from a
	// scoreboard that did not change.
	at, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.body ? document.body.innerText : "").slice(0, 1500)`))
	t.Fatalf("waiting for %s (%s): not true after %s (%v)\npage %s:\n%s", what, cond, timeout, last, at, text)
}

// TestBrowserBoardShowsTheWorkshopOnceOpened: a board opened while the
// workshop is closed shows it, with no reload, once the presenter opens
// it from elsewhere, and then a student's row as they register: the
// board's event stream says the workshop changed, and the board asks for
// the panel, then the scoreboard.
func TestBrowserBoardShowsTheWorkshopOnceOpened(t *testing.T) {
	browserSideBySide(t)
	const token = "teach-ws-opened"
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, PresenterToken: token})
	board := liveBrowser(t, 1366, 900)
	liveOpen(t, board, env.URL+"/board")
	if liveEval[bool](t, board, `!!document.getElementById("workshop-scores")`) {
		t.Fatal("the board shows a closed workshop")
	}
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	liveWait(t, board, "the workshop on the board", waitUntilBound, `!!document.getElementById("workshop-scores")`)
	registerStudent(t, env, "zoe-"+hex.EncodeToString(randomBytes(8)), "Zoe", "http://"+freeAddr(t, "127.0.0.2"))
	liveWait(t, board, "Zoe's row on the scoreboard", waitUntilBound, `!!document.querySelector('#workshop-scores tr[data-student="Zoe"]')`)

	// Closed from elsewhere, the workshop leaves the board the same way,
	// and comes back when opened again.
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopClosed}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("closing the workshop: %d %s", r.Status, r.Body)
	}
	liveWait(t, board, "the workshop gone from the board", waitUntilBound,
		`!document.getElementById("workshop-scores") && document.getElementById("board-workshop")?.tagName === "TEMPLATE"`)
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop again: %d %s", r.Status, r.Body)
	}
	liveWait(t, board, "the workshop, and Zoe's row, back on the board", waitUntilBound,
		`!!document.querySelector('#workshop-scores tr[data-student="Zoe"]')`)
}

// TestBrowserWorkshopPhoneFollowsOpenAndClose: a student's phone page
// opened while the workshop is closed says so, and stops saying it once
// the presenter opens the workshop from elsewhere; the student registers
// and sees their own result; when the presenter closes the workshop the
// phone stops drawing that result and says, in words, that the workshop
// is closed, as the board's scoreboard leaves the board; opened again,
// the result comes back. No reload: the page fetches both parts itself.
func TestBrowserWorkshopPhoneFollowsOpenAndClose(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "teach-ws-phone-close"
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, PresenterToken: token})
	settings := func(on *bool) {
		t.Helper()
		if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: on}, PresenterHeader, token); r.Status != http.StatusOK {
			t.Fatalf("the workshop open %v: %d %s", *on, r.Status, r.Body)
		}
	}
	const closedLine = `(() => { const s = document.getElementById("workshop-state");
		return !!s && !s.hidden && s.dataset.on === "false" && s.textContent.includes("The workshop is closed") })()`
	const openLine = `(() => { const s = document.getElementById("workshop-state");
		return !!s && s.hidden && s.dataset.on === "true" && s.textContent.trim() === "" })()`
	phone := liveBrowser(t, 390, 844)
	liveDo(t, phone, "opening the workshop page", chromedp.Navigate(env.URL+"/workshop"))
	liveWait(t, phone, "the page saying the workshop is closed", waitUntilBound, closedLine)

	settings(&workshopOpen)
	liveWait(t, phone, "the closed line gone once the workshop opened", waitUntilBound, openLine)
	liveDo(t, phone, "registering", liveType("#ws-name", "Ida"), liveType("#ws-url", "http://"+freeAddr(t, "127.0.0.2")), liveClick("#ws-register"))
	liveWaitAcross(t, phone, "the student's own result", waitUntilBound,
		`(() => { const m = document.getElementById("workshop-mine"); return !!m && m.dataset.state !== "closed" && !!m.querySelector(".workshop-facts") })()`)

	settings(&workshopClosed)
	liveWait(t, phone, "the result replaced by the closed workshop's sentence", waitUntilBound,
		`(() => { const m = document.getElementById("workshop-mine");
			return !!m && m.dataset.state === "closed" && !m.querySelector(".workshop-facts") && m.textContent.includes("The presenter closed the workshop") })()`)
	liveWait(t, phone, "the page saying the workshop is closed again", waitUntilBound, closedLine)

	settings(&workshopOpen)
	liveWait(t, phone, "the result back once the workshop opened again", waitUntilBound,
		`(() => { const m = document.getElementById("workshop-mine"); return !!m && m.dataset.state !== "closed" && !!m.querySelector(".workshop-facts") })()`)
	liveWait(t, phone, "the closed line gone again", waitUntilBound, openLine)
	liveNoCSPViolations(t, phone)
}
