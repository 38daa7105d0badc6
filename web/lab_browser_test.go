package web

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/room"
)

// Browser tests of the common-mistakes lab and the lessons. Like the live
// page's, they fail when CI=true and no browser is found, skip elsewhere,
// and never sleep: every wait polls the page with a bound.

// labNumber is the headline number of mistake n's measured outcome.
func labNumber(n int) string {
	return fmt.Sprintf(`document.querySelector("#lab-out-%d strong").textContent`, n)
}

// jsClick clicks an element from the page's own script. The lab's cards
// change height as their numbers arrive, so a mouse click aimed at a
// position could land on the card below; this one cannot.
func jsClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, sel))
}

// labSwitch flips a lab switch on the page and waits until the server
// has it.
func labSwitch(t *testing.T, ctx context.Context, env *testEnv, sel string, check func(room.LabSettings) bool) {
	t.Helper()
	liveDo(t, ctx, "flipping "+sel, chromedp.ScrollIntoView(chromedp.CSS(sel)), jsClick(sel))
	liveWait(t, ctx, "the lab switch saved", waitUntilBound, `document.getElementById("lab-status").textContent.includes("saved")`)
	if !check(env.Server.lab.Settings()) {
		t.Fatalf("after flipping %s the lab is %+v", sel, env.Server.lab.Settings())
	}
	liveDo(t, ctx, "clearing the lab status", chromedp.Evaluate[chromedp.Void](`document.getElementById("lab-status").textContent = ""`))
}

// countLabLive has the page count its requests to /lab/live from now on,
// in window.labLiveAsked: the lab's numbers come with the event stream,
// and a payment must not make the page ask for them.
func countLabLive(t *testing.T, ctx context.Context) {
	t.Helper()
	liveDo(t, ctx, "counting the requests to /lab/live", chromedp.Evaluate[chromedp.Void](`(() => {
		window.labLiveAsked = 0;
		if (window.labLiveCounted) { return; }
		window.labLiveCounted = true;
		const fetch = window.fetch;
		window.fetch = function (url) {
			if (String(url).includes("/lab/live")) { window.labLiveAsked++; }
			return fetch.apply(this, arguments);
		};
		// The sequence number of the last event the stream brought, from
		// its id ("<epoch>-<seq>[@place]"); lab.js hears each frame first.
		window.labFrameSeq = 0;
		document.addEventListener("htmx:sseMessage", function (ev) {
			const id = String((ev.detail && ev.detail.lastEventId) || "");
			const seq = Number(id.split("@")[0].split("-").pop());
			if (seq > window.labFrameSeq) { window.labFrameSeq = seq; }
		});
	})()`))
}

// labSettled waits until the page has heard every event the server has
// published so far and has stopped asking /lab/live about them: whatever
// it asks from then on, something after now made it ask.
func labSettled(t *testing.T, ctx context.Context, env *testEnv) {
	t.Helper()
	liveWait(t, ctx, "the page to hear every event and stop asking /lab/live", waitUntilBound,
		fmt.Sprintf(`window.labFrameSeq >= %d && !document.documentElement.hasAttribute("data-lab-asking")`, env.Server.hub.LastSeq()))
}

// answered counts the attempts the page has an answer (or a failure) for.
const answered = `document.querySelectorAll("#attempts li[data-status]").length`

