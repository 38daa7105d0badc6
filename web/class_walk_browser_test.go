package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"paytwice/web/board"
	"paytwice/web/room/lesson"
)

// A class walks every chapter in order on three phones that never press
// New order: each chapter begins with a reset, so each phone starts the
// chapter's own order, and after each chapter every card says what the
// server has for the order it shows.

// cardSettled is true once the card has no request under way and no
// answer still to draw.
const cardSettled = `(() => {
	const st = document.getElementById("pay-status").dataset.state;
	return document.getElementById("pay").getAttribute("aria-busy") === "false" &&
		!["sending", "waiting", "checking"].includes(st);
})()`

// cardAgrees asks the server for the card's order and compares, in the
// page (so with the phone's own scope), polling a bounded number of times
// while the card reconciles: "ok", or what the card says against the
// server.
const cardAgrees = `(async () => {
	const check = async () => {
		const st = document.getElementById("pay-status");
		const order = document.getElementById("order-id").textContent;
		const r = await fetch("/v1/payments?order_id=" + encodeURIComponent(order),
			{ headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" }, cache: "no-store" }).then(r => r.json());
		const ids = r.charges.map(c => c.charge_id);
		const said = st.dataset.charges;
		if (said !== undefined && Number(said) !== ids.length) {
			return "order " + order + ": the card says " + said + " charge(s), the server has " + ids.length + ": " + st.textContent;
		}
		const code = st.querySelector("code");
		if (st.dataset.state === "paid" && (!code || !ids.includes(code.textContent))) {
			return "order " + order + ": the card is paid with " + (code && code.textContent) + ", the server has " + JSON.stringify(ids);
		}
		return "ok";
	};
	let last = "";
	for (let i = 0; i < 100; i++) {
		last = await check();
		if (last === "ok") { return last; }
		await new Promise(r => setTimeout(r, 50));
	}
	return last;
})()`

// phoneFirstScreen says what of the chapter's step and the card's own
// requests is not on a phone's first screen, and which text the chapter
// points at is smaller than 14 px; "" when all is well.
const phoneFirstScreen = `(() => {
	const bad = [];
	const onScreen = e => { const b = e.getBoundingClientRect(); return b.height > 0 && b.top >= 0 && b.bottom <= innerHeight; };
	const step = document.querySelector("#lesson .lesson-do li");
	if (!step || !onScreen(step)) bad.push("the chapter's first step is not on the first screen");
	const first = document.querySelector("#attempts li");
	const jump = document.querySelector('#lesson a[href="#attempts"]');
	if (first && !onScreen(first) && !(jump && onScreen(jump))) {
		bad.push("the card's latest request is at y=" + Math.round(first.getBoundingClientRect().top) + ", and no link to it on the first screen");
	}
	for (const sel of ["#attempts li", "#timeline .tl-head", "#timeline .step", "#lesson .lesson-do li"]) {
		for (const e of document.querySelectorAll(sel)) {
			const px = parseFloat(getComputedStyle(e).fontSize);
			if (px < 14) { bad.push(sel + " at " + px + " px"); break; }
		}
	}
	return bad.join("; ");
})()`

// chapterWalk is what each chapter's students (and presenter) do, when it
// is more than paying once (or twice, in a race chapter), shortened; pay
// has every phone pay, presenter sends the presenter's request.
func chapterWalk(pay func(double bool), presenter func(method, path string, body any)) map[string]func() {
	return map[string]func(){
		"connection-never-happens": func() { pay(false); presenter(http.MethodPut, "/api/faults", map[string]any{}); pay(false) },
		"fails-halfway":            func() { pay(false); pay(false) },
		"crash-midway":             func() { pay(false); pay(false) },
		"prune-too-soon": func() {
			pay(false)
			presenter(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 120})
			presenter(http.MethodPost, "/api/lab/prune", nil)
			pay(false)
		},
		"retry-every-4xx": func() { pay(false); pay(false) },
	}
}

// chapterWords is what a card must say after some chapters, when its
// state is the one named: each explanation fits what happened.
var chapterWords = map[string]struct{ state, re string }{
	"fails-halfway":     {"held", `answered 500 after it started`},
	"crash-midway":      {"held", `never answered`},
	"no-key":            {"twice", `this server ignores keys`},
	"check-then-insert": {"twice", `looked the key up before any had written it`},
	"prune-too-soon":    {"twice", `the key was pruned`},
	// Every retry went out under a new key: the card counts the six
	// charges the server made, and says why.
	"new-key-per-retry": {"twice", `charged six times.*Each request had a key of its own`},
}

