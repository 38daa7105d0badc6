package web

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
)

// The checkout card's browser tests: each failure switch really happens
// in Chromium, and the card says what happened.

const (
	attemptStatuses = `[...document.querySelectorAll("#attempts li[data-status]")].map(li => li.dataset.status).reverse().join(" ")`
	// timelineRows counts the requests' rows (named after the request):
	// the room's own rows, such as the faults set before the page opened,
	// are drawn too.
	timelineRows = `document.querySelectorAll("#timeline .tl-row[id^='tl-rq_']").length`
	statusState  = `document.getElementById("pay-status").dataset.state`
	statusText   = `document.getElementById("pay-status").textContent`
)

// TestBrowserLostResponseEveryTime pays five orders in a row in one page
// with the response lost: each time the page itself sees no response,
// waits, retries with the same key and gets the saved 201 replayed. The
// browser never re-sends a request on its own (each attempt is one row on
// the timeline), and each order is charged once.
func TestBrowserLostResponseEveryTime(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{ResponseLost: true})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/?backoff_ms=20")
	liveDo(t, ctx, "turning retries on", liveClick("#opt-retry"))
	// Warm the browser's connection pool the way a student's page does.
	liveEval[int](t, ctx, `Promise.all([fetch("/api/faults"), fetch("/v1/idempotency-policy"), fetch("/static/api.js")]).then(() => 1)`)

	for i := 1; i <= 5; i++ {
		liveDo(t, ctx, "paying", liveClick("#pay"))
		liveWait(t, ctx, fmt.Sprintf("order %d paid", i), waitUntilBound, paidNow)
		if got := liveEval[string](t, ctx, attemptStatuses); got != "network 201" {
			t.Fatalf("order %d: attempts %q, want %q (no response, then the retry's replay)", i, got, "network 201")
		}
		liveWait(t, ctx, "the wait and the replay on the card", time.Second,
			`/waited \d/.test(document.getElementById("attempts").textContent) && /201 replayed/.test(document.getElementById("attempts").textContent)`)
		if n := env.charges(); n != i {
			t.Fatalf("after order %d: %d charges, want %d", i, n, i)
		}
		liveWait(t, ctx, "two timeline rows per order", waitUntilBound, fmt.Sprintf(timelineRows+` === %d`, 2*i))
		liveDo(t, ctx, "new order", liveClick("#new-order"))
	}
	liveNoCSPViolations(t, ctx)
}

// TestBrowserConnectionNeverHappensOncePerAttempt: every attempt the page
// makes reaches the server once, so the timeline has one row per attempt.
func TestBrowserConnectionNeverHappensOncePerAttempt(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	_, ctx := livePayWithRetries(t, pay.ServerFaults{ConnectionNeverHappens: true}, "/?backoff_ms=5")
	liveWait(t, ctx, "six attempts, all unanswered", waitUntilBound,
		`document.querySelectorAll('#attempts li[data-status="network"]').length === 6 && `+statusState+` === "unknown"`)
	liveWait(t, ctx, "six timeline rows", waitUntilBound, timelineRows+` === 6`)
	if n := liveEval[int](t, ctx, timelineRows); n != 6 {
		t.Fatalf("%d timeline rows for 6 attempts", n)
	}
}

// TestBrowserCrashMidwayDropsThenHoldsTheKey: the crash is a dropped
// connection on the card; the next click gets 409 and the card says the key
// is held until the sweeper asks the gateway, counting down to it, then
// looks the order up once the sweeper has been.
func TestBrowserCrashMidwayDropsThenHoldsTheKey(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{LockTimeout: 3 * time.Second, SweepEvery: 200 * time.Millisecond})
	setFaults(t, env, pay.ServerFaults{CrashMidway: true})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "paying", liveClick("#pay"))
	liveWait(t, ctx, "the dropped connection", waitUntilBound, attemptStatuses+` === "network"`)
	liveDo(t, ctx, "paying again", liveClick("#pay"))
	liveWait(t, ctx, "the key held, counting down", waitUntilBound,
		attemptStatuses+` === "network 409" && `+statusState+` === "held" && /sweeper asks the gateway/.test(`+statusText+`) && /in \d seconds?/.test(`+statusText+`)`)
	// The server's clock is the test's, and its jobs do not run in tests:
	// move the clock past the lock timeout and sweep, as the jobs would.
	env.Clock.Advance(4 * time.Second)
	if out, err := env.Server.Jobs().Sweep(context.Background()); err != nil || len(out) != 1 {
		t.Fatalf("sweep: %v, %v", out, err)
	}
	liveWait(t, ctx, "the look-up after the sweeper, paid", waitUntilBound,
		paidNow+` && !!document.querySelector('#attempts li[data-kind="reconcile"][data-paid="true"]')`)
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	liveWait(t, ctx, "one timeline row per attempt", waitUntilBound, timelineRows+` >= 2`)
}

