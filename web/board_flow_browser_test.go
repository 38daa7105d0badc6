package web

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"paytwice/pay"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// boardFlowMeasure checks a board that may scroll (a phone's, a tablet's,
// or a projector's outside a chapter): the panels shown do not overlap
// one another, measured with the page at its top, and each thing the
// class reads, brought into view in turn, is not under anything else.
// It returns the problems in words.
const boardFlowMeasure = `(() => {
  const problems = [];
  const r = e => e.getBoundingClientRect();
  const box = b => Math.round(b.left) + "," + Math.round(b.top) + " " + Math.round(b.width) + "x" + Math.round(b.height);
  const text = e => e.textContent.replace(/\s+/g, " ").trim().slice(0, 50);
  const shown = e => !!e && e.checkVisibility() && r(e).height >= 2;
  window.scrollTo(0, 0);
  const panels = [
    ["the vote panel", document.getElementById("poll")],
    ["the join panel", document.getElementById("join")],
    ["the lesson", document.getElementById("lesson")],
    ["the workshop", document.getElementById("board-workshop")],
    ["the step bar", document.getElementById("step-bar")],
    ["the counters", document.querySelector(".panel-counters")],
    ["the timeline", document.querySelector(".panel-timeline")],
  ].filter(([, e]) => shown(e)).map(([n, e]) => [n, e, r(e)]);
  for (let i = 0; i < panels.length; i++) for (let j = i + 1; j < panels.length; j++) {
    const [n1, e1, a] = panels[i], [n2, e2, b] = panels[j];
    if (e1.contains(e2) || e2.contains(e1)) continue;
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 1 && h > 1) problems.push(n1 + " at " + box(a) + " overlaps " + n2 + " at " + box(b));
  }
  const read = "#join-h, .join-url, #lesson h2, #lesson .watch-item, #lesson button, #poll-q, #poll .poll-choice, #poll button, " +
    "#poll-scores li, .panel-counters .tile, #step-bar .step-title, #ws-run-all";
  for (const e of document.querySelectorAll(read)) {
    if (!shown(e)) continue;
    e.scrollIntoView({block: "center", inline: "nearest"});
    const b = r(e);
    const at = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
    if (!at || !(at === e || e.contains(at))) {
      const what = at ? at.tagName.toLowerCase() + (at.closest("[id]") ? " in #" + at.closest("[id]").id : "") : "nothing";
      problems.push(text(e) + " is under " + what);
    }
  }
  window.scrollTo(0, 0);
  return problems;
})()`

// TestBrowserBoardVoteTakesItsPlaceInTheFlow: the class's vote and the
// scores take their place among the board's panels wherever the board
// is not a projector running a chapter. Outside a chapter, with thirty
// nicknames in the scores, at 1920x1080, 1280x720, 768x1024 and 390x844,
// the scores cover neither the join panel nor anything else; in a
// chapter, with its question open, on a tablet (768x1024) and a phone
// (390x844) the vote sits between the chapter and the rest of the board,
// over nothing. No row of the scores, nor their heading, nor a line of
// the vote shows cut in half, and the scores' heading is as large as its
// rows. No page scrolls sideways. The pictures go to
// $PAYTWICE_SCREENSHOTS/board-flow when it is set.
func TestBrowserBoardVoteTakesItsPlaceInTheFlow(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	for i := range 8 {
		env.pay(uuid.NewString(), fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, 4100+i))
	}
	for i := range 30 {
		if status, body := newPhone(t, env.URL).do(http.MethodPost, "/api/poll/nickname", PollNickname{Nickname: fmt.Sprintf("student %02d", i+1)}); status != http.StatusOK {
			t.Fatalf("nickname %d: %d %s", i+1, status, body)
		}
	}
	if r := env.send(http.MethodPost, "/api/poll/scores", PollScores{Shown: true}); r.Status != http.StatusOK {
		t.Fatalf("showing the scores: %d %s", r.Status, r.Body)
	}

	ctx := liveBrowserFor(t, 1920, 1080, 6*time.Minute)
	liveStill(t, ctx)
	liveOpen(t, ctx, env.URL+"/board")
	liveWait(t, ctx, "the scores on the idle board", waitUntilBound,
		`!document.getElementById("poll").hidden && document.querySelectorAll("#poll-scores li").length >= 8 && document.querySelectorAll("#timeline > li").length >= 8`)

	check := func(phase string, sizes [][2]int64) {
		t.Helper()
		for _, size := range sizes {
			if size[0] < 1100 {
				liveDo(t, ctx, "a phone's or a tablet's size", chromedp.EmulateViewport(size[0], size[1], chromedp.EmulateMobile, chromedp.EmulateScale(2)))
			} else {
				liveDo(t, ctx, "a projector", chromedp.EmulateReset())
				boardViewport(t, ctx, size[0], size[1])
			}
			where := fmt.Sprintf("%s at %dx%d", phase, size[0], size[1])
			for _, p := range liveEval[[]string](t, ctx, boardFlowMeasure) {
				t.Errorf("%s: %s", where, p)
			}
			for _, p := range liveEval[[]string](t, ctx, pollCutMeasure) {
				t.Errorf("%s: %s", where, p)
			}
			if w := liveEval[[]float64](t, ctx, `[document.scrollingElement.scrollWidth, innerWidth]`); w[0] > w[1]+1 {
				t.Errorf("%s: the page is %v px wide in a %v px viewport", where, w[0], w[1])
			}
			boardScreenshot(t, ctx, fmt.Sprintf("board-flow/%s-%dx%d.png", phase, size[0], size[1]))
		}
		liveDo(t, ctx, "back to a projector", chromedp.EmulateReset())
		boardViewport(t, ctx, 1920, 1080)
	}
	check("scores", [][2]int64{{1920, 1080}, {1280, 720}, {768, 1024}, {390, 844}})

	if err := env.Server.guidedLessons().start(context.Background(), "response-lost", "test"); err != nil {
		t.Fatal(err)
	}
	if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{}, "test"); err != nil {
		t.Fatal(err)
	}
	if r := env.send(http.MethodPost, "/api/poll/open", PollOpen{Question: 0}); r.Status != http.StatusOK {
		t.Fatalf("opening the chapter's question: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the chapter and its vote on the board", waitUntilBound,
		`!!document.querySelector("#lesson .watch-item") && document.querySelectorAll("#poll .poll-choice").length >= 2 && !!document.querySelector("#poll [data-poll-reveal]")`)
	check("vote", [][2]int64{{768, 1024}, {390, 844}})
	liveNoCSPViolations(t, ctx)
}