// TestBrowserLabNoKeyDoubleClick runs alone, not beside the other
// browser tests: it counts the page's requests to /lab/live after a
// switch, which pages working beside it would slow.
func TestBrowserLabNoKeyDoubleClick(t *testing.T) {
	browserFullOnly(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{DelayMS: 800})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")

	t.Run("with the lab's no-key switch on, a double-click charges twice", func(t *testing.T) {
		countLabLive(t, ctx)
		labSwitch(t, ctx, env, "#lab-nokey", func(l room.LabSettings) bool { return l.Server.Mode == room.LabNoKey })
		// The switch changed the room: the page asks /lab/live for the
		// switches (for the switch's answer and for its events, once
		// for all when they come close together). Once it has heard the
		// switch's events and stopped asking, count again: the
		// double-click's asks only.
		labSettled(t, ctx, env)
		if n := liveEval[int](t, ctx, `window.labLiveAsked`); n < 1 {
			t.Fatal("the page did not ask /lab/live for the switches after a switch")
		}
		countLabLive(t, ctx)
		liveDo(t, ctx, "double-clicking Pay", chromedp.ScrollIntoView(chromedp.CSS("#pay")), liveClick("#pay"), liveClick("#pay"))
		liveWait(t, ctx, "two answered attempts", waitUntilBound, answered+` === 2`)
		if n := env.charges(); n != 2 {
			t.Fatalf("%d charges in the database, want 2", n)
		}
		liveWait(t, ctx, "both charges on the page, the second in red", waitUntilBound,
			chargeRows+` === 2 && document.querySelectorAll("#charges-body tr.twice").length === 1`)
		liveWait(t, ctx, "the lab's measured outcome", waitUntilBound,
			labNumber(1)+` === "1" && document.getElementById("lab-out-1").classList.contains("bad")`)
		liveWait(t, ctx, "the summary's extra charge", waitUntilBound, `document.getElementById("lab-summary").textContent.includes("1 extra charge")`)
		if n := liveEval[int](t, ctx, `window.labLiveAsked`); n != 0 {
			t.Errorf("the page asked /lab/live %d times for a double-click; its numbers come with the event stream", n)
		}
	})
	t.Run("with it off, the same double-click charges once", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-nokey", func(l room.LabSettings) bool { return l.Server.Mode == room.LabCorrect })
		liveDo(t, ctx, "new order, double-click", liveClick("#new-order"), liveClick("#pay"), liveClick("#pay"))
		liveWait(t, ctx, "two answered attempts, paid", waitUntilBound, answered+` === 2 && `+paidNow)
		if n := env.charges(); n != 3 {
			t.Fatalf("%d charges in the database, want 3 (two from before, one now)", n)
		}
		liveWait(t, ctx, "a 409 or a replay for the second click", waitUntilBound,
			`[...document.querySelectorAll("#attempts li")].some(li => li.dataset.status === "409" || /replayed/.test(li.textContent))`)
		if got := liveEval[string](t, ctx, labNumber(1)); got != "1" {
			t.Fatalf("the lab counts %s orders charged twice, want still 1", got)
		}
	})
	liveNoCSPViolations(t, ctx)
}

func TestBrowserLabNewKeyOnEveryRetry(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{ResponseLost: true})
	// One connection per request, so Chromium does not quietly re-send a
	// POST whose response was lost (see TestBrowserResponseLostThenRetryReplays).
	env.HTTP.Config.SetKeepAlivesEnabled(false)
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/?backoff_ms=5")

	t.Run("a new key per retry charges on every attempt", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-newkey-retry", func(l room.LabSettings) bool { return l.Client.NewKeyPerRetry })
		liveDo(t, ctx, "paying once", chromedp.ScrollIntoView(chromedp.CSS("#pay")), liveClick("#pay"))
		// The last attempt is lost too, but the order went out under six
		// keys: the card looks it up and counts what the server charged.
		liveWait(t, ctx, "six attempts, every one lost, and the six charges on the card", waitUntilBound,
			answered+` === 6 && document.getElementById("pay-status").dataset.state === "twice" && /charged six times/.test(document.getElementById("pay-status").textContent)`)
		keys := liveEval[int](t, ctx, `new Set([...document.querySelectorAll("#attempts li[data-key]")].map(li => li.dataset.key)).size`)
		if keys != 6 {
			t.Fatalf("%d distinct keys over six attempts, want 6", keys)
		}
		if n := env.charges(); n != 6 {
			t.Fatalf("%d charges, want 6: every retry under a new key is a new payment", n)
		}
		liveWait(t, ctx, "the lab's measured outcome", waitUntilBound, labNumber(2)+` === "1"`)
	})
	t.Run("the same key on every retry is replayed and charges once", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-newkey-retry", func(l room.LabSettings) bool { return !l.Client.NewKeyPerRetry })
		liveDo(t, ctx, "new order, retries on, paying once", liveClick("#new-order"), liveClick("#opt-retry"), liveClick("#pay"))
		liveWait(t, ctx, "paid after a retry", waitUntilBound, paidNow+` && `+answered+` === 2`)
		keys := liveEval[int](t, ctx, `new Set([...document.querySelectorAll("#attempts li")].map(li => li.dataset.key)).size`)
		if keys != 1 {
			t.Fatalf("%d distinct keys, want 1", keys)
		}
		if n := env.charges(); n != 7 {
			t.Fatalf("%d charges, want 7 (six from before, one now)", n)
		}
		liveWait(t, ctx, "the replay on the timeline", waitUntilBound, timelineText+`.includes("replayed")`)
	})
	liveNoCSPViolations(t, ctx)
}

