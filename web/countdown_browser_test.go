package web

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"paytwice/web/room/lesson"
)

// countdownLeft is a JavaScript expression: the seconds the phone's card
// counts down to ("in N seconds"), -1 when it shows no countdown.
const countdownLeft = `(m => m ? Number(m[1]) : -1)(/\bin (\d+) seconds?\b/.exec(document.getElementById("pay-status").textContent))`

// TestBrowserCountdownsFollowTheRoomsClockInEveryChapter walks the twelve
// chapters on a phone as a class does; in every chapter whose card counts
// down (the key held until the sweeper may ask the gateway), the presenter
// warps the room's clock 20 s and the count is 20 s shorter at once: the
// card counts on the room's clock, not the phone's. The chapters that
// must show one (2 and 4, where a key stays started) are checked to.
func TestBrowserCountdownsFollowTheRoomsClockInEveryChapter(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{LockTimeout: 40 * time.Second})
	phone := liveBrowser(t, 390, 844)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, phone, env.URL+"/?backoff_ms=5")
	pay := func(double bool) {
		steps := []chromedp.Action[chromedp.Void]{liveClick("#pay")}
		if double {
			steps = append(steps, liveClick("#pay"))
		}
		liveDo(t, phone, "paying", steps...)
		liveWait(t, phone, "the answers", waitUntilBound, cardSettled)
	}
	presenter := func(method, path string, body any) {
		if r := env.send(method, path, body); r.Status >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
		}
	}
	walk := chapterWalk(pay, presenter)
	counted := map[string]bool{}
	mustCount := []string{"fails-halfway", "crash-midway"}
	for n, ch := range lesson.Build(env.Server.cfg.LockTimeout) {
		phoneInChapter(t, env, phone, ch.Slug)
		if do, ok := walk[ch.Slug]; ok {
			do()
		} else {
			pay(ch.Race)
		}
		left := liveEval[int](t, phone, countdownLeft)
		if left < 0 {
			continue
		}
		counted[ch.Slug] = true
		if left <= 25 {
			t.Errorf("chapter %d %s: the countdown starts at %d s, too short to see a 20 s warp", n+1, ch.Slug, left)
			continue
		}
		presenter(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 20})
		liveWait(t, phone, fmt.Sprintf("chapter %d %s: the countdown 20 s shorter", n+1, ch.Slug), waitUntilBound,
			fmt.Sprintf(`(n => n >= 0 && n <= %d)(%s)`, left-20, countdownLeft))
		t.Logf("chapter %d %s: %d s left, %d s after the warp: %s", n+1, ch.Slug, left, liveEval[int](t, phone, countdownLeft), liveEval[string](t, phone, statusText))
		if got := liveEval[string](t, phone, cardAgrees); got != "ok" {
			t.Errorf("chapter %d %s after the warp: %s", n+1, ch.Slug, got)
		}
	}
	for _, slug := range mustCount {
		if !counted[slug] {
			t.Errorf("chapter %s shows no countdown on the card: the key it leaves started is held until the sweeper may ask", slug)
		}
	}
	if len(counted) == 0 {
		t.Fatal("no chapter showed a countdown")
	}
}
