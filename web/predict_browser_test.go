package web

import (
	"net/http"
	"net/url"
	"testing"
)

// TestBrowserPredictThenObserve: the presenter asks the response-lost
// chapter's question from the board; two phones answer, one changes its
// mind; the board counts two answers and shows no split; the presenter
// closes the vote, a phone pays for real and its response is lost, its
// retry is replayed; the reveal shows the split beside what the server
// did, the right answer outlined.
func TestBrowserPredictThenObserve(t *testing.T) {
	browserSideBySide(t)
	const token = "teach-9c1d"
	env := newTestEnv(t, Config{PresenterToken: token})
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("starting the chapter: %d %s", r.Status, r.Body)
	}
	board := liveBrowser(t, 1366, 900)
	p1, p2 := liveTab(t, board, true), liveTab(t, board, true)

	liveOpen(t, board, env.URL+"/board?token="+url.QueryEscape(token))
	// backoff_ms shrinks the page's retry delays to 20 ms.
	liveOpen(t, p1, env.URL+"/?backoff_ms=20")
	liveOpen(t, p2, env.URL+"/?backoff_ms=20")
	if liveEval[bool](t, p1, `!!document.querySelector("#poll [data-poll-open]")`) {
		t.Fatal("a phone has the presenter's Ask buttons")
	}

	liveWait(t, board, "the presenter's questions", waitUntilBound, `!document.getElementById("poll").hidden && !!document.querySelector("#poll [data-poll-open]")`)
	liveDo(t, board, "asking the first question", liveClick("#poll .poll-asks summary"), liveClick(`#poll [data-poll-open="0"]`))

	const choices = `document.querySelectorAll("#poll [data-poll-answer]").length === 4`
	liveWait(t, p1, "the question on phone 1", waitUntilBound, choices)
	liveWait(t, p2, "the question on phone 2", waitUntilBound, choices)
	liveDo(t, p1, "phone 1 answers a second charge", liveClick(`#poll [data-poll-answer="0"]`))
	liveWait(t, p1, "phone 1's answer drawn", waitUntilBound, `document.querySelector('#poll [data-poll-answer="0"]').getAttribute("aria-pressed") === "true"`)
	liveDo(t, p1, "phone 1 changes its mind: the saved 201", liveClick(`#poll [data-poll-answer="1"]`))
	liveWait(t, p1, "phone 1's new answer drawn", waitUntilBound,
		`document.querySelector('#poll [data-poll-answer="1"]').getAttribute("aria-pressed") === "true" && document.querySelector('#poll [data-poll-answer="0"]').getAttribute("aria-pressed") === "false"`)
	liveDo(t, p2, "phone 2 answers a 409", liveClick(`#poll [data-poll-answer="2"]`))

	liveWait(t, board, "two answers counted on the board", waitUntilBound, `document.getElementById("poll-answered").dataset.answered === "2"`)
	if liveEval[bool](t, board, `!!document.querySelector("#poll .poll-count")`) {
		t.Fatal("the board shows the split before the reveal")
	}

	liveDo(t, board, "closing the vote", liveClick("#poll [data-poll-close]"))
	liveWait(t, p2, "the vote closed on phone 2", waitUntilBound,
		`!document.querySelector("#poll [data-poll-answer]") && document.getElementById("poll-status").textContent.includes("closed")`)

	// Phone 1's panel shrinks when it draws the close: Pay is clicked
	// once it has, or the click could land where Pay was.
	liveWait(t, p1, "the vote closed on phone 1", waitUntilBound,
		`!document.querySelector("#poll [data-poll-answer]") && document.getElementById("poll-status").textContent.includes("closed")`)
	liveDo(t, p1, "paying", liveClick("#pay"))
	liveWait(t, p1, "the page to end paid", waitUntilBound, paidNow)

	liveDo(t, board, "revealing", liveClick("#poll [data-poll-reveal]"))
	liveWait(t, board, "the split and what the server did", waitUntilBound,
		`document.querySelector('#poll .poll-choice.right') && document.querySelector('#poll .poll-choice.right').dataset.choice === "1" && `+
			`document.querySelector('#poll [data-choice="1"] .poll-count').dataset.count === "1" && `+
			`document.querySelector('#poll [data-choice="2"] .poll-count').dataset.count === "1" && `+
			`document.querySelector('#poll [data-choice="0"] .poll-count').dataset.count === "0" && `+
			`document.getElementById("poll-outcome").textContent.includes("replayed the saved 201")`)
	liveWait(t, p1, "the reveal on phone 1, its own answer marked right", waitUntilBound,
		`!!document.querySelector('#poll .poll-choice.right.mine')`)
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	if n := liveEval[int](t, board, `[...document.querySelectorAll("#timeline .tl-row")].filter(r => /vote|poll/i.test(r.textContent)).length`); n != 0 {
		t.Errorf("the votes drew %d rows on the timeline: they are the board's corner, not the server's steps", n)
	}
	liveNoCSPViolations(t, board)
	liveNoCSPViolations(t, p1)
}
