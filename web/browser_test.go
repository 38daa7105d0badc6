package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"paytwice/pay"
	"paytwice/web/browsertest"
)

// The live page's browser tests drive Debian's Chromium with chromedp.
// They fail, never skip, when CI=true and no browser is found; elsewhere
// they skip without one. Every wait is a browser-side poll bounded by a
// timeout: no test sleeps.

// sharedBrowser is the one Chromium the package's browser tests share.
// Starting a browser costs seconds on a busy machine, and fifty tests each
// starting their own spent minutes doing it: each test now opens its own
// browser context in this one (its own cookies, storage and cache, as a
// fresh profile had) and a window of the size it asks for. It starts on
// the first test that needs it; TestMain stops it.
var sharedBrowser browsertest.Shared

// browserTestsAtOnce is how many browser tests run at once. Their time
// goes mostly in waiting (for the server's clocks, the page's polls and
// time-outs, the event streams), so a few overlap well on two cores; many
// would leave each page too little of the processor to keep to the
// time-outs the tests give it.
const browserTestsAtOnce = 3

// browserTurns holds one token per browser test running.
var browserTurns = make(chan struct{}, browserTestsAtOnce)

// browserSideBySide marks a browser test that shares nothing with the
// others but the package's Chromium (its own servers, database files and
// browser context): it runs beside them (t.Parallel), browserTestsAtOnce
// at a time. Call it first in the test.
func browserSideBySide(t *testing.T) {
	t.Helper()
	t.Parallel()
	browserTurns <- struct{}{}
	t.Cleanup(func() { <-browserTurns })
}

// browserFullOnly skips t, a browser test outside the quick run's smoke
// set, unless the run is a full one (fullRun: PAYTWICE_TEST_FULL=1, as
// .ci/run sets). A browser test's time is Chromium's processor, which no
// fake clock shortens, and sixty of them three at a time took most of ten
// minutes: the quick run keeps one browser test per page or feature (the
// browser tests without this call, listed in docs/testing.md) beside every
// test that needs no browser, and the full run adds the long walks, the
// restarts, the many tabs and the other cases of each page. Call it first,
// before browserSideBySide, so that a skipped test takes no turn.
func browserFullOnly(t *testing.T) {
	t.Helper()
	if !fullRun() {
		t.Skip("a browser test outside the quick run's smoke set: runs with PAYTWICE_TEST_FULL=1 go test ./web (as .ci/run does)")
	}
}

// liveBrowser opens a window of the given size in a browser context of its
// own (nothing shared with other tests: cookies, storage, cache) in the
// package's headless browser, and returns its first tab. The whole test is
// bounded in time; the window closes when the test ends. The bound keeps a
// hung page from holding the run, no more: 90 s was too short for the axe
// test's dozen pages on a 2-core machine loaded past 20, so it is five
// minutes, as for the longest walks.
func liveBrowser(t *testing.T, width, height int) context.Context {
	t.Helper()
	return liveBrowserFor(t, width, height, 5*time.Minute)
}

// liveBrowserFor is liveBrowser with a bound of d: its tabs end after d.
func liveBrowserFor(t *testing.T, width, height int, d time.Duration) context.Context {
	t.Helper()
	browser, err := sharedBrowser.Start(browsertest.Require(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, liveResize(width, height)); err != nil {
		t.Fatalf("opening a %dx%d window: %v", width, height, err)
	}
	ctx, cancelTime := context.WithTimeout(ctx, d)
	t.Cleanup(cancelTime)
	liveWatchCSP(t, ctx)
	return ctx
}

// liveResize sets the size of the tab's window, as the browser's
// --window-size does for the windows it opens.
func liveResize(width, height int) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		b := chromedp.FromContext(ctx).Browser
		w, err := cdp.Call(ctx, b, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: tg.TargetID})
		if err != nil {
			return err
		}
		_, err = cdp.Call(ctx, b, cdpbrowser.SetWindowBounds, cdpbrowser.SetWindowBoundsParams{
			WindowID: w.WindowID,
			Bounds:   &cdpbrowser.Bounds{Width: int64(width), Height: int64(height), WindowState: cdpbrowser.WindowStateNormal},
		})
		return err
	})
}

