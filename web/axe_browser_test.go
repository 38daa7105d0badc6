package web

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
)

// axeSource is axe-core, the accessibility checker, vendored as test
// data (testdata/axe-core-4.14.1/README.md says where it comes from).
const axeSource = "testdata/axe-core-4.14.1/axe.min.js"

// axeViolation is one rule axe-core finds broken, with the elements.
type axeViolation struct {
	ID, Impact, Help string
	Targets          []string
}

// axeRun runs axe-core on the page open in ctx and returns the serious
// and critical violations. axe-core is 650 KB of script, 0.2 to 2.8 s to
// evaluate on a loaded machine, so a document that already has it (a
// check run again after folds opened or the viewport changed) keeps it.
func axeRun(t *testing.T, ctx context.Context, src string) []axeViolation {
	t.Helper()
	if !liveEval[bool](t, ctx, `typeof axe !== "undefined"`) {
		liveDo(t, ctx, "loading axe-core", chromedp.Evaluate[chromedp.Void](src))
	}
	return liveEval[[]axeViolation](t, ctx, `axe.run(document, {resultTypes: ["violations"]}).then(r =>
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => ({
			ID: v.id, Impact: v.impact, Help: v.help, Targets: v.nodes.map(n => n.target.join(" ")).slice(0, 5)})))`)
}

// axePages is a server with some traffic, so that every table and list
// has rows, and a check that opens a page and runs axe-core on it: a
// serious or critical violation fails the test. The pages a class uses
// are checked in three tests (the phone's, the board's and the other
// pages) so that they run beside each other: in one test they took 210 s
// at a load of 37, alone at the end of a quick run.
func axePages(t *testing.T) (*testEnv, func(ctx context.Context, where, path string, live bool)) {
	t.Helper()
	src, err := os.ReadFile(axeSource)
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t, Config{})
	for i := range 6 {
		env.pay(fmt.Sprintf("axe-%d", i), fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, 3000+i))
	}
	check := func(ctx context.Context, where, path string, live bool) {
		t.Helper()
		if path != "" {
			if live {
				liveOpen(t, ctx, env.URL+path)
			} else {
				liveDo(t, ctx, "opening "+path, chromedp.Navigate(env.URL+path))
			}
		}
		for _, v := range axeRun(t, ctx, string(src)) {
			t.Errorf("%s (%s): %s %s: %s, at %q", where, path, v.Impact, v.ID, v.Help, v.Targets)
		}
	}
	return env, check
}

// axeFullStates reports whether t checks the page states only the full
// run (fullRun) checks. A quick run checks one state of each page kind:
// axe-core's load and run are Chromium's processor, 30 to 37 s a test
// over thirteen states, the longest turns of the quick run's browser
// phase. In a quick run it says which states it leaves and how to check
// them.
func axeFullStates(t *testing.T, left string) bool {
	t.Helper()
	if fullRun() {
		return true
	}
	t.Logf("the quick run leaves out %s: PAYTWICE_TEST_FULL=1 go test -run %s ./web checks them", left, t.Name())
	return false
}

// axeChapter starts the no-key chapter and pays its order twice, so that
// the pages show a chapter with its outcomes.
func axeChapter(t *testing.T, env *testEnv) {
	t.Helper()
	if err := env.Server.guidedLessons().start(context.Background(), "no-key", "test"); err != nil {
		t.Fatal(err)
	}
	env.pay("axe-nokey-1", `{"order_id":"A-4000","amount_satang":100}`)
	env.pay("axe-nokey-2", `{"order_id":"A-4000","amount_satang":100}`)
}

// TestBrowserAxePhone runs axe-core on the checkout on a phone with every
// fold (the lab's) open; the full run also checks it with the folds
// closed, a chapter's own page, and the checkout during a chapter.
func TestBrowserAxePhone(t *testing.T) {
	browserSideBySide(t)
	env, check := axePages(t)
	phone := liveBrowser(t, 390, 844)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	full := axeFullStates(t, "the checkout with its folds closed, a chapter's page and the checkout during a chapter")
	if full {
		check(phone, "the checkout on a phone", "/", true)
	} else {
		liveOpen(t, phone, env.URL+"/")
	}
	liveDo(t, phone, "opening the lab", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => d.open = true)`))
	check(phone, "the checkout on a phone, every fold open", "", true)
	if !full {
		return
	}
	check(phone, "a chapter's page on a phone", "/?lesson=check-then-insert", true)
	axeChapter(t, env)
	check(phone, "the checkout on a phone during a chapter", "/", true)
}

// TestBrowserAxeBoard runs axe-core on the board on a projector during a
// chapter at 1920x1080; the full run also checks it outside a chapter
// and during one at 1280x720.
func TestBrowserAxeBoard(t *testing.T) {
	browserSideBySide(t)
	env, check := axePages(t)
	ctx := liveBrowser(t, 1920, 1080)
	liveStill(t, ctx)
	full := axeFullStates(t, "the board outside a chapter and at 1280x720")
	if full {
		check(ctx, "the board outside a chapter", "/board", true)
	}
	axeChapter(t, env)
	check(ctx, "the board during a chapter", "/board", true)
	if !full {
		return
	}
	boardViewport(t, ctx, 1280, 720)
	check(ctx, "the board during a chapter at 1280x720", "", true)
}

// axeQuickPages are the other pages a quick run checks, one of each kind:
// a simulation, a problem page and a form; axeFullPages are the rest,
// which the full run checks too.
var (
	axeQuickPages = []string{"/backoff", "/problems/request-in-progress", "/join"}
	axeFullPages  = []string{"/herd", "/problems", "/clients"}
)

// TestBrowserAxePages runs axe-core on the other pages: the backoff and
// herd simulations, the problem pages, the clients' page and the join page.
func TestBrowserAxePages(t *testing.T) {
	browserSideBySide(t)
	_, check := axePages(t)
	ctx := liveBrowser(t, 1920, 1080)
	liveStill(t, ctx)
	paths := axeQuickPages
	if axeFullStates(t, fmt.Sprint(axeFullPages)) {
		paths = slices.Concat(axeQuickPages, axeFullPages)
	}
	for _, path := range paths {
		check(ctx, "a page", path, false)
	}
}