// TestBrowserClassWalksEveryChapterWithoutNewOrder: three phones go from
// chapter to chapter as a class does, never pressing New order: each
// chapter gives each card a new order, and what the card says after it
// fits what happened.
func TestBrowserClassWalksEveryChapterWithoutNewOrder(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	// A lock timeout of 10 s gives each payment's work 5 s (with 2 s, 1 s):
	// the lock in memory's requests queue behind each other, and on a
	// loaded machine 1 s was not always enough, so a card rightly said an
	// outcome was unknown where this walk asserts the chapter's own words.
	// Nothing here waits for the lock timeout in real time: the sweep
	// lessons warp the demo clock past it, as with any lock timeout.
	env := newTestEnv(t, Config{LockTimeout: 10 * time.Second, SweepEvery: 200 * time.Millisecond})
	browser := liveBrowserFor(t, 390, 844, 5*time.Minute)
	phones := make([]context.Context, 3)
	for i := range phones {
		phones[i] = liveTab(t, browser, true)
		liveDo(t, phones[i], "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
		liveOpen(t, phones[i], env.URL+"/?backoff_ms=5")
	}
	ctx := context.Background()
	pay := func(double bool) {
		for i, p := range phones {
			steps := []chromedp.Action[chromedp.Void]{liveClick("#pay")}
			if double {
				steps = append(steps, liveClick("#pay"))
			}
			liveDo(t, p, fmt.Sprintf("phone %d pays", i+1), steps...)
		}
		for i, p := range phones {
			liveWait(t, p, fmt.Sprintf("phone %d's answers", i+1), waitUntilBound, cardSettled)
		}
	}
	presenter := func(method, path string, body any) {
		if r := env.send(method, path, body); r.Status >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
		}
	}
	walk, words := chapterWalk(pay, presenter), chapterWords
	before := make([]string, len(phones))
	for n, ch := range lesson.Build(env.Server.cfg.LockTimeout) {
		if err := env.Server.guidedLessons().start(ctx, ch.Slug, "presenter"); err != nil {
			t.Fatal(err)
		}
		for i, p := range phones {
			liveWait(t, p, fmt.Sprintf("phone %d on %s with a new order", i+1, ch.Slug), waitUntilBound,
				fmt.Sprintf(`document.getElementById("lesson").dataset.slug === %q && document.getElementById("order-id").textContent !== %q && document.querySelectorAll("#attempts li").length === 0`, ch.Slug, before[i]))
		}
		if n > 0 {
			for i, p := range phones {
				if got := liveEval[string](t, p, `document.getElementById("pay-status").textContent`); !strings.Contains(got, "closed") {
					t.Errorf("%s, phone %d: the card does not say the last order is closed: %q", ch.Slug, i+1, got)
				}
			}
		}
		if do, ok := walk[ch.Slug]; ok {
			do()
		} else {
			pay(ch.Race)
		}
		for i, p := range phones {
			// On the first screen: the chapter's step, and this phone's own
			// requests; the text the chapter points at is 14 px or more.
			liveDo(t, p, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
			if got := liveEval[string](t, p, phoneFirstScreen); got != "" {
				t.Errorf("%s, phone %d: %s", ch.Slug, i+1, got)
			}
			before[i] = liveEval[string](t, p, `document.getElementById("order-id").textContent`)
			t.Logf("%s phone %d: %s", ch.Slug, i+1, liveEval[string](t, p, `document.getElementById("pay-status").textContent`))
			if w, ok := words[ch.Slug]; ok {
				if got := liveEval[bool](t, p, fmt.Sprintf(`(() => { const st = document.getElementById("pay-status"); return st.dataset.state !== %q || new RegExp(%q).test(st.textContent); })()`, w.state, w.re)); !got {
					t.Errorf("after %s, phone %d: the card does not say %q", ch.Slug, i+1, w.re)
				}
			}
			if got := liveEval[string](t, p, cardAgrees); got != "ok" {
				t.Errorf("after chapter %d %s, phone %d: %s", n+1, ch.Slug, i+1, got)
			}
		}
	}
	for _, p := range phones {
		liveNoCSPViolations(t, p)
	}
}

// TestBrowserStepModeAtATeachersPace pays from a page whose attempts give
// up after 2 s, and steps the request through every checkpoint at a
// teacher's pace: 4 s at each checkpoint, twice the page's time-out, and
// 30 s at one. A held
// request is the presenter's pause, so the page waits: it sends one
// request, which nobody releases but the presenter, and the card ends
// with the one charge the server made. (Between two checkpoints the
// request runs, and that time does count: the page's time-out is long
// enough for the event stream to show the next hold on a loaded machine.)
func TestBrowserStepModeAtATeachersPace(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const attemptMS = 2000
	const pause, longPause = 4000, 30000
	env := newStepEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+fmt.Sprintf("/?attempt_ms=%d", attemptMS))
	liveDo(t, ctx, "paying", liveClick("#pay"))
	for i, cp := range []string{"received", "key claimed", "before the gateway", "gateway answered", "saved", "answered"} {
		id := env.waitHeld(cp)
		if i == 0 {
			// The step bar says which click of the page this is.
			if st := env.api(http.MethodGet, "/api/step", ""); !strings.Contains(string(st.Body), `"click":"1"`) {
				t.Fatalf("GET /api/step does not name the page's click: %s", st.Body)
			}
			if v := board.StepBar(env.Server.payments.steps); len(v.Held) != 1 || v.Held[0].Click != "click 1" {
				t.Fatalf("the step bar: %+v", v.Held)
			}
		}
		liveWait(t, ctx, "the held step on the page's timeline", waitUntilBound,
			fmt.Sprintf(`!!document.getElementById(%q)`, "tl-"+id+"-held"))
		pause := pause
		if i == 3 {
			pause = longPause
		}
		// The teacher talks: the page's clock runs on while nothing happens.
		liveWait(t, ctx, "the teacher's pause", time.Duration(pause+5000)*time.Millisecond,
			fmt.Sprintf(`(window.__since = window.__since || {})[%q] ? performance.now() - window.__since[%q] > %d : !(window.__since[%q] = performance.now())`, cp, cp, pause, cp))
		if got := liveEval[string](t, ctx, attemptStatuses); got != "" {
			t.Fatalf("held at %q, the page already ended its attempt: %q", cp, got)
		}
		if r := env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id)); r.Status != http.StatusOK {
			t.Fatalf("Next at %q: %d %s", cp, r.Status, r.Body)
		}
	}
	liveWait(t, ctx, "the card paid", waitUntilBound, paidNow)
	if got := liveEval[string](t, ctx, attemptStatuses); got != "201" {
		t.Fatalf("attempts %q, want one 201", got)
	}
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	if got := liveEval[string](t, ctx, cardAgrees); got != "ok" {
		t.Fatal(got)
	}
	if tl := liveEval[string](t, ctx, `document.getElementById("timeline").textContent`); strings.Contains(tl, "went away") {
		t.Fatalf("the server let a held request go because its client left: %s", tl)
	}
}