// liveTab opens another tab, in a window the size of browser's. With
// isolated set it has its own cookies and storage, like a second person's
// browser.
func liveTab(t *testing.T, browser context.Context, isolated bool) context.Context {
	t.Helper()
	var width, height int64
	err := chromedp.Do(browser, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		w, err := cdp.Call(ctx, chromedp.FromContext(ctx).Browser, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: tg.TargetID})
		if err == nil {
			width, height = w.Bounds.Width, w.Bounds.Height
		}
		return err
	}))
	if err != nil {
		t.Fatalf("reading the window's size: %v", err)
	}
	var opts []chromedp.ContextOption
	if isolated {
		opts = append(opts, chromedp.WithNewBrowserContext())
	}
	ctx, cancel := chromedp.NewContext(browser, opts...)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, liveResize(int(width), int(height))); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	liveWatchCSP(t, ctx)
	return ctx
}

// liveWatchCSP records Content-Security-Policy violations in window.__csp
// on every page the tab opens.
func liveWatchCSP(t *testing.T, ctx context.Context) {
	t.Helper()
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.__csp = []; document.addEventListener("securitypolicyviolation",
				e => window.__csp.push(e.violatedDirective + " " + e.blockedURI));`,
		})
		return err
	}))
	if err != nil {
		t.Fatalf("watching CSP: %v", err)
	}
}

func liveDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func liveEval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// liveWait polls a JavaScript condition in the page until it is true, or
// fails the test with what after the timeout, showing the page's state.
func liveWait(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond string) {
	t.Helper()
	// A page that is swapping a panel in has, for an instant, neither the
	// old element nor the new one: a condition that reads it then throws,
	// which is "not yet", not a failure. The last such error is shown if
	// the wait times out.
	guarded := "(() => { try { return !!(" + cond + "); } catch (e) { window.__liveWaitError = String(e); return false; } })()"
	err := browsertest.Poll(ctx, guarded, 25*time.Millisecond, timeout)
	if err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(window.__liveWaitError ? "last error: " + window.__liveWaitError + " | " : "") + (document.getElementById("pay-status")||{}).textContent + " | timeline: " + ((document.getElementById("timeline")||{}).innerText||"").slice(0, 600)`))
		t.Fatalf("waiting for %s (%s): %v\npage: %s", what, cond, err, state)
	}
}

// liveOpen loads a page and waits until its event stream is connected.
func liveOpen(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	liveDo(t, ctx, "opening "+u, chromedp.Navigate(u))
	liveWait(t, ctx, "the event stream", waitUntilBound, `(document.getElementById("stream-state")||{}).textContent === "live"`)
}

// liveNoCSPViolations checks that the page needed nothing the policy blocks.
func liveNoCSPViolations(t *testing.T, ctx context.Context) {
	t.Helper()
	if v := liveEval[[]string](t, ctx, `window.__csp || []`); len(v) > 0 {
		t.Errorf("Content-Security-Policy violations: %v", v)
	}
}

// liveClick clicks an element; two of them make a double-click (chromedp's
// DoubleClick sends one click event with a count of two).
//
// A page that redraws the element between the query and the click (htmx
// swapping a panel in) makes Chrome answer "Could not find node": the
// mouse was not pressed then (that comes last), so the click is tried
// again on the element drawn in its place, as a person would.
func liveClick(sel string) chromedp.Action[chromedp.Void] {
	click := chromedp.Click(chromedp.CSS(sel))
	return func(ctx context.Context, target *chromedp.Target) (chromedp.Void, error) {
		for try := 1; ; try++ {
			v, err := click(ctx, target)
			if err == nil || try == 5 || !strings.Contains(err.Error(), "Could not find node") {
				return v, err
			}
		}
	}
}

