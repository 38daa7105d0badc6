// Package browsertest finds and starts the headless Chromium that a
// package's browser tests share: web's page tests and the cluster's tests
// of the module's root. Starting a browser costs seconds on a busy
// machine, so a package starts one, on the first test that needs it, and
// each test opens a browser context of its own in it (its own cookies,
// storage and cache, as a fresh profile had). Poll is the tests' one way
// to wait for a page.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path finds the browser: $PAYTWICE_BROWSER, else Debian's Chromium; ""
// when there is none.
func Path() string {
	for _, p := range []string{os.Getenv("PAYTWICE_BROWSER"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	return ""
}

// Require returns the browser's path. Without a browser the test skips,
// except with CI=true, where it fails: CI must run it.
func Require(t testing.TB) string {
	t.Helper()
	path := Path()
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("browser tests must run in CI, but no browser was found (looked at $PAYTWICE_BROWSER and /usr/bin/chromium)")
		}
		t.Skip("no browser found; install chromium or set PAYTWICE_BROWSER (in CI this fails)")
	}
	return path
}

// Shared is the one browser of a package's tests. Its zero value is ready
// to use; the package's TestMain calls Stop.
type Shared struct {
	once sync.Once
	ctx  context.Context // the browser's first tab, which stays blank
	err  error
	stop func()
}

// Start starts the browser at path once, with extra options after the
// headless ones; later calls return the same browser, or the same error.
func (s *Shared) Start(path string, extra ...chromedp.ExecAllocatorOption) (context.Context, error) {
	s.once.Do(func() {
		profile, err := os.MkdirTemp("", "paytwice-chromium-")
		if err != nil {
			s.err = err
			return
		}
		opts := append([]chromedp.ExecAllocatorOption{
			chromedp.ExecPath(path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(profile),
		}, extra...)
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelBrowser := chromedp.NewContext(alloc)
		s.stop = func() {
			cancelBrowser()
			cancelAlloc()
			_ = os.RemoveAll(profile) // the browser has exited; a leftover file is harmless
		}
		// Start the browser with no deadline: one on its first run would
		// bound the browser's life.
		if err := chromedp.Do(ctx); err != nil {
			s.err = fmt.Errorf("starting %s: %w", path, err)
			return
		}
		s.ctx = ctx
	})
	return s.ctx, s.err
}

// Stop ends the browser, if a test started it.
func (s *Shared) Stop() {
	if s.stop != nil {
		s.stop()
	}
}

// Poll waits until the JavaScript condition cond is true in the page the
// tab shows, asking it every interval, for at most timeout.
//
// A chromedp poll does not outlive its document: one that began just as
// the tab navigated (a link followed, a reload, a page that answers a
// reset by loading anew) was sent to the old document's context, which
// Chrome no longer has, and fails at once. The condition is about the
// page the tab shows, so Poll asks it again there, within the same time.
func Poll(ctx context.Context, cond string, interval, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond,
			chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(interval)))
		if err == nil || !documentReplaced(err) || ctx.Err() != nil || time.Until(deadline) < 2*interval {
			return err
		}
	}
}

// documentReplaced reports whether a script failed because the document
// it ran in was replaced by a navigation, not because of the script.
func documentReplaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed") ||
		strings.Contains(msg, "Inspected target navigated or closed (-32000)")
}
