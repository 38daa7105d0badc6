package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserBoardPresenterCornerLeavesTheWatchListUncovered: on the
// presenter's board of a chapter with questions, and no vote under way,
// the corner that offers the scores and "Ask the class" stays in the top
// bar: the chapter's "Watch for" list and its Notes link, which the class
// reads on the projector, are not under it, at 1920x1080 and 1280x720.
func TestBrowserBoardPresenterCornerLeavesTheWatchListUncovered(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	if err := env.Server.guidedLessons().start(context.Background(), "lock-in-memory", "test"); err != nil {
		t.Fatal(err)
	}
	ctx := liveBrowserFor(t, 1920, 1080, 5*time.Minute)
	liveOpen(t, ctx, env.URL+"/board")
	liveWait(t, ctx, "the presenter's corner", waitUntilBound, `!document.getElementById("poll").hidden && !!document.querySelector("#poll .poll-asks")`)
	for _, size := range [][2]int64{{1920, 1080}, {1280, 720}} {
		boardViewport(t, ctx, size[0], size[1])
		liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
		covered := liveEval[string](t, ctx, `(() => {
			const corner = document.getElementById("poll").getBoundingClientRect();
			const over = e => { const b = e.getBoundingClientRect(); return b.width > 0 && b.left < corner.right && b.right > corner.left && b.top < corner.bottom && b.bottom > corner.top; };
			const hit = [...document.querySelectorAll("#lesson .caption-watch h3, #lesson .watch-item, #lesson summary")].filter(over);
			return hit.map(e => e.textContent.trim().slice(0, 40)).join(" | ") + (hit.length ? " (corner " + Math.round(corner.top) + "-" + Math.round(corner.bottom) + ")" : "");
		})()`)
		if covered != "" {
			t.Errorf("at %dx%d the presenter's corner covers: %s", size[0], size[1], covered)
		}
		boardScreenshot(t, ctx, fmt.Sprintf("board-corner/%dx%d.png", size[0], size[1]))
	}
}