// liveType focuses the element sel and types text into it key by key, as
// chromedp.SendKeys does for a text field, without SendKeys' read of the
// node's attributes outside the node's lock: that read races with the
// DOM events of a page that changes the field's attributes while the test
// types, and fails the test under -race.
func liveType(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Focus(chromedp.CSS(sel)), chromedp.KeyEvent(text))
}

// setFaults sets the switches the way the JSON API does.
func setFaults(t *testing.T, env *testEnv, f pay.ServerFaults) {
	t.Helper()
	if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{Server: f}, "test"); err != nil {
		t.Fatal(err)
	}
}

// livePayWithRetries starts a server with the faults f, opens the checkout
// at path in a desktop-sized browser, turns retries on and pays once.
func livePayWithRetries(t *testing.T, f pay.ServerFaults, path string) (*testEnv, context.Context) {
	t.Helper()
	env := newTestEnv(t, Config{})
	setFaults(t, env, f)
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+path)
	liveDo(t, ctx, "retries on, pay", liveClick("#opt-retry"), liveClick("#pay"))
	return env, ctx
}

const (
	chargeRows   = `document.querySelectorAll("#charges-body tr").length`
	paidNow      = `document.getElementById("pay-status").dataset.state === "paid"`
	timelineText = `document.getElementById("timeline").textContent`
)

func TestBrowserDoubleClickWithDelayChargesOnce(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{DelayMS: 800})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")

	liveDo(t, ctx, "double-clicking Pay", liveClick("#pay"), liveClick("#pay"))

	t.Run("the page sent two requests and ends paid", func(t *testing.T) {
		liveWait(t, ctx, "two attempts, both answered, and paid", waitUntilBound,
			paidNow+` && document.querySelectorAll("#attempts li[data-status]").length === 2`)
	})
	t.Run("exactly one charge in the database and on the page", func(t *testing.T) {
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges in the database, want 1", n)
		}
		liveWait(t, ctx, "one charge row", waitUntilBound, chargeRows+` === 1`)
		if n := liveEval[int](t, ctx, chargeRows); n != 1 {
			t.Fatalf("%d charge rows on the page, want 1", n)
		}
	})
	t.Run("the timeline shows the second request as a 409 or a replay", func(t *testing.T) {
		liveWait(t, ctx, "a 409 or replay badge", waitUntilBound,
			`[...document.querySelectorAll("#timeline .outcome .badge")].some(b => /^409|replayed/.test(b.textContent))`)
		// The faults set before the page opened have a row of their own
		// (the board draws what happened before its start): the
		// requests' rows are the ones named after a request.
		liveWait(t, ctx, "two request rows", waitUntilBound, `document.querySelectorAll("#timeline .tl-row[id^='tl-rq_']").length === 2`)
	})
	liveNoCSPViolations(t, ctx)
}

func TestBrowserResponseLostThenRetryReplays(t *testing.T) {
	browserSideBySide(t)
	// backoff_ms shrinks the retry delays from 0.5 s to 20 ms.
	env, ctx := livePayWithRetries(t, pay.ServerFaults{ResponseLost: true}, "/?backoff_ms=20")

	liveWait(t, ctx, "the page to end paid", waitUntilBound, paidNow)
	t.Run("the page saw no response, waited, and retried with the same key", func(t *testing.T) {
		got := liveEval[[]string](t, ctx, `[...document.querySelectorAll("#attempts li")].map(li => li.dataset.status).reverse()`)
		if strings.Join(got, " ") != "network 201" {
			t.Fatalf("attempts %v, want [network 201]", got)
		}
		liveWait(t, ctx, "the wait before the retry", time.Second,
			`/waited \d/.test(document.getElementById("attempts").textContent)`)
	})
	t.Run("one charge", func(t *testing.T) {
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
		liveWait(t, ctx, "one charge row", waitUntilBound, chargeRows+` === 1`)
	})
	t.Run("the timeline shows the lost response and the replay", func(t *testing.T) {
		liveWait(t, ctx, "lost response and replayed", waitUntilBound,
			timelineText+`.includes("lost response") && `+timelineText+`.includes("replayed")`)
	})
	liveNoCSPViolations(t, ctx)
}

