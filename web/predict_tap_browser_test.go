package web

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserAnswerTappedWhileAnotherStudentAnswers: a student's finger
// is on an answer when another student's answer redraws the vote on the
// phone ("1 answered"): the tap still answers. In a class of thirty the
// panel is redrawn at every answer, and a tap that spans a redraw was
// lost (the button pressed was not the one released), with nothing on
// the screen to say so.
func TestBrowserAnswerTappedWhileAnotherStudentAnswers(t *testing.T) {
	env := newTestEnv(t, Config{})
	if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"}); r.Status != http.StatusOK {
		t.Fatalf("starting the chapter: %d %s", r.Status, r.Body)
	}
	r := env.send(http.MethodPost, "/api/poll/open", PollOpen{Question: 0})
	var vote PollState
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &vote) != nil {
		t.Fatalf("opening the chapter's question: %d %s", r.Status, r.Body)
	}
	phone := liveBrowser(t, 390, 844)
	liveOpen(t, phone, env.URL+"/")
	const sel = `#poll [data-poll-answer="1"]`
	liveWait(t, phone, "the question", waitUntilBound, `!!document.querySelector('`+sel+`')`)
	at := liveEval[[]float64](t, phone, `(() => {
		const b = document.querySelector('`+sel+`');
		b.scrollIntoView({block: "center"});
		const r = b.getBoundingClientRect();
		return [r.x + r.width / 2, r.y + r.height / 2];
	})()`)
	liveDo(t, phone, "the finger down on the second answer",
		chromedp.MouseEvent(chromedp.MousePressed, at[0], at[1], chromedp.ButtonLeft, chromedp.ClickCount(1)))
	if s, body := newPhone(t, env.URL).answer(vote.ID, 0); s != http.StatusOK {
		t.Fatalf("another student's answer: %d %s", s, body)
	}
	liveWait(t, phone, "the other student's answer drawn under the finger", waitUntilBound,
		`document.getElementById("poll-answered").dataset.answered === "1"`)
	liveDo(t, phone, "the finger up",
		chromedp.MouseEvent(chromedp.MouseReleased, at[0], at[1], chromedp.ButtonLeft, chromedp.ClickCount(1)))
	liveWait(t, phone, "the tap's answer", waitUntilBound,
		`document.querySelector('`+sel+`').getAttribute("aria-pressed") === "true" && document.getElementById("poll-answered").dataset.answered === "2"`)

	// A nickname half typed when a third answer redraws the panel keeps
	// its letters and the keyboard.
	liveDo(t, phone, "typing a nickname", liveType("#poll-nick input", "Ma"))
	if s, body := newPhone(t, env.URL).answer(vote.ID, 0); s != http.StatusOK {
		t.Fatalf("a third student's answer: %d %s", s, body)
	}
	liveWait(t, phone, "the third answer drawn while typing", waitUntilBound,
		`document.getElementById("poll-answered").dataset.answered === "3"`)
	if typed := liveEval[string](t, phone, `document.activeElement === document.querySelector("#poll-nick input") ? document.activeElement.value : "(focus lost)"`); typed != "Ma" {
		t.Errorf("the nickname field after the redraw: %q, want \"Ma\" still being typed", typed)
	}
	liveNoCSPViolations(t, phone)
}