// TestBrowserNewKeyPerClickRedOnTheCard: with the mistake on, the card
// itself says in red that the order was charged twice.
func TestBrowserNewKeyPerClickRedOnTheCard(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{DelayMS: 300})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "the mistake on, then a double-click", liveClick("#opt-newkey"), liveClick("#pay"), liveClick("#pay"))
	// The card says what the two charges came to, as the books have them.
	liveWait(t, ctx, "charged twice on the card", waitUntilBound,
		statusState+` === "twice" && /charged twice: 2 × ฿1,299\.00\./.test(`+statusText+`)`)
	if n := env.charges(); n != 2 {
		t.Fatalf("%d charges, want 2", n)
	}
	liveWait(t, ctx, "the live panel says twice", waitUntilBound, `/charged twice/.test(document.getElementById("orders").textContent)`)
	// Another amount, and Pay again under a new key: the card names each
	// charge's amount rather than multiply the last one.
	liveDo(t, ctx, "another amount, and Pay", chromedp.Clear(chromedp.CSS("#amount")), liveType("#amount", "5.00"), liveClick("#pay"))
	liveWait(t, ctx, "charged three times on the card, each amount named", waitUntilBound,
		statusState+` === "twice" && /charged three times: ฿1,299\.00 \+ ฿1,299\.00 \+ ฿5\.00\./.test(`+statusText+`)`)
	if n := env.charges(); n != 3 {
		t.Fatalf("%d charges, want 3", n)
	}
}

// TestBrowserConflictDuringDelayIsTheProtection: the second click's 409
// while the first is still running reads as the protection, and the first
// click's request stays visibly on its way.
func TestBrowserConflictDuringDelayIsTheProtection(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	release := sync.OnceFunc(env.holdGateway())
	t.Cleanup(release)
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "double-click", liveClick("#pay"), liveClick("#pay"))
	liveWait(t, ctx, "the 409 shown as the protection", waitUntilBound,
		`document.querySelectorAll('#attempts li[data-status="409"]').length === 1 && `+statusState+` === "sending" && /still running when it arrived, so the server did not run this one/.test(`+statusText+`)`)
	if n := liveEval[int](t, ctx, `[...document.querySelectorAll("#attempts li")].filter(li => /sending/.test(li.textContent) && !li.dataset.status).length`); n != 1 {
		t.Fatalf("%d rows still sending, want the first click's", n)
	}
	release()
	liveWait(t, ctx, "paid", waitUntilBound, paidNow)
}

// TestBrowserGuardShowsSendingAndCountsTheBlockedClick.
func TestBrowserGuardShowsSendingAndCountsTheBlockedClick(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	release := sync.OnceFunc(env.holdGateway())
	t.Cleanup(release)
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "guard on, double-click", liveClick("#opt-guard"), liveClick("#pay"), liveClick("#pay"))
	liveWait(t, ctx, "sending, one click blocked", waitUntilBound,
		statusState+` === "sending" && /blocked 1 more click/.test(`+statusText+`) && document.querySelectorAll('#attempts li[data-kind="blocked"]').length === 1`)
	release()
	liveWait(t, ctx, "paid after one request", waitUntilBound, paidNow+` && `+attemptStatuses+` === "201"`)
}

// TestBrowserReloadRestoresTheOrder: after a reload the card shows the
// requests it sent and looks the order up, since the last one had no
// answer.
func TestBrowserReloadRestoresTheOrder(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{ResponseLost: true})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "paying", liveClick("#pay"))
	liveWait(t, ctx, "no response", waitUntilBound, statusState+` === "unknown"`)
	liveOpen(t, ctx, env.URL+"/")
	liveWait(t, ctx, "the restored row and the look-up", waitUntilBound,
		attemptStatuses+` === "network" && `+paidNow+` && !!document.querySelector('#attempts li[data-kind="reconcile"][data-paid="true"]')`)
}