func TestBrowserChangedAmountSameKeyExplains422(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")

	liveDo(t, ctx, "paying", liveClick("#pay"))
	liveWait(t, ctx, "paid", waitUntilBound, paidNow)
	key := liveEval[string](t, ctx, `document.getElementById("key-full").textContent`)

	liveDo(t, ctx, "changing the amount and paying again",
		chromedp.Clear(chromedp.CSS("#amount")),
		liveType("#amount", "1,350.00"),
		liveClick("#pay"))

	liveWait(t, ctx, "the 422 explanation", waitUntilBound,
		`document.getElementById("pay-status").dataset.state === "mismatch" && !!document.querySelector('#pay-explain a[href="/problems/key-reused"]')`)
	if k := liveEval[string](t, ctx, `document.getElementById("key-full").textContent`); k != key {
		t.Errorf("the key changed from %q to %q: the 422 needs the same key", key, k)
	}
	if n := env.charges(); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
	liveWait(t, ctx, "a 422 row on the timeline", waitUntilBound, timelineText+`.includes("422 key reused")`)
}

func TestBrowserTwoTabsSeeEachOthersPayments(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	a := liveBrowser(t, 1366, 900)
	b := liveTab(t, a, true)
	liveOpen(t, a, env.URL+"/")
	liveOpen(t, b, env.URL+"/")

	order := liveEval[string](t, a, `document.getElementById("order-id").textContent`)
	liveDo(t, a, "paying in tab A", liveClick("#pay"))
	liveWait(t, a, "tab A paid", waitUntilBound, paidNow)
	// From here, tab B has one second.
	liveWait(t, b, "the payment in tab B", time.Second,
		fmt.Sprintf(`[...document.querySelectorAll("#charges-body tr")].some(tr => tr.textContent.includes(%q))`, order))
	liveWait(t, b, "the request on tab B's timeline", time.Second, timelineText+`.includes(`+fmt.Sprintf("%q", order)+`)`)
}

func TestBrowserStudentCannotFlipSwitches(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "teach-7f3a"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter := liveBrowser(t, 1366, 900)
	student := liveTab(t, presenter, true)

	liveOpen(t, presenter, env.URL+"/board?token="+url.QueryEscape(token))
	if u := liveEval[string](t, presenter, `location.pathname + location.search`); u != "/board" {
		t.Errorf("the board's address is %q: the token should not stay in the address bar", u)
	}
	liveOpen(t, student, env.URL+"/")

	t.Run("the student's switches are disabled", func(t *testing.T) {
		if !liveEval[bool](t, student, `document.getElementById("faults").disabled`) {
			t.Fatal("the fieldset is enabled for a student")
		}
	})
	t.Run("the server refuses the student's change with 403", func(t *testing.T) {
		status := liveEval[int](t, student, `fetch("/api/faults", {method: "PATCH", headers: {"Content-Type": "application/json"},
			body: JSON.stringify({server: {response_lost: true}})}).then(r => r.status)`)
		if status != 403 {
			t.Fatalf("PATCH /api/faults from the student's tab: %d, want 403", status)
		}
		// Through the page too, with the fieldset forced open.
		liveDo(t, student, "forcing the switch", chromedp.Evaluate[chromedp.Void](`document.getElementById("faults").disabled = false`),
			liveClick("#f-lost"))
		liveWait(t, student, "the refusal", waitUntilBound, `document.getElementById("faults-status").textContent.includes("403")`)
		liveWait(t, student, "the switch put back", waitUntilBound, `document.getElementById("f-lost").checked === false`)
		if env.Server.faultSwitches().currentFaults().Server.ResponseLost {
			t.Fatal("the switch changed on the server")
		}
	})
	t.Run("the presenter flips it and the student sees it", func(t *testing.T) {
		liveDo(t, presenter, "opening the switches and flipping response lost",
			liveClick(".board-switches summary"), liveClick("#f-lost"))
		liveWait(t, presenter, "saved", waitUntilBound, `document.getElementById("faults-status").textContent.includes("saved")`)
		if !env.Server.faultSwitches().currentFaults().Server.ResponseLost {
			t.Fatal("the presenter's switch did not reach the server")
		}
		liveWait(t, student, "the switch on the student's page", 2*time.Second, `document.getElementById("f-lost").checked === true`)
		liveWait(t, student, "the switch on the timeline", 2*time.Second, timelineText+`.includes("response_lost on")`)
	})
	t.Run("the student can still pay", func(t *testing.T) {
		setFaults(t, env, pay.ServerFaults{})
		liveDo(t, student, "paying", liveClick("#pay"))
		liveWait(t, student, "paid", waitUntilBound, paidNow)
	})
	t.Run("the student cannot reset; the presenter's sweep and reset reach every page", func(t *testing.T) {
		status := liveEval[int](t, student, `fetch("/api/reset", {method: "POST"}).then(r => r.status)`)
		if status != 403 || env.charges() != 1 {
			t.Fatalf("a student's reset: %d, %d charges left", status, env.charges())
		}
		liveDo(t, presenter, "sweeping", liveClick("#sweep-now"))
		liveWait(t, presenter, "the sweep report", waitUntilBound, `document.getElementById("faults-status").textContent.includes("This sweep closed 0 stuck keys")`)
		liveDo(t, presenter, "resetting", liveClick("#reset-demo"))
		liveWait(t, student, "the student's panels cleared", 3*time.Second,
			chargeRows+` === 0 && document.querySelectorAll("#timeline .tl-row").length === 1 && `+timelineText+`.includes("Reset")`)
		if env.charges() != 0 {
			t.Fatalf("%d charges after the reset", env.charges())
		}
	})
	liveNoCSPViolations(t, student)
	liveNoCSPViolations(t, presenter)
}