func TestBrowserLabNewKeyAfter500(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{ServerError: true})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")

	t.Run("a new key after the 500 charges twice", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-newkey-500", func(l room.LabSettings) bool { return l.Client.NewKeyAfter500 })
		liveDo(t, ctx, "paying once", chromedp.ScrollIntoView(chromedp.CSS("#pay")), liveClick("#pay"))
		liveWait(t, ctx, "two 500s under two keys, and the explanation", waitUntilBound,
			answered+` === 2 && document.getElementById("pay-explain").textContent.includes("Paid twice") && /charged twice/.test(document.getElementById("pay-status").textContent)`)
		if n := env.charges(); n != 2 {
			t.Fatalf("%d charges, want 2", n)
		}
		liveWait(t, ctx, "the lab's measured outcome", waitUntilBound, labNumber(5)+` === "1"`)
	})
	t.Run("looking the order up instead finds it paid", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-newkey-500", func(l room.LabSettings) bool { return !l.Client.NewKeyAfter500 })
		liveDo(t, ctx, "new order, paying once", liveClick("#new-order"), liveClick("#pay"))
		liveWait(t, ctx, "the look-up finds the charge", waitUntilBound,
			paidNow+` && !!document.querySelector('#attempts li[data-kind="reconcile"][data-paid="true"]')`)
		if n := env.charges(); n != 3 {
			t.Fatalf("%d charges, want 3 (two from before, one now)", n)
		}
		if got := liveEval[int](t, ctx, answered); got != 1 {
			t.Fatalf("%d payment attempts, want 1: the page looked the order up instead of paying again", got)
		}
		liveWait(t, ctx, "the look-up counted by the lab", waitUntilBound,
			`document.getElementById("lab-out-5").textContent.includes("1 look-up")`)
	})
	liveNoCSPViolations(t, ctx)
}

// lessonShows waits until the page shows chapter slug as running.
func lessonShows(t *testing.T, ctx context.Context, slug string) {
	t.Helper()
	liveWait(t, ctx, "chapter "+slug, waitUntilBound, fmt.Sprintf(
		`document.getElementById("lesson").dataset.slug === %q && document.getElementById("lesson").dataset.running === "true"`, slug))
}

