package web

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/pay"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// boardShare is what TestBrowserBoardChapterVoteAndWorkshopShareTheScreen
// measures in the page.
type boardShare struct {
	ViewW, ViewH, ScrollW, ScrollH float64
	// RowsInView is how many of the timeline's folded rows its box holds
	// on screen; TimelineH is that box's height on screen.
	RowsInView int
	TimelineH  float64
	// Problems lists, in words, what overlaps, what is drawn over what,
	// and what is off screen.
	Problems []string
}

// boardShareMeasure checks, by their rectangles, that the board's panels
// a chapter, a vote and the workshop put on the projector do not overlap
// one another and are on screen; and, by what the browser finds at their
// middle, that nothing is drawn over the "Watch for" items, the counters,
// the workshop's "Run everyone again" or the vote's question (and, when
// choices is true, its choices and the presenter's buttons). It measures how many rows the timeline has room for.
const boardShareMeasure = `(choices => {
  const out = {ViewW: innerWidth, ViewH: innerHeight, ScrollW: document.scrollingElement.scrollWidth,
    ScrollH: document.scrollingElement.scrollHeight, RowsInView: 0, TimelineH: 0, Problems: []};
  const r = e => e.getBoundingClientRect();
  const box = b => Math.round(b.left) + "," + Math.round(b.top) + " " + Math.round(b.width) + "x" + Math.round(b.height);
  const panels = [
    ["the vote panel", document.getElementById("poll")],
    ["the chapter's caption", document.getElementById("lesson")],
    ["the Watch for list", document.querySelector("#lesson .caption-watch")],
    ["the counters", document.querySelector(".panel-counters")],
    ["the workshop", document.getElementById("board-workshop")],
    ["Run everyone again", document.getElementById("ws-run-all")],
    ["the timeline", document.querySelector(".panel-timeline")],
    ["the step bar", document.getElementById("step-bar")],
    ["the join panel", document.getElementById("join")],
  ];
  const shown = [];
  for (const [name, e] of panels) {
    if (!e || !e.checkVisibility() || r(e).height < 2) { out.Problems.push(name + " is not shown"); continue; }
    const b = r(e);
    if (b.top < -1 || b.left < -1 || b.bottom > innerHeight + 1 || b.right > innerWidth + 1) out.Problems.push(name + " is off screen at " + box(b));
    shown.push([name, e, b]);
  }
  for (let i = 0; i < shown.length; i++) for (let j = i + 1; j < shown.length; j++) {
    const [n1, e1, a] = shown[i], [n2, e2, b] = shown[j];
    if (e1.contains(e2) || e2.contains(e1)) continue;
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 1 && h > 1) out.Problems.push(n1 + " at " + box(a) + " overlaps " + n2 + " at " + box(b));
  }
  const onTop = (name, e) => {
    const b = r(e);
    const at = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
    if (!at || !(at === e || e.contains(at))) {
      const what = at ? at.tagName.toLowerCase() + (at.id ? "#" + at.id : "") + (at.closest("[id]") ? " in #" + at.closest("[id]").id : "") : "nothing (off screen)";
      out.Problems.push(name + " at " + box(b) + " is under " + what);
    }
  };
  const text = e => e.textContent.replace(/\s+/g, " ").trim().slice(0, 50);
  for (const e of document.querySelectorAll("#lesson .watch-item")) onTop("Watch for: " + text(e), e);
  for (const e of document.querySelectorAll(".panel-counters .tile")) onTop("the counter " + text(e), e);
  for (const e of document.querySelectorAll("#step-held li, #step-held button")) onTop(text(e), e);
  for (const e of document.querySelectorAll("#ws-run-all, #lesson-next, #poll-q" + (choices ? ", #poll .poll-choice, #poll [data-poll-close], #poll [data-poll-reveal], #poll .poll-asks > summary, #poll [data-poll-scores]" : ""))) onTop(text(e), e);
  // The vote's question, choices and buttons show whole, none a scroll
  // away inside the vote's box.
  const poll = document.getElementById("poll");
  if (choices && poll && poll.checkVisibility()) {
    const pb = r(poll);
    for (const e of poll.querySelectorAll("#poll-q, .poll-choice, [data-poll-close], [data-poll-reveal], .poll-asks > summary, [data-poll-scores]")) {
      const b = r(e);
      if (b.top < pb.top - 1 || b.bottom > pb.bottom + 1) out.Problems.push(text(e) + " at " + box(b) + " is a scroll away inside the vote at " + box(pb));
    }
  }
  // The charges per order show their heading whole, or not at all: never
  // half of it between the counters' tiles and the next panel.
  // So do each of its rows.
  const counters = document.querySelector(".panel-counters");
  for (const e of document.querySelectorAll(".panel-counters #orders > h3, .panel-counters #orders-list > li, .panel-counters #orders-more")) {
    if (!e.checkVisibility()) continue;
    const b = r(e), c = r(counters);
    const seen = Math.min(b.bottom, c.top + counters.clientTop + counters.clientHeight, innerHeight) - Math.max(b.top, c.top, 0);
    if (seen > 1 && seen < b.height - 1) out.Problems.push((e.tagName === "H3" ? "the heading " : "the order ") + text(e) + " shows " + Math.round(seen) + " of its " + Math.round(b.height) + " px");
  }
  // Rows stepped aside are said to be there: the list never reads as whole.
  const head = document.querySelector(".panel-counters #orders > h3");
  if (head && head.checkVisibility() && document.querySelector(".panel-counters #orders-list > li.order-unseen, .panel-counters #orders-more.order-unseen") && head.dataset.more !== "true") {
    out.Problems.push("the charges per order hide rows and their heading does not say so");
  }
  const tl = document.getElementById("timeline"), tb = r(tl);
  const top = Math.max(tb.top, 0), bottom = Math.min(tb.bottom, innerHeight);
  out.TimelineH = Math.max(bottom - top, 0);
  // The newest row of a chapter opens to its full exchange: the box is
  // counted in rows of the folded ones, as a class sees them pile up.
  const heights = [...tl.children].map(li => r(li).height).filter(h => h > 1);
  if (heights.length) out.RowsInView = Math.floor(out.TimelineH / Math.min(...heights));
  return out;
})`

