package web

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserPredictRaceClassOfThree: three phones (390x844) and the
// board (1280x720) on a SQLite server. The presenter asks the
// check-then-insert chapter's question from the board, whose answer
// depends on how the race goes; one phone picks a nickname; the three
// answer; the server restarts mid-vote, and every phone comes back with
// the question and its own answer (the vote is room state); the
// presenter closes the vote, a phone sends the chapter's burst, and the
// reveal shows the split beside what the server did, the outlined answer
// agreeing with the charges in the books, and the nickname's score.
func TestBrowserPredictRaceClassOfThree(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "teach-race-3"
	r := newRestartable(t, Config{PresenterToken: token})
	if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"check-then-insert"}`, nil, PresenterHeader, token); code != http.StatusOK {
		t.Fatalf("starting the chapter: %d", code)
	}
	board := liveBrowser(t, 1280, 720)
	liveStill(t, board)
	liveOpen(t, board, r.URL()+"/board?token="+token)
	var phones []context.Context
	for range 3 {
		p := liveTab(t, board, true)
		liveDo(t, p, "a phone's window", liveResize(390, 844))
		liveStill(t, p)
		liveOpen(t, p, r.URL()+"/")
		phones = append(phones, p)
	}
	dir := screenshotDir(t)
	shoot := func(ctx context.Context, name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		writePNG(t, filepath.Join(dir, name), png)
	}

	liveWait(t, board, "the presenter's questions", waitUntilBound, `!document.getElementById("poll").hidden && !!document.querySelector("#poll [data-poll-open]")`)
	liveDo(t, board, "asking the first question", liveClick("#poll .poll-asks summary"), liveClick(`#poll [data-poll-open="0"]`))
	for i, p := range phones {
		liveWait(t, p, fmt.Sprintf("the question on phone %d", i+1), waitUntilBound, `document.querySelectorAll("#poll [data-poll-answer]").length === 2`)
	}
	liveDo(t, phones[0], "phone 1 picks a nickname", liveType("#poll-nick input", "Mai"), liveClick("#poll-nick button"))
	liveWait(t, phones[0], "the nickname kept", waitUntilBound, `!!document.getElementById("poll-my-score") && document.querySelector("#poll-nick input").value === "Mai"`)
	answers := []int{0, 1, 0}
	for i, p := range phones {
		sel := fmt.Sprintf(`#poll [data-poll-answer="%d"]`, answers[i])
		liveDo(t, p, fmt.Sprintf("phone %d answers", i+1), liveClick(sel))
		liveWait(t, p, fmt.Sprintf("phone %d's answer drawn", i+1), waitUntilBound, `document.querySelector('`+sel+`').getAttribute("aria-pressed") === "true"`)
	}
	liveWait(t, board, "three answers on the board", waitUntilBound, `document.getElementById("poll-answered").dataset.answered === "3"`)
	shoot(board, "predict-board-open.png")
	shoot(phones[0], "predict-phone-open.png")

	r.restart()
	for i, p := range phones {
		sel := fmt.Sprintf(`#poll [data-poll-answer="%d"]`, answers[i])
		liveWait(t, p, fmt.Sprintf("phone %d back, its answer kept", i+1), waitUntilBound,
			`document.getElementById("stream-state").textContent === "live" && !!document.querySelector('`+sel+`') && document.querySelector('`+sel+`').getAttribute("aria-pressed") === "true"`)
	}
	liveWait(t, board, "the board back with three answers", waitUntilBound,
		`document.getElementById("stream-state").textContent === "live" && document.getElementById("poll-answered").dataset.answered === "3" && !!document.querySelector("#poll [data-poll-close]")`)
	if liveEval[bool](t, board, `!!document.querySelector("#poll .poll-count")`) {
		t.Fatal("the board shows the split before the reveal")
	}

	liveDo(t, board, "closing the vote", liveClick("#poll [data-poll-close]"))
	liveWait(t, phones[2], "the vote closed on phone 3", waitUntilBound, `!document.querySelector("#poll [data-poll-answer]") && document.getElementById("poll-status").textContent.includes("closed")`)
	liveDo(t, phones[2], "phone 3 sends the burst", jsClick(`#lesson [data-lab-action="burst"]`))
	liveWait(t, phones[2], "the burst's answers", waitUntilBound, `document.getElementById("lesson-action-result").textContent.includes("10 requests")`)
	// The books' count for the burst's order, as the server's look-up
	// (GET /v1/payments?order_id=) told the phone: the lab's unguarded
	// table is where this chapter's charges go.
	charges := liveEval[int](t, phones[2], `(() => {
		const m = document.getElementById("lesson-action-result").textContent.match(/charged (never|once|twice|(\d+) times)/);
		if (!m) { return -1; }
		return {never: 0, once: 1, twice: 2}[m[1]] ?? Number(m[2]);
	})()`)
	if charges < 1 {
		t.Fatalf("the burst's look-up: %q", liveEval[string](t, phones[2], `document.getElementById("lesson-action-result").textContent`))
	}
	right := 1 // one charge: the others were refused
	if charges >= 2 {
		right = 0
	}
	t.Logf("the burst made %d charge(s): the right answer is choice %d", charges, right)

	liveDo(t, board, "showing the scores", liveClick(`#poll [data-poll-scores="true"]`))
	liveWait(t, board, "the scores shown", waitUntilBound, `document.getElementById("poll-scores").dataset.shown === "true"`)
	liveDo(t, board, "revealing", liveClick("#poll [data-poll-reveal]"))
	liveWait(t, board, "the split beside what the server did", waitUntilBound, fmt.Sprintf(
		`!!document.querySelector('#poll .poll-choice.right') && document.querySelector('#poll .poll-choice.right').dataset.choice === "%d" && `+
			`document.querySelector('#poll [data-choice="0"] .poll-count').dataset.count === "2" && `+
			`document.querySelector('#poll [data-choice="1"] .poll-count').dataset.count === "1" && `+
			`document.getElementById("poll-outcome").textContent.includes("at that moment the books held")`, right))
	mai := 0
	if right == 0 {
		mai = 1
	}
	liveWait(t, board, "Mai's score on the board", waitUntilBound, fmt.Sprintf(
		`[...document.querySelectorAll("#poll-scores li")].some(li => li.textContent.includes("Mai") && li.querySelector(".poll-score").dataset.right === "%d")`, mai))
	for i, p := range phones {
		want := answers[i] == right
		liveWait(t, p, fmt.Sprintf("the reveal on phone %d", i+1), waitUntilBound, fmt.Sprintf(
			`!!document.querySelector("#poll .poll-choice.right") && !!document.querySelector("#poll .poll-choice.right.mine") === %t`, want))
	}
	liveWait(t, phones[0], "Mai's own score", waitUntilBound, fmt.Sprintf(`document.getElementById("poll-my-score").dataset.right === "%d"`, mai))

	// What a class sees: the board's corner must not cover the join card,
	// and the phone's Pay must stay on the first screen.
	if !liveEval[bool](t, board, `(() => { const p = document.getElementById("poll").getBoundingClientRect();
		return p.bottom <= innerHeight && p.right <= innerWidth; })()`) {
		t.Error("the vote's panel runs off the board's 1280x720 screen")
	}
	for i, p := range phones {
		if w := liveEval[float64](t, p, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("phone %d scrolls sideways: %v px wide", i+1, w)
		}
	}
	shoot(board, "predict-board-revealed.png")
	shoot(phones[0], "predict-phone-revealed.png")
	liveNoCSPViolations(t, board)
	for _, p := range phones {
		liveNoCSPViolations(t, p)
	}
}