// TestBrowserLessons steps a class through every chapter from the board:
// start, continue, the switches each chapter sets on the server and on a
// student's page, finish, a linked chapter, and a reset.
func TestBrowserLessons(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "lesson-9c1"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter := liveBrowser(t, 1366, 900)
	student := liveTab(t, presenter, true)
	liveOpen(t, presenter, env.URL+"/board?token="+url.QueryEscape(token))
	liveOpen(t, student, env.URL+"/")
	chapters := env.Server.teaching.lessons

	t.Run("the student cannot start the lessons", func(t *testing.T) {
		if liveEval[bool](t, student, `!!document.getElementById("lesson-start")`) {
			t.Fatal("the student's page has a Start button")
		}
	})
	t.Run("start, then continue through every chapter", func(t *testing.T) {
		liveDo(t, presenter, "starting the lessons", liveClick("#lesson-start"))
		for i, ch := range chapters {
			if i > 0 {
				liveDo(t, presenter, "continuing to "+ch.Slug, liveClick("#lesson-next"))
			}
			lessonShows(t, presenter, ch.Slug)
			lessonShows(t, student, ch.Slug)
			if got := env.Server.faultSwitches().currentFaults(); got != ch.Faults {
				t.Fatalf("chapter %s: faults %+v, want %+v", ch.Slug, got, ch.Faults)
			}
			if got := env.Server.lab.Settings(); got != ch.Lab.Normalize() {
				t.Fatalf("chapter %s: lab %+v, want %+v", ch.Slug, got, ch.Lab)
			}
			// The student's page shows the same switches.
			liveWait(t, student, "the switches on the student's page", waitUntilBound, fmt.Sprintf(
				`document.getElementById("lab-nokey").checked === %v && document.getElementById("lab-newkey-retry").checked === %v && `+
					`document.getElementById("lab-check").value === %q && document.getElementById("lab-pii").checked === %v && `+
					`document.getElementById("f-lost").checked === %v && document.getElementById("f-500").checked === %v && `+
					`document.getElementById("opt-retry").checked === %v && document.getElementById("lab-memlock").checked === %v`,
				ch.Lab.Server.Mode == room.LabNoKey, ch.Lab.Client.NewKeyPerRetry, checkSelect(ch.Lab.Server.Mode), ch.Lab.Client.PersonalDataKey,
				ch.Faults.Server.ResponseLost, ch.Faults.Server.ServerError, ch.Retry, ch.Lab.Server.Mode == room.LabMemoryLock))
			if liveEval[bool](t, student, `!!document.getElementById("lesson-next") && !document.getElementById("lesson-next").disabled`) {
				t.Fatalf("chapter %s: the student can move the class on", ch.Slug)
			}
		}
	})
	t.Run("finish leaves the lessons with everything off", func(t *testing.T) {
		liveDo(t, presenter, "finishing", liveClick("#lesson-next"))
		liveWait(t, student, "the lesson index", waitUntilBound, `document.getElementById("lesson").dataset.slug === "" && !!document.querySelector("#lesson .lesson-lead")`)
		if env.Server.lab.Settings() != room.DefaultLabSettings() || env.Server.faultSwitches().currentFaults() != (pay.Faults{}) || env.Server.guidedLessons().current() != "" {
			t.Fatalf("after finishing: lab %+v, faults %+v", env.Server.lab.Settings(), env.Server.faultSwitches().currentFaults())
		}
	})
	t.Run("a linked chapter is shown, started from there, and a reset ends it", func(t *testing.T) {
		liveOpen(t, presenter, env.URL+"/?lesson=check-then-insert")
		liveWait(t, presenter, "the linked chapter, not started", waitUntilBound,
			`document.getElementById("lesson").dataset.slug === "check-then-insert" && document.getElementById("lesson").dataset.running === "false"`)
		if env.Server.lab.Settings().Server.Mode != room.LabCorrect {
			t.Fatal("opening a link changed the switches")
		}
		liveDo(t, presenter, "starting it", liveClick("#lesson-start"))
		lessonShows(t, presenter, "check-then-insert")
		lessonShows(t, student, "check-then-insert")
		if env.Server.lab.Settings().Server.Mode != room.LabCheckThenInsert {
			t.Fatalf("lab %+v", env.Server.lab.Settings())
		}
		if u := liveEval[string](t, presenter, `location.search`); u != "" {
			t.Errorf("the address still names the chapter: %q", u)
		}
		liveDo(t, presenter, "sending a burst", chromedp.ScrollIntoView(chromedp.CSS(`#lesson [data-lab-action="burst"]`)),
			liveClick(`#lesson [data-lab-action="burst"]`))
		liveWait(t, presenter, "the burst's answers", waitUntilBound, `document.getElementById("lesson-action-result").textContent.includes("10 requests")`)
		liveWait(t, student, "several charges for one key, counted", waitUntilBound, labNumber(3)+` === "1"`)

		liveDo(t, presenter, "resetting", chromedp.ScrollIntoView(chromedp.CSS("#reset-demo")), liveClick("#reset-demo"))
		liveWait(t, student, "the lesson index and the switches off", waitUntilBound,
			`document.getElementById("lesson").dataset.slug === "" && document.getElementById("lab-check").value === "correct" && `+labNumber(3)+` === "0"`)
		if env.Server.guidedLessons().current() != "" || env.Server.lab.Settings() != room.DefaultLabSettings() || env.charges() != 0 {
			t.Fatalf("after the reset: lesson %q, lab %+v, %d charges", env.Server.guidedLessons().current(), env.Server.lab.Settings(), env.charges())
		}
	})
	t.Run("an unknown chapter is a readable 404", func(t *testing.T) {
		liveDo(t, student, "opening a wrong link", chromedp.Navigate(env.URL+"/?lesson=no-such-chapter"))
		liveWait(t, student, "the message", waitUntilBound,
			`document.body.textContent.includes("There is no lesson called") && document.body.textContent.includes("response-lost")`)
	})
	liveNoCSPViolations(t, presenter)
	liveNoCSPViolations(t, student)
}

// checkSelect is the value the check-then-insert select shows for a mode.
func checkSelect(mode room.LabMode) string {
	if mode == room.LabCheckThenInsert || mode == room.LabCheckThenInsertConstrained {
		return mode
	}
	return room.LabCorrect
}

