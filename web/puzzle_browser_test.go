package web

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserPuzzleStudentSchedules: on the check-then-insert chapter,
// with step mode on, two requests of one order are held; the presenter
// starts the scheduler's puzzle from the board (1280x720) and gives the
// step bar to the student who picked the nickname Mai on her phone
// (390x844). Mai's phone lists the order's held requests with their
// buttons; she lets both look the key up before either inserts, then
// finishes both: after the first, the phone says the books hold one
// charge. The books then hold two charges for the order, and the board
// and the phone say the puzzle was solved in four steps. A second phone
// without the bar has no step buttons.
func TestBrowserPuzzleStudentSchedules(t *testing.T) {
	browserSideBySide(t)
	const token = "teach-sched-browser"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter := env.asPresenter(token)
	if r := presenter(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "check-then-insert"}); r.Status != http.StatusOK {
		t.Fatalf("chapter: %d %s", r.Status, r.Body)
	}
	if r := presenter(http.MethodPut, "/api/step", map[string]bool{"on": true}); r.Status != http.StatusOK {
		t.Fatalf("step mode on: %d %s", r.Status, r.Body)
	}
	board := liveBrowser(t, 1280, 720)
	liveStill(t, board)
	liveOpen(t, board, env.URL+"/board?token="+token)
	mai := liveTab(t, board, true)
	liveDo(t, mai, "Mai's phone", liveResize(390, 844))
	liveStill(t, mai)
	liveOpen(t, mai, env.URL+"/")
	bo := liveTab(t, board, true)
	liveDo(t, bo, "Bo's phone", liveResize(390, 844))
	liveOpen(t, bo, env.URL+"/")
	dir := screenshotDir(t)
	shoot := func(ctx context.Context, name string) {
		t.Helper()
		if !picturesWanted() {
			return // the pictures only: what the page says is asserted below
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		writePNG(t, filepath.Join(dir, name), png)
	}

	var answers []<-chan response
	for range 2 {
		ch := make(chan response, 1)
		go func() {
			r, err := env.tryPay("sched-browser", `{"order_id":"S-9","amount_satang":129900}`)
			if err != nil {
				r = response{Status: -1, Body: []byte(err.Error())}
			}
			ch <- r
		}()
		answers = append(answers, ch)
	}
	liveWait(t, board, "the offer of a puzzle on the order held twice", waitUntilBound,
		`!!document.querySelector("#poll [data-puzzle-start]") && document.getElementById("puzzle-starts").textContent.includes("S-9: 2 requests held")`)
	liveDo(t, board, "starting the puzzle", jsClick("#poll [data-puzzle-start]"))
	liveWait(t, mai, "the puzzle on Mai's phone", waitUntilBound, `!!document.getElementById("puzzle") && !!document.querySelector("#poll-nick input")`)
	liveDo(t, mai, "Mai picks a nickname", liveType("#poll-nick input", "Mai"), liveClick("#poll-nick button"))
	liveWait(t, board, "Mai's row, with the presenter's button", waitUntilBound,
		`[...document.querySelectorAll("#poll-scores li")].some(li => li.textContent.includes("Mai") && !!li.querySelector("[data-puzzle-bar]"))`)
	liveDo(t, board, "giving Mai the step bar", chromedp.Evaluate[chromedp.Void](
		`[...document.querySelectorAll("#poll-scores li")].find(li => li.textContent.includes("Mai")).querySelector("[data-puzzle-bar]").click()`))
	liveWait(t, board, "the board says the bar is Mai's", waitUntilBound, `document.getElementById("puzzle-status").textContent.includes("The step bar is Mai's")`)
	liveWait(t, mai, "the order's two held requests on Mai's phone", waitUntilBound,
		`document.querySelectorAll('#puzzle-held li [data-puzzle-step="next"]').length === 2`)
	ids := liveEval[[]string](t, mai, `[...document.querySelectorAll("#puzzle-held li")].map(li => li.dataset.request)`)
	if len(ids) != 2 {
		t.Fatalf("held rows on the phone: %v", ids)
	}
	if liveEval[bool](t, bo, `!!document.querySelector("[data-puzzle-step]")`) {
		t.Fatal("Bo, without the bar, has step buttons")
	}

	// step presses one of Mai's buttons on a request and waits for the
	// step counted on the board and the request's row where it stops.
	step := func(what, id string, steps int, at string) {
		t.Helper()
		sel := fmt.Sprintf(`#puzzle-held li[data-request=%q] [data-puzzle-step=%q]`, id, what)
		liveDo(t, mai, fmt.Sprintf("Mai: %s on %s", what, id), liveClick(sel))
		liveWait(t, board, fmt.Sprintf("%d step(s) on the board", steps), waitUntilBound,
			fmt.Sprintf(`document.getElementById("puzzle").dataset.steps === "%d"`, steps))
		if at != "" {
			liveWait(t, mai, fmt.Sprintf("%s held at %q on the phone", id, at), waitUntilBound,
				fmt.Sprintf(`(() => { const li = document.querySelector('#puzzle-held li[data-request=%q]'); return !!li && li.textContent.includes(%q); })()`, id, at))
		}
	}
	step("next", ids[0], 1, "key looked up")
	step("next", ids[1], 2, "key looked up")
	shoot(board, "puzzle-board-solving.png")
	shoot(mai, "puzzle-phone-solving.png")
	step("finish", ids[0], 3, "")
	// The books' count of the first charge redraws the panel: the next
	// button is pressed on the panel that says it.
	liveWait(t, mai, "the books' one charge on Mai's phone", waitUntilBound,
		`document.getElementById("puzzle-status").textContent.includes("the books hold 1 charge for the order: the held requests have not charged it twice yet")`)
	step("finish", ids[1], 4, "")

	liveWait(t, board, "the board says solved in 4 steps", waitUntilBound,
		`document.getElementById("puzzle").dataset.solved === "true" && document.getElementById("puzzle-result").textContent.includes("Solved in 4 steps: the books hold 2 charges")`)
	liveWait(t, mai, "Mai's phone says solved", waitUntilBound, `document.getElementById("puzzle").dataset.solved === "true"`)
	for i, a := range answers {
		select {
		case r := <-a:
			if r.Status != http.StatusCreated {
				t.Fatalf("request %d: %d %s", i+1, r.Status, r.Body)
			}
		case <-time.After(waitUntilBound):
			t.Fatalf("request %d got no answer", i+1)
		}
	}
	p := env.Server.room.Load().Puzzle
	chs, err := env.Server.db.ChargesByOrder(context.Background(), p.Scope, "S-9")
	if err != nil || len(chs) != 2 {
		t.Fatalf("the books hold %d charges for S-9 (%v)", len(chs), err)
	}
	if !liveEval[bool](t, board, `(() => { const p = document.getElementById("poll").getBoundingClientRect();
		return p.bottom <= innerHeight && p.right <= innerWidth; })()`) {
		t.Error("the puzzle's panel runs off the board's 1280x720 screen")
	}
	if w := liveEval[float64](t, mai, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("Mai's phone scrolls sideways: %v px wide", w)
	}
	shoot(board, "puzzle-board-solved.png")
	shoot(mai, "puzzle-phone-solved.png")
	liveNoCSPViolations(t, board)
	liveNoCSPViolations(t, mai)
}
