package web

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// boardViewport sizes the tab's viewport exactly, as a projector would.
func boardViewport(t *testing.T, ctx context.Context, w, h int64) {
	t.Helper()
	liveDo(t, ctx, fmt.Sprintf("a %dx%d viewport", w, h), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: w, Height: h, DeviceScaleFactor: 1})
		return err
	}))
}

// boardScreenshot saves the page as name (which may start with a folder)
// in $PAYTWICE_SCREENSHOTS, when it is set (the README's pictures:
// docs/screenshots).
func boardScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("PAYTWICE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// boardGeometry is what the layout test measures in the page.
type boardGeometry struct {
	ViewW, ViewH       float64
	ScrollH, ScrollW   float64
	Timeline           boardBox // the list of rows
	TimelinePanel      boardBox // the list with its heading
	Orders             boardBox // the charges per order
	Caption            boardBox // the chapter
	OverflowingTiles   []string
	SmallText          []string // visible text below 18 px, with its size
	TimelineRows       int
	TimelineRowsInView int
}

type boardBox struct{ Top, Bottom, Left, Right, Height, Width float64 }

const boardMeasure = `(() => {
  const box = el => { const r = el.getBoundingClientRect(); return {Top: r.top, Bottom: r.bottom, Left: r.left, Right: r.right, Height: r.height, Width: r.width}; };
  const tl = document.getElementById("timeline");
  const out = {ViewW: innerWidth, ViewH: innerHeight,
    ScrollH: document.scrollingElement.scrollHeight, ScrollW: document.scrollingElement.scrollWidth,
    Timeline: box(tl), TimelinePanel: box(tl.closest(".panel")), Orders: box(document.getElementById("orders")), Caption: box(document.getElementById("lesson")),
    OverflowingTiles: [], SmallText: [], TimelineRows: tl.children.length, TimelineRowsInView: 0};
  for (const r of tl.children) { const b = r.getBoundingClientRect(); if (b.top >= 0 && b.top < innerHeight) out.TimelineRowsInView++; }
  for (const tile of document.querySelectorAll(".tile")) {
    for (const e of [tile, ...tile.querySelectorAll("dt, dd")]) {
      if (e.scrollWidth > e.clientWidth + 1) out.OverflowingTiles.push(tile.innerText.replace(/\s+/g, " "));
    }
  }
  // Every visible piece of text the lesson points at: the chapter, the
  // timeline, the counters, the charges per order and the key rows.
  const seen = new Set();
  for (const root of document.querySelectorAll("#lesson, .panel-timeline, .panel-counters, .panel-keys")) {
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const e = n.parentElement;
      if (!n.textContent.trim() || seen.has(e)) continue;
      seen.add(e);
      const r = e.getBoundingClientRect();
      if (r.width <= 1 || r.height <= 1 || !e.checkVisibility({visibilityProperty: true})) continue;
      const px = parseFloat(getComputedStyle(e).fontSize);
      if (px < 18) out.SmallText.push(n.textContent.trim().slice(0, 40) + " (" + px.toFixed(1) + "px)");
    }
  }
  return out;
})()`

// TestBrowserBoardLessonLayout projects a running chapter at the two
// common projector sizes: the chapter is a caption, the timeline and the
// charges per order are on screen, the page does not scroll, no counter
// overflows its tile, and at 1920x1080 nothing the lesson refers to is
// smaller than 18 px.
func TestBrowserBoardLessonLayout(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1280, 720)
	liveStill(t, ctx)
	if err := env.Server.guidedLessons().start(context.Background(), "no-key", "test"); err != nil {
		t.Fatal(err)
	}
	for _, size := range []struct{ w, h int64 }{{1280, 720}, {1920, 1080}} {
		t.Run(fmt.Sprintf("at %dx%d", size.w, size.h), func(t *testing.T) {
			boardViewport(t, ctx, size.w, size.h)
			liveOpen(t, ctx, env.URL+"/board")
			// A double-click without keys: two rows, two charges, one order charged twice.
			order := fmt.Sprintf("A-%d", 2000+size.w)
			body := fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order)
			env.pay(uuid.NewString(), body)
			env.pay(uuid.NewString(), body)
			liveWait(t, ctx, "the order charged twice", waitUntilBound,
				fmt.Sprintf(`document.getElementById("orders").textContent.includes(%q) && document.querySelectorAll("#timeline > li").length >= 2`, order))

			// The lesson's points tick off, and the row that made them stands out.
			liveWait(t, ctx, "the Watch for items ticked and their row marked", waitUntilBound,
				`document.querySelectorAll("#lesson .watch-item.seen").length === 2 && document.querySelectorAll("#timeline .tl-row.watched").length === 1`)

			g := liveEval[boardGeometry](t, ctx, boardMeasure)
			if g.ScrollH > g.ViewH+1 || g.ScrollW > g.ViewW+1 {
				t.Errorf("the page scrolls: %vx%v of content in a %vx%v viewport", g.ScrollW, g.ScrollH, g.ViewW, g.ViewH)
			}
			if g.Caption.Height > g.ViewH/4 {
				t.Errorf("the chapter takes %v px of %v: it should be a caption", g.Caption.Height, g.ViewH)
			}
			tl := g.Timeline
			if p := g.TimelinePanel; p.Top < 0 || p.Bottom > g.ViewH+1 || p.Top > g.ViewH/3 {
				t.Errorf("the timeline panel is at y=%v..%v in a %v px viewport", p.Top, p.Bottom, g.ViewH)
			}
			// On a short projector the side column's tools (the step bar,
			// the switches, the lab) go under the timeline, so that the
			// counters and thirty students' orders fit beside it.
			minH := g.ViewH / 2
			if g.ViewH <= 800 {
				minH = g.ViewH * 2 / 5
			}
			if tl.Height < minH || tl.Width < g.ViewW/2 {
				t.Errorf("the timeline is %vx%v in a %vx%v viewport: it should take the screen", tl.Width, tl.Height, g.ViewW, g.ViewH)
			}
			if g.TimelineRowsInView < 1 {
				t.Errorf("none of the %d timeline rows is in view", g.TimelineRows)
			}
			if o := g.Orders; o.Top < 0 || o.Bottom > g.ViewH+1 || o.Height < 20 {
				t.Errorf("the charges per order are at y=%v..%v in a %v px viewport", o.Top, o.Bottom, g.ViewH)
			}
			if len(g.OverflowingTiles) > 0 {
				t.Errorf("counters overflow their tiles: %q", g.OverflowingTiles)
			}
			if size.w == 1920 && len(g.SmallText) > 0 {
				t.Errorf("text below 18 px on the projector: %q", g.SmallText)
			}
			if size.w == 1920 {
				boardScreenshot(t, ctx, "board-lesson.png")
			}
		})
	}
	t.Run("without a lesson no counter overflows at 1280x720", func(t *testing.T) {
		if err := env.Server.guidedLessons().start(context.Background(), "", "test"); err != nil {
			t.Fatal(err)
		}
		boardViewport(t, ctx, 1280, 720)
		liveOpen(t, ctx, env.URL+"/board")
		if g := liveEval[boardGeometry](t, ctx, `(() => { const o = []; for (const tile of document.querySelectorAll(".tile")) for (const e of [tile, ...tile.querySelectorAll("dt, dd")]) if (e.scrollWidth > e.clientWidth + 1) o.push(tile.innerText); return {OverflowingTiles: o}; })()`); len(g.OverflowingTiles) > 0 {
			t.Errorf("counters overflow their tiles: %q", g.OverflowingTiles)
		}
	})
	liveNoCSPViolations(t, ctx)
}

