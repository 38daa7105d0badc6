package web

import (
	"context"
	"fmt"
	"os"
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
// and critical violations.
func axeRun(t *testing.T, ctx context.Context, src string) []axeViolation {
	t.Helper()
	liveDo(t, ctx, "loading axe-core", chromedp.Evaluate[chromedp.Void](src))
	return liveEval[[]axeViolation](t, ctx, `axe.run(document, {resultTypes: ["violations"]}).then(r =>
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => ({
			ID: v.id, Impact: v.impact, Help: v.help, Targets: v.nodes.map(n => n.target.join(" ")).slice(0, 5)})))`)
}

// TestBrowserAxe runs axe-core on the pages a class uses: the checkout on a
// phone (outside a chapter, with the lab, and during one), a chapter's own
// page, the board on a projector during a chapter and outside one, and
// the other pages. None has a serious or critical violation.
func TestBrowserAxe(t *testing.T) {
	browserSideBySide(t)
	src, err := os.ReadFile(axeSource)
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1920, 1080)
	liveStill(t, ctx)
	phone := liveTab(t, ctx, true)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	// Some traffic, so that every table and list has rows.
	for i := range 6 {
		env.pay(fmt.Sprintf("axe-%d", i), fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, 3000+i))
	}
	check := func(ctx context.Context, where, path string, live bool) {
		t.Helper()
		if live {
			liveOpen(t, ctx, env.URL+path)
		} else {
			liveDo(t, ctx, "opening "+path, chromedp.Navigate(env.URL+path))
		}
		for _, v := range axeRun(t, ctx, string(src)) {
			t.Errorf("%s (%s): %s %s: %s, at %q", where, path, v.Impact, v.ID, v.Help, v.Targets)
		}
	}
	check(phone, "the checkout on a phone", "/", true)
	liveDo(t, phone, "opening the lab", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => d.open = true)`))
	for _, v := range axeRun(t, phone, string(src)) {
		t.Errorf("the checkout on a phone, every fold open: %s %s: %s, at %q", v.Impact, v.ID, v.Help, v.Targets)
	}
	check(ctx, "the board outside a chapter", "/board", true)
	check(phone, "a chapter's page on a phone", "/?lesson=check-then-insert", true)
	if err := env.Server.guidedLessons().start(context.Background(), "no-key", "test"); err != nil {
		t.Fatal(err)
	}
	env.pay("axe-nokey-1", `{"order_id":"A-4000","amount_satang":100}`)
	env.pay("axe-nokey-2", `{"order_id":"A-4000","amount_satang":100}`)
	check(phone, "the checkout on a phone during a chapter", "/", true)
	check(ctx, "the board during a chapter", "/board", true)
	boardViewport(t, ctx, 1280, 720)
	for _, v := range axeRun(t, ctx, string(src)) {
		t.Errorf("the board during a chapter at 1280x720: %s %s: %s, at %q", v.Impact, v.ID, v.Help, v.Targets)
	}
	for _, path := range []string{"/backoff", "/herd", "/problems", "/problems/request-in-progress", "/clients", "/join"} {
		check(ctx, "a page", path, false)
	}
}