// TestLabScreenshots photographs the lab and a lesson, at laptop and
// phone width, after a short session that made several mistakes. The
// pictures go to $PAYTWICE_SCREENSHOTS when set, else to a temporary
// directory (the test then only checks that they render).
func TestLabScreenshots(t *testing.T) {
	picturesOnly(t) // before taking a browser's turn
	browserSideBySide(t)
	dir := os.Getenv("PAYTWICE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := newRealClockEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveStill(t, ctx)

	// A session: a double-click without a key, a burst with the check
	// first, a retried 422, and an e-mail as the key, from other browsers.
	body := func(order string) string { return fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order) }
	someone := uuid.NewString() // another student's browser session
	other := func(key, order string) { env.pay(key, body(order), "Cookie", sessionCookie+"="+someone) }
	liveOpen(t, ctx, env.URL+"/")
	index, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Server.guidedLessons().start(context.Background(), "no-key", "presenter"); err != nil {
		t.Fatal(err)
	}
	setFaults(t, env, pay.ServerFaults{})
	other(uuid.NewString(), "A-1042")
	other(uuid.NewString(), "A-1042")
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert, CheckGapMS: 200}})
	env.burst(4, uuid.NewString(), body("B-3310"))
	env.putLab(room.LabSettings{})
	other("somchai.j@example.com", "A-2077")
	k := uuid.NewString()
	c := &labClient{base: env.URL, token: "screens", retries: 3, retryEvery4xx: true}
	c.pay(t, k, sim.PaymentRequest{OrderID: "A-5150", AmountSatang: 129900})
	c.pay(t, k, sim.PaymentRequest{OrderID: "A-5150", AmountSatang: 99900})
	if err := env.Server.lab.switches.apply(context.Background(), room.LabSettings{Server: room.LabServer{Mode: room.LabNoKey, CheckGapMS: 200}}, "presenter"); err != nil {
		t.Fatal(err)
	}
	setFaults(t, env, pay.ServerFaults{DelayMS: 800})

	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "double-click", liveClick("#pay"), liveClick("#pay"))
	liveWait(t, ctx, "two answers", waitUntilBound, answered+` === 2`)
	liveWait(t, ctx, "the lab's numbers", waitUntilBound, labNumber(1)+` === "2"`)

	save := func(name string, png []byte) {
		t.Helper()
		if len(png) < 1000 {
			t.Fatalf("%s: screenshot of %d bytes", name, len(png))
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d KB)", filepath.Join(dir, name), len(png)/1024)
	}
	shot := func(ctx context.Context, name string, full bool) {
		t.Helper()
		var png []byte
		var err error
		if full {
			png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		} else {
			png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		}
		if err != nil {
			t.Fatal(err)
		}
		save(name, png)
	}
	save("lessons-index-desktop.png", index)
	shot(ctx, "lesson-desktop.png", false)
	liveDo(t, ctx, "scroll to the lab", chromedp.Evaluate[chromedp.Void](`document.getElementById("lab").scrollIntoView()`))
	shot(ctx, "lab-desktop.png", false)
	shot(ctx, "checkout-lab-full.png", true)
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(".panel-timeline")))
	if err != nil {
		t.Fatal(err)
	}
	save("lab-timeline.png", png)

	phone := liveTab(t, ctx, false)
	liveStill(t, phone)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, phone, env.URL+"/")
	shot(phone, "lesson-phone.png", false)
	liveDo(t, phone, "scroll to the lab", chromedp.Evaluate[chromedp.Void](`document.getElementById("mistake-1").scrollIntoView()`))
	shot(phone, "lab-phone.png", false)
	liveDo(t, phone, "scroll to the personal-data card", chromedp.Evaluate[chromedp.Void](`document.getElementById("mistake-6").scrollIntoView()`))
	shot(phone, "lab-phone-6.png", false)

	board := liveTab(t, ctx, false)
	liveStill(t, board)
	liveDo(t, board, "projector size", chromedp.EmulateViewport(1920, 1080))
	liveOpen(t, board, env.URL+"/board")
	shot(board, "board-lesson.png", false)
}