// TestBrowserNewOrderStopsPendingRetries: the old order's retries stop at
// New order and never land in the new order's list.
func TestBrowserNewOrderStopsPendingRetries(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env, ctx := livePayWithRetries(t, pay.ServerFaults{ConnectionNeverHappens: true}, "/")
	// New order is clicked in the same task that finds the row counting
	// down: the wait is drawn at random and may last a few milliseconds, so
	// a click sent after the look-up could land after the countdown (during
	// the next attempt) and stop another row than the one found.
	liveWait(t, ctx, "a retry counting down, then new order", waitUntilBound,
		`!!(window.__row = [...document.querySelectorAll("#attempts li")].find(li => /retry \d+ in/.test(li.textContent))) && (document.getElementById("new-order").click(), true)`)
	liveWait(t, ctx, "the old retry stopped", waitUntilBound, `/stopped: a new order began/.test(window.__row.textContent)`)
	if n := liveEval[int](t, ctx, `document.querySelectorAll("#attempts li").length`); n != 0 {
		t.Fatalf("%d rows in the new order's list, want none", n)
	}
	liveDo(t, ctx, "paying the new order", chromedp.Evaluate[chromedp.Void](`document.getElementById("opt-retry").click()`))
	setFaults(t, env, pay.ServerFaults{})
	liveDo(t, ctx, "pay", liveClick("#pay"))
	liveWait(t, ctx, "paid with click 1", waitUntilBound, paidNow+` && /^click 1\b/.test(document.querySelector("#attempts li .who").textContent)`)
}

// TestBrowserReplayedFailureIsFinal: a replayed 500 is not retried again;
// the page looks the order up at once.
func TestBrowserReplayedFailureIsFinal(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	_, ctx := livePayWithRetries(t, pay.ServerFaults{ServerError: true}, "/?backoff_ms=5")
	liveWait(t, ctx, "the look-up after the replayed 500", waitUntilBound,
		paidNow+` && !!document.querySelector('#attempts li[data-kind="reconcile"][data-paid="true"]')`)
	if got := liveEval[string](t, ctx, attemptStatuses); got != "500 500" {
		t.Fatalf("attempts %q, want the 500 and its replay only", got)
	}
}

// TestBrowserYouMarker: this browser's rows in the live panels say "you".
func TestBrowserYouMarker(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	you := liveEval[string](t, ctx, `document.getElementById("checkout").dataset.you`)
	if !strings.HasPrefix(you, "browser ") {
		t.Fatalf("the card names this browser %q", you)
	}
	liveDo(t, ctx, "paying", liveClick("#pay"))
	liveWait(t, ctx, "paid", waitUntilBound, paidNow)
	liveWait(t, ctx, "you on the timeline, the charges and the keys", waitUntilBound,
		`["#timeline", "#charges-body", "#keys-body"].every(s => document.querySelector(s + " .is-you"))`)
}

// TestBrowserLessonFitsWithPay: for every chapter, a student's page shows
// the chapter's Do step and the Pay button on one screen, on a laptop and
// on a phone, without scrolling; the student reads the student's steps,
// and sees no button that only the presenter may press.
func TestBrowserLessonFitsWithPay(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "teach-5d1c"
	env := newTestEnv(t, Config{PresenterToken: token})
	laptop := liveBrowser(t, 1366, 768)
	phone := liveTab(t, laptop, true)
	liveDo(t, laptop, "laptop size", chromedp.EmulateViewport(1366, 768))
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	const fits = `(() => {
		const pay = document.getElementById("pay").getBoundingClientRect();
		const doStep = document.querySelector("#lesson .lesson-do").getBoundingClientRect();
		return scrollY === 0 && pay.bottom <= innerHeight && doStep.top >= 0 && doStep.bottom <= innerHeight;
	})()`
	for _, ch := range lesson.Build(env.Server.cfg.LockTimeout) {
		if err := env.Server.guidedLessons().start(context.Background(), ch.Slug, "presenter"); err != nil {
			t.Fatal(err)
		}
		for _, tab := range []struct {
			name string
			ctx  context.Context
		}{{"laptop", laptop}, {"phone", phone}} {
			liveOpen(t, tab.ctx, env.URL+"/")
			liveWait(t, tab.ctx, ch.Slug+" shown", waitUntilBound, fmt.Sprintf(`document.getElementById("lesson").dataset.slug === %q`, ch.Slug))
			if d := os.Getenv("PAYTWICE_LESSON_SHOTS"); d != "" {
				png, err := chromedp.Run(tab.ctx, chromedp.CaptureScreenshot())
				if err == nil {
					_ = os.WriteFile(filepath.Join(d, ch.Slug+"-"+tab.name+".png"), png, 0o644)
				}
			}
			if !liveEval[bool](t, tab.ctx, fits) {
				got := liveEval[string](t, tab.ctx, `JSON.stringify({pay: document.getElementById("pay").getBoundingClientRect().bottom, do: document.querySelector("#lesson .lesson-do").getBoundingClientRect().bottom, h: innerHeight})`)
				t.Errorf("%s on a %s: Pay and the Do step are not on one screen: %s", ch.Slug, tab.name, got)
			}
			if n := liveEval[int](t, tab.ctx, `document.querySelectorAll("#lesson button:disabled").length`); n != 0 {
				t.Errorf("%s on a %s: %d disabled buttons in the lesson for a student", ch.Slug, tab.name, n)
			}
			if want := ch.StudentDo; len(want) > 0 {
				got := liveEval[string](t, tab.ctx, `document.querySelector("#lesson .lesson-do ol").innerText`)
				if !strings.Contains(got, want[1]) {
					t.Errorf("%s: a student reads %q, want the student's steps", ch.Slug, got)
				}
			}
		}
	}
	liveNoCSPViolations(t, laptop)
}