// heldAt is a script that finds the held request at a checkpoint in the
// step bar, or null.
func heldAt(checkpoint string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("#step-bar .held li")].find(li => li.querySelector(".badge").textContent === %q)`, checkpoint)
}

// TestBrowserStepModeDoubleClick walks a double-click through step mode
// from the board: both requests stop as they arrive; the first goes on to
// claim its key and waits there; the second goes on and meets the claim
// (409); it is answered, then the first finishes: one charge.
func TestBrowserStepModeDoubleClick(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	board := liveBrowser(t, 1920, 1080)
	liveStill(t, board)
	student := liveTab(t, board, true)
	liveOpen(t, board, env.URL+"/board")
	liveOpen(t, student, env.URL+"/")

	liveDo(t, board, "pressing S", chromedp.KeyEvent("s"))
	liveWait(t, board, "step mode on", waitUntilBound, `document.getElementById("step-bar").classList.contains("step-on")`)
	if !env.Server.payments.steps.On() {
		t.Fatal("the server's step mode is off")
	}

	liveDo(t, student, "double-click", liveClick("#pay"), liveClick("#pay"))
	liveWait(t, board, "both requests held as they arrive", waitUntilBound, `document.querySelectorAll("#step-bar .held li").length === 2`)
	liveWait(t, board, "the held rows highlighted", waitUntilBound, `document.querySelectorAll(".tl-row .step[id$='-held']").length === 2`)

	// The first request goes on: it claims the key and waits there.
	liveDo(t, board, "Next on the first", chromedp.Click(chromedp.CSS(`#step-bar .held li:first-child button[data-step="next"]`)))
	liveWait(t, board, "the first held after its claim", waitUntilBound, heldAt("key claimed")+` !== undefined`)

	// The second goes on and finds the key claimed: 409.
	liveEval[bool](t, board, heldAt("received")+`.querySelector('button[data-step="next"]').click() || true`)
	liveWait(t, board, "the second about to answer 409", waitUntilBound,
		heldAt("answered")+` !== undefined && document.getElementById("timeline").textContent.includes("409")`)
	if os.Getenv("PAYTWICE_SCREENSHOTS") != "" {
		liveEval[bool](t, board, `document.getElementById("step-bar").scrollIntoView(), true`)
		boardScreenshot(t, board, "board-step-mode.png")
	}
	liveEval[bool](t, board, heldAt("answered")+`.querySelector('button[data-step="finish"]').click() || true`)

	// The first finishes.
	liveWait(t, board, "one request held", waitUntilBound, `document.querySelectorAll("#step-bar .held li").length === 1`)
	liveEval[bool](t, board, heldAt("key claimed")+`.querySelector('button[data-step="finish"]').click() || true`)
	liveWait(t, student, "paid", waitUntilBound, paidNow)
	liveWait(t, board, "one charge for the order", waitUntilBound, `document.getElementById("orders").textContent.includes("1 charge")`)
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges", n)
	}

	// A fault aimed at one row: the next payment's response, and only its, is lost.
	liveDo(t, student, "a new order, paid once", liveClick("#new-order"), liveClick("#pay"))
	liveWait(t, board, "the new payment held", waitUntilBound, heldAt("received")+` !== undefined`)
	liveEval[bool](t, board, heldAt("received")+`.querySelector('button[data-fault="response_lost"]').click() || true`)
	liveWait(t, board, "the row shows the aimed fault", waitUntilBound, `[...document.querySelectorAll("#timeline .tl-row")].some(r => r.textContent.includes("lose this response"))`)
	liveDo(t, board, "pressing P", chromedp.KeyEvent("p"))
	liveWait(t, board, "the response lost", waitUntilBound, `document.getElementById("timeline").textContent.includes("201 never arrives") || document.querySelectorAll(".step.lost").length > 0`)
	if n := env.charges(); n != 2 {
		t.Fatalf("%d charges after the aimed payment, want 2", n)
	}

	// S turns step mode off.
	liveDo(t, board, "pressing S again", chromedp.KeyEvent("s"))
	liveWait(t, board, "step mode off", waitUntilBound, `!document.getElementById("step-bar").classList.contains("step-on")`)
	liveNoCSPViolations(t, board)
}