// TestBrowserKeyAgesFollowTheDemoClock: the board's key ages follow the
// demo clock live, not the clock the page read when it loaded: after the
// presenter warps it ten minutes a key is ten minutes old, and after a
// reset (which puts the clock back) a new key is seconds old.
func TestBrowserKeyAgesFollowTheDemoClock(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1920, 1080)
	if r := env.pay("age-1", `{"order_id":"A-1","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("pay: %d", r.Status)
	}
	liveOpen(t, ctx, env.URL+"/board")
	const firstAge = `(document.querySelector("#keys-body time.age")||{}).textContent`
	liveWait(t, ctx, "the key's age", waitUntilBound, `/^(now|\d+ s)$/.test(`+firstAge+`)`)
	if r := env.send(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 600}); r.Status != http.StatusOK {
		t.Fatalf("advance: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the key ten minutes old", waitUntilBound, firstAge+` === "10 min"`)
	if r := env.send(http.MethodPost, "/api/reset", nil); r.Status != http.StatusOK {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	if r := env.pay("age-2", `{"order_id":"A-2","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("pay: %d", r.Status)
	}
	liveWait(t, ctx, "the new key seconds old", waitUntilBound,
		`document.querySelectorAll("#keys-body time.age").length === 1 && /^(now|[0-4] s)$/.test(`+firstAge+`)`)
}

// scrollRegionsReachable lists the page's scrolling regions a keyboard
// cannot reach (axe's scrollable-region-focusable): each one must take
// the focus itself, with a name, or hold something that does.
const scrollRegionsReachable = `(() => {
	const focusable = "a[href], button, input, select, textarea, summary, [tabindex]";
	const bad = [];
	for (const el of document.querySelectorAll("body *")) {
		const cs = getComputedStyle(el);
		const scrolls = (/(auto|scroll)/.test(cs.overflowY) && el.scrollHeight > el.clientHeight + 1) ||
			(/(auto|scroll)/.test(cs.overflowX) && el.scrollWidth > el.clientWidth + 1);
		if (!scrolls || !el.checkVisibility()) { continue; }
		const named = el.getAttribute("aria-label") || el.getAttribute("aria-labelledby");
		if ((el.tabIndex >= 0 && named) || el.querySelector(focusable)) { continue; }
		bad.push(el.tagName + (el.id ? "#" + el.id : "") + "." + el.className);
	}
	return bad;
})()`