// TestBrowserLabOtherMistakes drives the rest of the lab from the page:
// a retried 422 counted as wasted, an e-mail address as the key flagged in
// the key table, and a late retry after the time warp and the prune.
func TestBrowserLabOtherMistakes(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/?backoff_ms=5")

	t.Run("retrying every 4xx: the 422 is sent until the page gives up, and counted", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-retry-4xx", func(l room.LabSettings) bool { return l.Client.RetryEvery4xx })
		liveDo(t, ctx, "paying", chromedp.ScrollIntoView(chromedp.CSS("#pay")), liveClick("#pay"))
		liveWait(t, ctx, "paid", waitUntilBound, paidNow)
		liveDo(t, ctx, "paying again with another amount", chromedp.Clear(chromedp.CSS("#amount")),
			liveType("#amount", "1,350.00"), liveClick("#pay"))
		liveWait(t, ctx, "six 422s, five wasted", waitUntilBound,
			`document.querySelectorAll('#attempts li[data-status="422"]').length === 6 && document.querySelectorAll("#attempts li[data-wasted]").length === 5 && `+
				`document.getElementById("pay-status").textContent.includes("5 wasted")`)
		liveWait(t, ctx, "the lab's count", waitUntilBound, labNumber(4)+` === "5"`)
		labSwitch(t, ctx, env, "#lab-retry-4xx", func(l room.LabSettings) bool { return !l.Client.RetryEvery4xx })
		liveDo(t, ctx, "the same 422 with the switch off", liveClick("#pay"))
		liveWait(t, ctx, "one more 422, sent once", waitUntilBound, `document.querySelectorAll('#attempts li[data-status="422"]').length === 7`)
		if got := liveEval[int](t, ctx, `document.querySelectorAll("#attempts li[data-wasted]").length`); got != 5 {
			t.Fatalf("%d wasted attempts, want still 5", got)
		}
	})
	t.Run("an e-mail address as the key: accepted, flagged, and the next order collides", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-pii", func(l room.LabSettings) bool { return l.Client.PersonalDataKey })
		liveDo(t, ctx, "new order, paying", liveClick("#new-order"), liveClick("#pay"))
		liveWait(t, ctx, "paid under the e-mail address", waitUntilBound,
			paidNow+` && document.getElementById("key-full").textContent === "somchai.j@example.com"`)
		liveWait(t, ctx, "the flag in the key table and the lab's count", waitUntilBound,
			`[...document.querySelectorAll("#keys-body tr code")].some(c => c.title === "somchai.j@example.com" && c.parentElement.querySelector(".pii")) && `+labNumber(6)+` === "1"`)
		liveDo(t, ctx, "another order, paying", liveClick("#new-order"), liveClick("#pay"))
		liveWait(t, ctx, "the 422", waitUntilBound, `document.getElementById("pay-status").dataset.state === "mismatch"`)
		labSwitch(t, ctx, env, "#lab-pii", func(l room.LabSettings) bool { return !l.Client.PersonalDataKey })
	})
	t.Run("keys kept a minute: after the warp and the prune, the late retry pays again", func(t *testing.T) {
		labSwitch(t, ctx, env, "#lab-keyonly", func(l room.LabSettings) bool { return l.Server.Mode == room.LabKeyTableOnly })
		liveDo(t, ctx, "keeping keys a minute", chromedp.SetValue(chromedp.CSS("#lab-retention"), "60"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById("lab-retention").dispatchEvent(new Event("change", {bubbles: true}))`))
		liveWait(t, ctx, "saved", waitUntilBound, `document.getElementById("lab-status").textContent.includes("saved")`)
		before := env.charges()
		liveDo(t, ctx, "new order, paying", liveClick("#new-order"), liveClick("#pay"))
		liveWait(t, ctx, "paid", waitUntilBound, paidNow)
		liveDo(t, ctx, "warping and pruning", chromedp.ScrollIntoView(chromedp.CSS(`[data-lab-action="warp-prune"]`)),
			jsClick(`#mistake-7 [data-lab-action="warp-prune"]`))
		// The earlier subtests' keys go too: every done key is two minutes old.
		liveWait(t, ctx, "the keys pruned", waitUntilBound, `/[1-9]\d* key\(s\) older than 60 s pruned/.test(document.getElementById("lab-warp-result").textContent)`)
		liveDo(t, ctx, "the late retry", chromedp.ScrollIntoView(chromedp.CSS("#pay")), liveClick("#pay"))
		liveWait(t, ctx, "two created answers", waitUntilBound,
			`[...document.querySelectorAll('#attempts li[data-status="201"]')].filter(li => !/replayed/.test(li.textContent)).length === 2`)
		if n := env.charges(); n != before+2 {
			t.Fatalf("%d charges, want %d", n, before+2)
		}
		liveWait(t, ctx, "the lab's count", waitUntilBound, labNumber(7)+` === "1"`)
	})
	liveNoCSPViolations(t, ctx)
}