// TestBrowserTenTabsStayLive opens ten tabs of one browser: over HTTP/1.1
// a browser opens at most six connections to one host, so ten pages with a
// stream each could not all load. They share one stream: every tab loads,
// every tab sees a payment made elsewhere, and the server has one viewer.
// When the tab holding the stream closes, another takes over.
func TestBrowserTenTabsStayLive(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	// The browser's first tab stays blank: closing it would close the
	// browser.
	first := liveBrowser(t, 1000, 700)
	var tabs []context.Context
	for len(tabs) < 10 {
		tabs = append(tabs, liveTab(t, first, false))
	}
	for i, tab := range tabs {
		u := env.URL + "/"
		if i%3 == 2 {
			u = env.URL + "/board"
		}
		liveOpen(t, tab, u)
	}
	if n := int64(env.Server.live().Viewers()); n != 1 {
		t.Errorf("%d streams open for ten tabs of one browser, want 1", n)
	}
	paid := func(order string) {
		t.Helper()
		env.pay(uuid.NewString(), fmt.Sprintf(`{"order_id":%q,"amount_satang":100}`, order))
		for i, tab := range tabs {
			liveWait(t, tab, fmt.Sprintf("tab %d shows %s", i+1, order), waitUntilBound,
				fmt.Sprintf(`[...document.querySelectorAll("#charges-body tr")].some(tr => tr.textContent.includes(%q))`, order))
		}
	}
	paid("A-1111")

	// Close the tab that holds the stream; the others carry on.
	var leader int = -1
	for i, tab := range tabs {
		if liveEval[bool](t, tab, `document.getElementById("stream-state").dataset.role === "leader"`) {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no tab opened the stream")
	}
	if err := chromedp.Cancel(tabs[leader]); err != nil {
		t.Fatal(err)
	}
	tabs = append(tabs[:leader], tabs[leader+1:]...)
	paid("A-2222")
}

// TestBrowserProblemPagesKeepThePolicy: the problem pages load htmx like
// every page, and need nothing the Content-Security-Policy refuses; the
// browser's own request for /favicon.ico finds the icon.
func TestBrowserProblemPagesKeepThePolicy(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	for _, p := range []string{"/problems", "/problems/server-error", "/problems/request-in-progress"} {
		liveDo(t, ctx, "opening "+p, chromedp.Navigate(env.URL+p))
		liveWait(t, ctx, "htmx loaded", waitUntilBound, `!!window.htmx && document.readyState === "complete"`)
		liveNoCSPViolations(t, ctx)
	}
	got := liveEval[string](t, ctx, `fetch("/favicon.ico").then(r => r.status + " " + r.headers.get("Content-Type") + " " + r.redirected)`)
	if !strings.HasPrefix(got, "200 image/svg+xml") || !strings.HasSuffix(got, "true") {
		t.Fatalf("GET /favicon.ico: %s, want a redirect to the SVG icon", got)
	}
}

// TestBrowserBackoffKeepsResultsAndReads: a wrong field keeps the last good
// results and marks the field; the average's label sits above the bars,
// not on them; on a phone the chart labels are at least 12 px and the
// comparison fits the screen.
func TestBrowserBackoffKeepsResultsAndReads(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveDo(t, ctx, "opening /backoff", chromedp.Navigate(env.URL+"/backoff"))
	liveWait(t, ctx, "the results", waitUntilBound, `!!document.querySelector("#backoff-results .stats")`)
	const labelAboveBars = `(() => {
		const label = document.querySelector(".ref-label").getBoundingClientRect();
		const tops = [...document.querySelectorAll("svg.chart .bars rect")].map(r => r.getBoundingClientRect().top);
		return tops.length > 0 && label.bottom <= Math.min(...tops);
	})()`
	if !liveEval[bool](t, ctx, labelAboveBars) {
		t.Error("the average's label overlaps the bars")
	}
	liveDo(t, ctx, "a wrong base", chromedp.SetValue(chromedp.CSS("#f-base"), "-1"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("f-base").dispatchEvent(new Event("change", {bubbles: true}))`))
	liveWait(t, ctx, "the field marked, the results kept", waitUntilBound,
		`document.getElementById("f-base").getAttribute("aria-invalid") === "true" && document.getElementById("base-error").textContent !== "" && `+
			`!!document.querySelector("#backoff-results .stats") && /last settings that worked/.test(document.getElementById("backoff-kept").textContent)`)
	liveDo(t, ctx, "a good base", chromedp.SetValue(chromedp.CSS("#f-base"), "0.25"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("f-base").dispatchEvent(new Event("change", {bubbles: true}))`))
	liveWait(t, ctx, "fixed", waitUntilBound,
		`!document.getElementById("f-base").hasAttribute("aria-invalid") && document.getElementById("backoff-kept").textContent.trim() === "" && /base 0.25 s/.test(document.getElementById("backoff-results").textContent)`)
	liveNoCSPViolations(t, ctx)

	phone := liveTab(t, ctx, true)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	// A small herd run, as the other page tests ask for: the default one
	// takes seconds of CPU under -race and more on a busy machine, which
	// the page waits for before it draws anything.
	for _, p := range []string{"/backoff", "/herd?max=60&trials=3"} {
		liveDo(t, phone, "opening "+p, chromedp.Navigate(env.URL+p))
		liveWait(t, phone, "a chart", waitUntilBound, `!!document.querySelector("svg.chart text")`)
		smallest := liveEval[float64](t, phone, `Math.min(...[...document.querySelectorAll("svg.chart text")].map(x => x.getBoundingClientRect().height).filter(h => h > 0))`)
		if smallest < 13 { // a text box is about 1.15 times its font size
			t.Errorf("%s on a phone: chart text %.1f px high, want a 12 px font at least", p, smallest)
		}
		if strings.HasPrefix(p, "/herd") {
			text := liveEval[string](t, phone, `document.body.innerText`)
			if strings.Contains(text, "most of them find the row free") || !strings.Contains(text, "hears back that its write succeeded") || !strings.Contains(text, "of the writes failed with full jitter") {
				t.Errorf("/herd still says what its numbers contradict")
			}
		}
		if wide := liveEval[bool](t, phone, `[...document.querySelectorAll("table")].some(t => t.getBoundingClientRect().right > innerWidth) || document.documentElement.scrollWidth > innerWidth`); wide {
			t.Errorf("%s on a phone: a table is wider than the screen", p)
		}
	}
}

// TestBrowserServerWithoutKeysRedOnTheCard: when the server ignores the key
// (the lab's mistake), a double-click is charged twice under one key, and
// the card counts the two charge ids and says so in red.
func TestBrowserServerWithoutKeysRedOnTheCard(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabNoKey}})
	setFaults(t, env, pay.ServerFaults{DelayMS: 300})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "double-click", liveClick("#pay"), liveClick("#pay"))
	liveWait(t, ctx, "charged twice on the card", waitUntilBound,
		statusState+` === "twice" && /same key, but this server ignores keys/.test(`+statusText+`)`)
	if n := env.charges(); n != 2 {
		t.Fatalf("%d charges, want 2", n)
	}
}

// TestBrowserResendIsDrawn: should the browser send an attempt twice by
// itself after all, the card draws the copy as a step of its own. The test
// plays the browser's part: it sends each payment once more, with the same
// headers and body, before the page's own request goes.
func TestBrowserResendIsDrawn(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{ResponseLost: true})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "a fetch that sends every payment twice", chromedp.Evaluate[chromedp.Void](`(() => {
		const real = window.fetch;
		window.fetch = async (url, init) => {
			if (url === "/v1/payments" && init && init.method === "POST") {
				await real(url, init).catch(() => null);
			}
			return real(url, init);
		};
	})()`))
	liveDo(t, ctx, "paying", liveClick("#pay"))
	liveWait(t, ctx, "the re-send drawn, then paid from the replay", waitUntilBound,
		paidNow+` && !!document.querySelector('#attempts li[data-kind="resent"]') && `+attemptStatuses+` === "201"`)
	liveWait(t, ctx, "the copy named on the timeline", waitUntilBound, timelineText+`.includes("sent again by the browser itself")`)
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}