// TestBrowserRetryWaitsAndReplays: with retries on, the second click of a
// double-click gets 409 while the first runs, waits at least Retry-After
// (one second), and its retry gets the saved 201.
func TestBrowserRetryWaitsAndReplays(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	// The first click's charge is held at the gateway until the second
	// click's retry is counting down, so the 409 does not depend on how
	// quickly the browser clicks on a loaded machine.
	release := sync.OnceFunc(env.holdGateway())
	t.Cleanup(release)
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/?backoff_ms=20")
	liveDo(t, ctx, "retries on, double-click", liveClick("#opt-retry"), liveClick("#pay"), liveClick("#pay"))

	liveWait(t, ctx, "a countdown before the retry", waitUntilBound,
		`[...document.querySelectorAll("#attempts .wait")].some(w => /retry 1 in/.test(w.textContent))`)
	release()
	liveWait(t, ctx, "three answered attempts, ending paid", waitUntilBound,
		paidNow+` && document.querySelectorAll("#attempts li[data-status]").length === 3`)
	got := liveEval[[]string](t, ctx, `[...document.querySelectorAll("#attempts li")].map(li => li.dataset.status).sort()`)
	if strings.Join(got, " ") != "201 201 409" {
		t.Fatalf("attempts %v, want one 409 and two 201s (the first click, and the retry's replay)", got)
	}
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	liveWait(t, ctx, "the replay on the timeline", waitUntilBound, timelineText+`.includes("replayed")`)
}

// TestBrowserKeySurvivesReload checks the key belongs to the action: a
// reload keeps it, New order replaces it.
func TestBrowserKeySurvivesReload(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	key := liveEval[string](t, ctx, `document.getElementById("key-full").textContent`)
	liveOpen(t, ctx, env.URL+"/")
	if k := liveEval[string](t, ctx, `document.getElementById("key-full").textContent`); k != key {
		t.Fatalf("after a reload the key is %q, want %q", k, key)
	}
	liveDo(t, ctx, "new order", liveClick("#new-order"))
	if k := liveEval[string](t, ctx, `document.getElementById("key-full").textContent`); k == key || !strings.Contains(k, "-") {
		t.Fatalf("after New order the key is %q (was %q)", k, key)
	}
}

