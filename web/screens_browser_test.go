package web

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// What a student must read on a phone, and a class on a small projector,
// is large enough to read, and what the presenter needs first is on the
// first screen.

// smallText lists the visible text under the selectors that is smaller
// than min CSS px: "selector at N px: text".
func smallText(selectors []string, min float64) string {
	return fmt.Sprintf(`(() => {
	const bad = [];
	for (const sel of %s) {
		for (const e of document.querySelectorAll(sel)) {
			if (!e.checkVisibility() || !e.textContent.trim()) { continue; }
			const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
			for (let n = walker.nextNode(); n; n = walker.nextNode()) {
				const p = n.parentElement;
				if (!n.textContent.trim() || !p.checkVisibility()) { continue; }
				const px = parseFloat(getComputedStyle(p).fontSize);
				if (px < %v) { bad.push(sel + " at " + px + " px: " + n.textContent.trim().slice(0, 40)); break; }
			}
			if (bad.length > 6) { return bad; }
		}
	}
	return bad;
})()`, jsList(selectors), min)
}

func jsList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

// phoneReads is what a student reads on the checkout page.
var phoneReads = []string{"#checkout", "#attempts", "#timeline", "#lesson", "#keys-body", "#orders"}

// boardReads is the chapter text on the board.
var boardReads = []string{".lesson-caption", ".lesson-watch", "#lesson"}

func TestBrowserScreensAreReadable(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	// A room's address: the join panel shows it with its QR code.
	env.Server.pages.join.listenAddr.Store(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080})
	browser := liveBrowser(t, 1280, 720)

	board := liveTab(t, browser, false)
	boardViewport(t, board, 1280, 720)
	liveOpen(t, board, env.URL+"/board")
	t.Run("the idle board at 1280x720 shows Start without scrolling", func(t *testing.T) {
		liveWait(t, board, "the Start button", waitUntilBound, `!!document.getElementById("lesson-start")`)
		b := liveEval[[]float64](t, board, `(b => [b.top, b.bottom, innerHeight])(document.getElementById("lesson-start").getBoundingClientRect())`)
		if b[0] < 0 || b[1] > b[2] {
			t.Errorf("Start is at y=%.0f..%.0f of a %.0f px screen", b[0], b[1], b[2])
		}
		boardScreenshot(t, board, "screens/board-idle-1280x720.png")
		boardViewport(t, board, 1920, 1080)
		boardScreenshot(t, board, "screens/board-idle-1920x1080.png")
	})

	if err := env.Server.guidedLessons().start(context.Background(), "check-then-insert", "presenter"); err != nil {
		t.Fatal(err)
	}
	phone := liveTab(t, browser, true)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, phone, env.URL+"/?backoff_ms=5")
	liveWait(t, phone, "the chapter", waitUntilBound, `document.getElementById("lesson").dataset.slug === "check-then-insert"`)
	liveDo(t, phone, "paying", liveClick("#pay"), liveClick("#pay"))
	liveWait(t, phone, "the answers", waitUntilBound, `document.querySelectorAll("#attempts li[data-status]").length === 2 && document.querySelectorAll("#timeline .step").length > 4`)

	t.Run("on a 390x844 phone everything a student reads is at least 14 px", func(t *testing.T) {
		if bad := liveEval[[]string](t, phone, smallText(phoneReads, 14)); len(bad) > 0 {
			t.Errorf("smaller than 14 px: %q", bad)
		}
		boardScreenshot(t, phone, "screens/phone-390x844.png")
		liveDo(t, phone, "to the requests", chromedp.Evaluate[chromedp.Void](`document.getElementById("attempts").scrollIntoView()`))
		boardScreenshot(t, phone, "screens/phone-390x844-requests.png")
		liveDo(t, phone, "to the timeline", chromedp.Evaluate[chromedp.Void](`document.getElementById("timeline").scrollIntoView()`))
		boardScreenshot(t, phone, "screens/phone-390x844-timeline.png")
	})
	t.Run("phones do not show the presenter's Try it", func(t *testing.T) {
		if n := liveEval[int](t, phone, `[...document.querySelectorAll(".lab-try")].filter(e => e.checkVisibility()).length`); n != 0 {
			t.Errorf("%d Try it instructions visible on a phone", n)
		}
	})
	t.Run("the chapter on a 1280x720 board is at least 16 px", func(t *testing.T) {
		boardViewport(t, board, 1280, 720)
		liveWait(t, board, "the chapter on the board", waitUntilBound, `!!document.querySelector(".lesson-caption")`)
		if bad := liveEval[[]string](t, board, smallText(boardReads, 16)); len(bad) > 0 {
			t.Errorf("smaller than 16 px: %q", bad)
		}
		boardScreenshot(t, board, "screens/board-lesson-1280x720.png")
		boardViewport(t, board, 1920, 1080)
		boardScreenshot(t, board, "screens/board-lesson-1920x1080.png")
	})
}
