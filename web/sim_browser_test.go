package web

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"paytwice/web/browsertest"
)

// simBrowser opens a window for one test in the package's browser
// (liveBrowser). Without a browser the test fails in CI (CI=true) and is
// skipped elsewhere. Every page it opens records Content-Security-Policy
// violations in window.__csp, so a test can check that the page really
// needs no inline script or style.
func simBrowser(t *testing.T, width, height int) context.Context {
	t.Helper()
	return liveBrowser(t, width, height)
}

func simRun[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func simDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// simWaitFor polls a JavaScript condition until it holds.
func simWaitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	if err := browsertest.Poll(ctx, cond, 25*time.Millisecond, 10*time.Second); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText.slice(0, 1500) : document.documentElement.outerHTML.slice(0, 1500)`))
		t.Fatalf("waiting until %s: %v\nthe page shows:\n%s", what, err, text)
	}
}

func TestBackoffPageInABrowser(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := simBrowser(t, 1366, 900)

	simDo(t, ctx, "opening /backoff",
		chromedp.Navigate(env.URL+"/backoff"),
		chromedp.WaitVisible("table.schedule"),
	)
	// Wait for htmx to be ready, then leave a mark that a reload would wipe.
	simWaitFor(t, ctx, "htmx has loaded", `typeof htmx === "object" && htmx.config.responseHandling.length === 5`)
	simRun(t, ctx, "marking the page", chromedp.Evaluate[bool](`window.__sameDocument = true`))
	if got := simRun(t, ctx, "reading the worst case", chromedp.Text(".stat-value")); !strings.Contains(got, "15.5") {
		t.Fatalf("worst case %q, want the article's 15.5 s", got)
	}

	t.Run("typing a new cap updates the table without a reload", func(t *testing.T) {
		simDo(t, ctx, "typing cap 4",
			simType("#f-cap", "4"),
		)
		// Ceilings 0.5, 1, 2, 4, 4: worst 11.5 s.
		simWaitFor(t, ctx, "the worst case shows 11.5 s",
			`document.querySelector(".stat-value")?.textContent.includes("11.5")`)
		if !simRun(t, ctx, "checking the mark", chromedp.Evaluate[bool](`window.__sameDocument === true`)) {
			t.Fatal("the page was reloaded")
		}
		last := simRun(t, ctx, "reading the last row", chromedp.Text("table.schedule tbody tr:last-child"))
		if !strings.Contains(last, "4 s") || !strings.Contains(last, "cap") {
			t.Errorf("last row %q, want a 4 s ceiling at the cap", last)
		}
		loc := simRun(t, ctx, "reading the address", chromedp.Location())
		if !strings.Contains(loc, "/backoff?") || !strings.Contains(loc, "cap=4") {
			t.Errorf("address %q does not follow the form", loc)
		}
	})

	t.Run("a cap below the base shows a message next to the field", func(t *testing.T) {
		simDo(t, ctx, "typing cap 0.1",
			simType("#f-cap", "0.1"),
		)
		simWaitFor(t, ctx, "the cap message appears",
			`document.querySelector("#cap-error")?.textContent.includes("at least the base")`)
		// The last good results stay, marked as such.
		if got := simRun(t, ctx, "reading the note", chromedp.Text("#backoff-kept")); !strings.Contains(got, "last settings that worked") {
			t.Errorf("note %q does not say the results are the last good ones", got)
		}
		if got := simRun(t, ctx, "reading the results", chromedp.Text("#backoff-results")); !strings.Contains(got, "WORST-CASE TOTAL WAIT") && !strings.Contains(got, "Worst-case total wait") {
			t.Errorf("results %q: the last good ones should stay", got)
		}
		simDo(t, ctx, "typing cap 8", simType("#f-cap", "8"))
		simWaitFor(t, ctx, "the message goes away and the example is back",
			`document.querySelector("#cap-error")?.textContent === "" && document.querySelector(".stat-value")?.textContent.includes("15.5")`)
	})

	t.Run("the page breaks no content security rule", func(t *testing.T) {
		if v := simRun(t, ctx, "reading violations", chromedp.Evaluate[[]string](`window.__csp`)); len(v) > 0 {
			t.Errorf("CSP violations: %v", v)
		}
	})
}

func TestHerdPageInABrowser(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := simBrowser(t, 1366, 900)
	simDo(t, ctx, "opening /herd",
		chromedp.Navigate(env.URL+"/herd?max=60&trials=3"),
		chromedp.WaitVisible("#herd-work"),
	)
	simWaitFor(t, ctx, "htmx has loaded", `typeof htmx === "object"`)
	simRun(t, ctx, "marking the page", chromedp.Evaluate[bool](`window.__sameDocument = true`))
	simDo(t, ctx, "asking for 40..80 clients",
		simType("#f-min", "40"),
		simType("#f-max", "80"),
		chromedp.Click("button[type=submit]"),
	)
	simWaitFor(t, ctx, "the table starts at 40 clients",
		`document.querySelector("table.herd tbody th")?.textContent.trim() === "40"`)
	if !simRun(t, ctx, "checking the mark", chromedp.Evaluate[bool](`window.__sameDocument === true`)) {
		t.Fatal("the page was reloaded")
	}
	if v := simRun(t, ctx, "reading violations", chromedp.Evaluate[[]string](`window.__csp`)); len(v) > 0 {
		t.Errorf("CSP violations: %v", v)
	}
}

// TestSimScreenshots saves full-page screenshots of /backoff and /herd at
// projector (1366) and phone (390) widths into $PAYTWICE_SCREENSHOTS, to be
// looked at by a person. It is skipped unless that variable is set.
func TestSimScreenshots(t *testing.T) {
	dir := os.Getenv("PAYTWICE_SCREENSHOTS")
	if dir == "" {
		t.Skip("set PAYTWICE_SCREENSHOTS to a directory to take screenshots")
	}
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	shots := []struct {
		name, path string
		width      int64
	}{
		{"backoff-desktop", "/backoff", 1366},
		{"backoff-phone", "/backoff", 390},
		{"backoff-error-phone", "/backoff?cap=0.1&retries=x", 390},
		{"backoff-none-desktop", "/backoff?strategy=none", 1366},
		{"backoff-decorrelated-desktop", "/backoff?strategy=decorrelated&retries=8", 1366},
		{"herd-desktop", "/herd", 1366},
		{"herd-phone", "/herd", 390},
		{"herd-linear-desktop", "/herd?scale=linear", 1366},
	}
	for _, s := range shots {
		ctx := simBrowser(t, int(s.width), 900)
		var opts []chromedp.EmulateViewportOption
		if s.width < 600 {
			opts = append(opts, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)
		}
		simDo(t, ctx, "opening "+s.path,
			chromedp.EmulateViewport(s.width, 900, opts...),
			chromedp.Navigate(env.URL+s.path),
			chromedp.WaitVisible("main"),
		)
		png := simRun(t, ctx, "screenshot", chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(dir, s.name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		// The same page one screen at a time, easier to look at than one
		// very long image.
		height := simRun(t, ctx, "measuring", chromedp.Evaluate[float64](`document.documentElement.scrollHeight`))
		for i, y := 0, 0.0; y < height && i < 8; i, y = i+1, y+800 {
			simRun(t, ctx, "scrolling", chromedp.Evaluate[bool](fmt.Sprintf(`window.scrollTo(0, %v); true`, y)))
			png := simRun(t, ctx, "screenshot", chromedp.CaptureScreenshot())
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.png", s.name, i+1)), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// simType replaces the value of an input by typing, as a user does: the
// value is emptied first (chromedp.Clear only resets the attribute, which no
// longer matches what the user typed before), then every key fires input.
func simType(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if err := chromedp.Do(ctx, chromedp.SetValue(sel, "")); err != nil {
			return err
		}
		return chromedp.Do(ctx, liveType(sel, text))
	})
}