// TestBrowserFirstLoadStaysOnOrigin loads / in a fresh browser and checks
// every request the page makes goes to paytwice itself, and that what
// crossed the wire (headers included) is under 100 KB.
func TestBrowserFirstLoadStaysOnOrigin(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)

	watch, stop := context.WithCancel(ctx)
	requests := chromedp.Events(watch, network.RequestWillBeSent)
	finished := chromedp.Events(watch, network.LoadingFinished)
	var mu sync.Mutex
	var urls []string
	var wire float64
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		for ev, err := range requests {
			if err != nil {
				return
			}
			mu.Lock()
			urls = append(urls, ev.Request.URL)
			mu.Unlock()
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for ev, err := range finished {
			if err != nil {
				return
			}
			mu.Lock()
			wire += ev.EncodedDataLength
			mu.Unlock()
		}
	}()
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "paying", liveClick("#pay"))
	liveWait(t, ctx, "paid", waitUntilBound, paidNow)
	stop()
	<-done
	<-done

	mu.Lock()
	defer mu.Unlock()
	if len(urls) < 6 {
		t.Fatalf("only %d requests seen: %v", len(urls), urls)
	}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.Hostname() != "127.0.0.1" {
			t.Errorf("a request left the origin: %s", u)
		}
	}
	if wire <= 0 || wire >= firstLoadLimit {
		t.Errorf("%.0f bytes on the wire for the first load and a payment, want under %d", wire, firstLoadLimit)
	}
	t.Logf("%d requests, %.0f bytes on the wire (headers included)", len(urls), wire)
}

// TestBrowserKeyboardOnly pays and turns a switch on without a mouse.
func TestBrowserKeyboardOnly(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "Enter on the focused Pay button", chromedp.Focus(chromedp.CSS("#pay")), chromedp.KeyEvent(kb.Enter))
	liveWait(t, ctx, "paid", waitUntilBound, paidNow)
	liveDo(t, ctx, "Space on the focused Guard switch", chromedp.Focus(chromedp.CSS("#opt-guard")), chromedp.KeyEvent(" "))
	if !liveEval[bool](t, ctx, `document.getElementById("opt-guard").checked`) {
		t.Fatal("Space did not turn the switch on")
	}
	liveDo(t, ctx, "Space on a fault switch", chromedp.Focus(chromedp.CSS("#f-500")), chromedp.KeyEvent(" "))
	liveWait(t, ctx, "the switch saved", waitUntilBound, `document.getElementById("faults-status").textContent.includes("saved")`)
	if !env.Server.faultSwitches().currentFaults().Server.ServerError {
		t.Fatal("the server error switch did not reach the server")
	}
}

// TestBrowserNewKeyPerClickChargesTwice shows the mistake the key
// prevents: with a new key on every click, a double-click is two payments,
// and the board says so in red.
func TestBrowserNewKeyPerClickChargesTwice(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{DelayMS: 300})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "the mistake on, then a double-click", liveClick("#opt-newkey"), liveClick("#pay"), liveClick("#pay"))
	liveWait(t, ctx, "two charges and the alarm", waitUntilBound,
		chargeRows+` === 2 && document.querySelector("#orders .alarm") !== null && document.querySelector("#orders li.twice") !== null`)
	if n := env.charges(); n != 2 {
		t.Fatalf("%d charges, want 2: the mistake should charge twice", n)
	}
}

// TestLiveWaitOutlivesANavigation: a page that navigates while a test
// waits on it (a reload, a link followed) must not fail the wait; the
// condition is asked of the page the tab then shows.
func TestLiveWaitOutlivesANavigation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/second" {
			w.Write([]byte(`<!doctype html><title>second</title><body>the second page</body>`))
			return
		}
		w.Write([]byte(`<!doctype html><title>first</title><body>the first page<script>setTimeout(() => { location.href = "/second" }, 400)</script></body>`))
	}))
	defer srv.Close()
	ctx := liveBrowser(t, 800, 600)
	liveDo(t, ctx, "opening the first page", chromedp.Navigate(srv.URL+"/first"))
	liveWait(t, ctx, "the second page", waitUntilBound, `document.body.textContent.includes("the second page")`)
}