// TestBrowserPagesReachableByKeyboard: on a phone, every scrolling region
// of the checkout page during a chapter takes the keyboard's focus, and
// the board during a chapter keeps a level-one heading.
func TestBrowserPagesReachableByKeyboard(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	if err := env.Server.guidedLessons().start(context.Background(), "prune-too-soon", "test"); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		env.pay(fmt.Sprintf("kb-%d", i), fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, 1000+i))
	}
	ctx := liveBrowser(t, 390, 844)
	liveDo(t, ctx, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, ctx, env.URL+"/")
	liveWait(t, ctx, "the key rows", waitUntilBound, `document.querySelectorAll("#keys-body tr").length >= 12`)
	if bad := liveEval[[]string](t, ctx, scrollRegionsReachable); len(bad) > 0 {
		t.Errorf("checkout on a phone: scrolling regions the keyboard cannot reach: %v", bad)
	}
	board := liveTab(t, ctx, false)
	liveDo(t, board, "projector size", chromedp.EmulateViewport(1920, 1080))
	liveOpen(t, board, env.URL+"/board")
	if !liveEval[bool](t, board, `[...document.querySelectorAll("h1")].some(h => h.checkVisibility())`) {
		t.Error("the board during a chapter has no level-one heading")
	}
	if bad := liveEval[[]string](t, board, scrollRegionsReachable); len(bad) > 0 {
		t.Errorf("board: scrolling regions the keyboard cannot reach: %v", bad)
	}
}

// TestBrowserIdleBoardShowsTheTimeline: outside a chapter, with the join
// panel showing a room's address and QR code, the timeline's newest row is
// on the projector's screen at 1920x1080 and at 1280x720 (what the
// presenter shows from the idle board, a crash or step mode, happens
// there); during a chapter the board keeps a level-one heading.
func TestBrowserIdleBoardShowsTheTimeline(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	env.Server.pages.join.listenAddr.Store(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080})
	ctx := liveBrowser(t, 1920, 1080)
	liveOpen(t, ctx, env.URL+"/board")
	for i := range 4 {
		if r := env.pay(fmt.Sprintf("idle-%d", i), fmt.Sprintf(`{"order_id":"I-%d","amount_satang":100}`, i)); r.Status != http.StatusCreated {
			t.Fatalf("pay: %d %s", r.Status, r.Body)
		}
	}
	liveWait(t, ctx, "the timeline's rows", waitUntilBound, `document.querySelectorAll("#timeline > li").length >= 4`)
	for _, size := range [][2]int64{{1920, 1080}, {1280, 720}} {
		boardViewport(t, ctx, size[0], size[1])
		liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
		top := liveEval[float64](t, ctx, `document.querySelector("#timeline > li").getBoundingClientRect().top`)
		if top > float64(size[1])-60 {
			t.Errorf("at %dx%d the timeline's newest row starts at y=%.0f", size[0], size[1], top)
		}
		boardScreenshot(t, ctx, fmt.Sprintf("board-idle-%dx%d.png", size[0], size[1]))
	}
	if err := env.Server.guidedLessons().start(context.Background(), "no-key", "test"); err != nil {
		t.Fatal(err)
	}
	boardViewport(t, ctx, 1920, 1080)
	liveWait(t, ctx, "the chapter on the board", waitUntilBound, `!!document.querySelector(".lesson-caption")`)
	if !liveEval[bool](t, ctx, `[...document.querySelectorAll("h1")].some(h => h.checkVisibility())`) {
		t.Error("the board during a chapter has no level-one heading")
	}
}

// TestBrowserMissingKeyFromThePage: a student can send a payment with no
// Idempotency-Key from the lab's first card and see the 400, and nothing is
// saved or charged.
func TestBrowserMissingKeyFromThePage(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "sending with no key", chromedp.ScrollIntoView(chromedp.CSS(`[data-lab-action="send-no-key"]`)),
		liveClick(`[data-lab-action="send-no-key"]`))
	liveWait(t, ctx, "the 400 under the button", waitUntilBound, `/no key: 400/.test(document.getElementById("lab-nokey-result").textContent)`)
	liveWait(t, ctx, "the 400 on the timeline", waitUntilBound, `/400/.test(document.getElementById("timeline").textContent)`)
	if n := env.charges(); n != 0 {
		t.Fatalf("%d charges for a request with no key", n)
	}
}