// boardSettled waits for the page to draw two frames, so that what
// board.js does after a resize or a swap (the charges per order fitted
// to their panel) is done before the page is measured.
func boardSettled(t *testing.T, ctx context.Context) {
	t.Helper()
	liveEval[bool](t, ctx, `new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))`)
}

// TestBrowserBoardChapterVoteAndWorkshopShareTheScreen projects the
// presenter's board at 1920x1080 and at 1280x720 with a chapter running,
// the workshop open with three students registered, eight payments on
// the timeline and thirty nicknames in the scores: first with no vote
// under way, then with the chapter's question open. The vote panel, the
// chapter's caption and its "Watch for" list, the counters, the workshop
// and its "Run everyone again", the timeline, the step bar and the join
// panel do not overlap, nothing is drawn over them, the page does not
// scroll, and the timeline has room for at least four rows at 1920x1080
// (two at 1280x720). At both sizes the vote's question, its choices and
// the presenter's Close and Reveal show whole, none a scroll away inside
// the vote's box, and so do the presenter's "Ask the class" and the
// scores' switch in every phase of the vote (the presenter asks, closes,
// reveals and shows the scores whatever the screen's height); the heading of the charges per order is whole or
// not shown, never half, and so is each of its rows. Last, the chapter
// restarted (its vote gone, the scores shown), step mode holds two requests: each held request and its buttons show whole, over
// nothing and under nothing, the timeline keeps half its rows, and the
// workshop's scoreboard waits. Once the split is revealed, no line of the vote
// and no part of the scores under it shows cut at the vote box's edge,
// and the charges per order come back at 1920x1080, a row at least. On a phone's checkout page the
// chosen answer's button is as wide as the others. The scores list the leaders and say how many more
// there are. A phone (390x844) is photographed, and must not scroll
// sideways. The pictures go to $PAYTWICE_SCREENSHOTS/board-share when it
// is set.
func TestBrowserBoardChapterVoteAndWorkshopShareTheScreen(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newWorkshopEnvWith(t, "")
	for _, name := range []string{"Ana", "Gus", "Mei"} {
		registerStudent(t, env, strings.ToLower(name)+"-"+hex.EncodeToString(randomBytes(8)), name, "http://"+freeAddr(t, "127.0.0.2"))
	}
	if err := env.Server.guidedLessons().start(context.Background(), "response-lost", "test"); err != nil {
		t.Fatal(err)
	}
	// The chapter's fault off, so that every answer arrives.
	if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{}, "test"); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		env.pay(uuid.NewString(), fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, 4100+i))
	}
	for i := range 30 {
		if status, body := newPhone(t, env.URL).do(http.MethodPost, "/api/poll/nickname", PollNickname{Nickname: fmt.Sprintf("student %02d", i+1)}); status != http.StatusOK {
			t.Fatalf("nickname %d: %d %s", i+1, status, body)
		}
	}

	ctx := liveBrowserFor(t, 1920, 1080, 6*time.Minute)
	liveStill(t, ctx)
	liveOpen(t, ctx, env.URL+"/board")
	liveWait(t, ctx, "the chapter, the workshop's three students, eight rows and the scores", waitUntilBound,
		`!!document.querySelector("#lesson .watch-item") && document.querySelectorAll("#workshop-scores tr[data-student]").length === 3 && `+
			`document.querySelectorAll("#timeline > li").length >= 8 && document.querySelectorAll("#poll-scores li").length >= 8`)

	check := func(phase string) {
		t.Helper()
		for _, size := range [][2]int64{{1920, 1080}, {1280, 720}} {
			if phase == "held" {
				boardViewport(t, ctx, size[0], size[1])
				boardSettled(t, ctx)
				if liveEval[bool](t, ctx, `(w => !!w && w.checkVisibility())(document.querySelector("#board-workshop .table-wrap"))`) {
					t.Errorf("held at %dx%d: the workshop's scoreboard shows beside the held requests", size[0], size[1])
				}
			}
			boardViewport(t, ctx, size[0], size[1])
			liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
			boardSettled(t, ctx)
			where := fmt.Sprintf("%s at %dx%d", phase, size[0], size[1])
			boardScreenshot(t, ctx, fmt.Sprintf("board-share/%s-%dx%d.png", phase, size[0], size[1]))
			g := liveEval[boardShare](t, ctx, fmt.Sprintf("(%s)(%t)", boardShareMeasure, phase != "scores"))
			for _, p := range g.Problems {
				t.Errorf("%s: %s", where, p)
			}
			for _, p := range liveEval[[]string](t, ctx, pollCutMeasure) {
				t.Errorf("%s: %s", where, p)
			}
			// Once the vote is revealed it stays on the board: the charges
			// per order come back beside it, a row at least, where there is
			// room for one (at 1280x720 the vote and the counters' tiles
			// fill the column: whole or hidden, above).
			if phase == "revealed" && size[1] > 1000 && !liveEval[bool](t, ctx, `(h => !!h && h.checkVisibility())(document.querySelector(".panel-counters #orders-list > li"))`) {
				t.Errorf("%s: the charges per order are hidden beside the revealed vote", where)
			}
			if g.ScrollH > g.ViewH+1 || g.ScrollW > g.ViewW+1 {
				t.Errorf("%s: the page scrolls: %vx%v of content", where, g.ScrollW, g.ScrollH)
			}
			want := 4
			if size[1] < 1000 {
				want = 2
			}
			if phase == "held" {
				// The held requests' rows are the timeline's newest: the
				// step bar under them takes its share.
				want /= 2
			}
			if g.RowsInView < want {
				t.Errorf("%s: the timeline shows %d rows (%.0f px), want %d or more", where, g.RowsInView, g.TimelineH, want)
			}
			t.Logf("%s: the timeline shows %d rows in %.0f px", where, g.RowsInView, g.TimelineH)
		}
		liveDo(t, ctx, "a phone's size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
		liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
		boardScreenshot(t, ctx, fmt.Sprintf("board-share/%s-phone.png", phase))
		if w := liveEval[[]float64](t, ctx, `[document.scrollingElement.scrollWidth, innerWidth]`); w[0] > w[1]+1 {
			t.Errorf("%s on a phone: the page is %v px wide in a %v px viewport", phase, w[0], w[1])
		}
		boardViewport(t, ctx, 1920, 1080)
	}

	check("scores")
	if got := liveEval[string](t, ctx, `(document.getElementById("poll-more") || {dataset: {}}).dataset.more || ""`); got != "22" {
		t.Errorf("the scores list 8 of 30 nicknames and say %q more, want 22", got)
	}

	if r := env.send(http.MethodPost, "/api/poll/open", PollOpen{Question: 0}); r.Status != http.StatusOK {
		t.Fatalf("opening the chapter's question: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the vote on the board", waitUntilBound, `document.querySelectorAll("#poll .poll-choice").length >= 2 && !!document.querySelector("#poll [data-poll-reveal]")`)
	check("vote")

	// A student's phone answers on the checkout page: the chosen answer's
	// button keeps the width of the choices, its "your answer" badge under
	// it, not beside it.
	liveDo(t, ctx, "a phone's size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, ctx, env.URL+"/")
	liveWait(t, ctx, "the question on the phone", waitUntilBound, `document.querySelectorAll("#poll [data-poll-answer]").length >= 2`)
	liveDo(t, ctx, "answering", liveClick(`#poll [data-poll-answer="1"]`))
	liveWait(t, ctx, "the answer chosen on the phone", waitUntilBound, `!!document.querySelector('#poll [data-poll-answer="1"][aria-pressed="true"]') && !!document.querySelector('#poll .poll-choice[data-choice="1"] .badge')`)
	boardScreenshot(t, ctx, "board-share/answered-checkout-phone.png")
	if w := liveEval[[]float64](t, ctx, `[1, 0].map(n => document.querySelector('#poll [data-poll-answer="' + n + '"]').getBoundingClientRect().width)`); w[0] < w[1]-1 {
		t.Errorf("on the phone the chosen answer's button is %.0f px wide beside its badge, the others %.0f px", w[0], w[1])
	}
	liveDo(t, ctx, "back to a projector", chromedp.EmulateReset())
	boardViewport(t, ctx, 1920, 1080)
	liveOpen(t, ctx, env.URL+"/board")
	liveWait(t, ctx, "the answer on the board", waitUntilBound, `(e => !!e && e.dataset.answered === "1")(document.getElementById("poll-answered")) && !!document.querySelector("#poll [data-poll-reveal]")`)

	id := env.Server.room.Load().Poll.ID
	if r := env.send(http.MethodPost, "/api/poll/reveal", PollRef{ID: id}); r.Status != http.StatusOK {
		t.Fatalf("revealing the split: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the split on the board", waitUntilBound, `!!document.getElementById("poll-outcome") && !!document.querySelector("#poll .poll-count")`)
	// A chapter's question (not a step's) waits for the chapter, not for
	// a step that step mode, off, has no way to run.
	if got := liveEval[string](t, ctx, `document.getElementById("poll-outcome").textContent.replace(/\s+/g, " ").trim()`); strings.Contains(got, "run the step") {
		t.Errorf("the chapter's pending outcome says %q", got)
	}
	check("revealed")

	// The chapter again, its vote gone: step mode holds two requests of
	// one key, and the step bar and each held request's buttons show
	// whole beside the chapter, the workshop and the scores, over nothing
	// and under nothing, and the timeline keeps its rows.
	if err := env.Server.guidedLessons().start(context.Background(), "response-lost", "test"); err != nil {
		t.Fatal(err)
	}
	if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{}, "test"); err != nil {
		t.Fatal(err)
	}
	if r := env.send(http.MethodPost, "/api/poll/scores", PollScores{Shown: true}); r.Status != http.StatusOK {
		t.Fatalf("showing the scores: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the chapter again, without its vote", waitUntilBound, `!document.querySelector("#poll .poll-choice") && document.querySelectorAll("#poll-scores li").length >= 4`)
	if r := env.send(http.MethodPut, "/api/step", map[string]bool{"on": true}); r.Status != http.StatusOK {
		t.Fatalf("step mode on: %d %s", r.Status, r.Body)
	}
	paid := make(chan struct{}, 2)
	for range 2 {
		go func() {
			_, _ = env.tryPay("held-twice", `{"order_id":"H-1","amount_satang":100}`)
			paid <- struct{}{}
		}()
	}
	liveWait(t, ctx, "two requests held", waitUntilBound, `document.querySelectorAll("#step-held > li").length === 2`)
	check("held")
	if r := env.send(http.MethodPut, "/api/step", map[string]bool{"on": false}); r.Status != http.StatusOK {
		t.Fatalf("step mode off: %d %s", r.Status, r.Body)
	}
	<-paid
	<-paid

	// The scheduler's puzzle, on the chapter that has one: it stays over
	// the side column, and nothing in it shows cut at its box's edge, nor
	// is a held request's button, "Run everyone again" or a "Watch for"
	// item under it.
	if err := env.Server.guidedLessons().start(context.Background(), "check-then-insert", "test"); err != nil {
		t.Fatal(err)
	}
	if r := env.send(http.MethodPut, "/api/step", map[string]bool{"on": true}); r.Status != http.StatusOK {
		t.Fatalf("step mode on: %d %s", r.Status, r.Body)
	}
	for range 2 {
		go func() {
			_, _ = env.tryPay("puzzle-twice", `{"order_id":"P-1","amount_satang":100}`)
			paid <- struct{}{}
		}()
	}
	liveWait(t, ctx, "two requests held for the puzzle", waitUntilBound, `document.querySelectorAll("#step-held > li").length === 2`)
	held := liveEval[string](t, ctx, `document.querySelector("#step-held > li").dataset.request`)
	if r := env.send(http.MethodPost, "/api/puzzle/start", PuzzleStart{Request: held}); r.Status != http.StatusOK {
		t.Fatalf("starting the puzzle: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the puzzle on the board", waitUntilBound, `!!document.getElementById("puzzle")`)
	for _, size := range [][2]int64{{1920, 1080}, {1280, 720}} {
		boardViewport(t, ctx, size[0], size[1])
		boardSettled(t, ctx)
		where := fmt.Sprintf("puzzle at %dx%d", size[0], size[1])
		boardScreenshot(t, ctx, fmt.Sprintf("board-share/puzzle-%dx%d.png", size[0], size[1]))
		for _, p := range liveEval[[]string](t, ctx, pollCutMeasure) {
			t.Errorf("%s: %s", where, p)
		}
		for _, p := range liveEval[[]string](t, ctx, `[...document.querySelectorAll("#step-held button, #step-head button, #ws-run-all, #lesson .watch-item")].filter(b => {
			const r = b.getBoundingClientRect(), at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
			return !at || !(at === b || b.contains(at));
		}).map(b => b.textContent.trim() + " is under something")`) {
			t.Errorf("%s: %s", where, p)
		}
	}
	if r := env.send(http.MethodPut, "/api/step", map[string]bool{"on": false}); r.Status != http.StatusOK {
		t.Fatalf("step mode off: %d %s", r.Status, r.Body)
	}
	<-paid
	<-paid
	liveNoCSPViolations(t, ctx)
}
