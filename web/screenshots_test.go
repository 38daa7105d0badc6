package web

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/sim"
)

// TestScreenshots drives a small classroom session (a plain payment, a
// double-click under delay, a lost response, a reused key, and a client
// that makes a new key per click) and photographs the checkout at desktop
// and phone width and the board at projector size. The pictures go to
// $PAYTWICE_SCREENSHOTS when set (the README uses docs/screenshots):
//
//	PAYTWICE_SCREENSHOTS=$PWD/docs/screenshots go test ./web -run TestScreenshots
//
// and to a temporary directory otherwise, so the test still checks that
// the pages render in a real browser.
func TestScreenshots(t *testing.T) {
	picturesOnly(t) // before taking a browser's turn
	browserSideBySide(t)
	dir := screenshotDir(t)
	env := newRealClockEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 1000)
	liveStill(t, ctx)
	liveOpen(t, ctx, env.URL+"/")

	// Other students' payments, over the API with their own sessions.
	other := func(session, key, order string, amount int) {
		t.Helper()
		env.pay(key, fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, order, amount), "Cookie", sessionCookie+"="+session)
	}
	setFaults := func(t *testing.T, env *testEnv, f pay.ServerFaults) {
		t.Helper()
		if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{Server: f}, "presenter"); err != nil {
			t.Fatal(err)
		}
	}
	s1, s2 := uuid.NewString(), uuid.NewString()
	other(s1, uuid.NewString(), "A-2201", 45000)
	// A client with no key discipline: two keys, one order, two charges.
	setFaults(t, env, pay.ServerFaults{DelayMS: 300})
	done := make(chan struct{})
	go func() {
		defer close(done)
		other(s2, uuid.NewString(), "A-3307", 9900)
	}()
	other(s2, uuid.NewString(), "A-3307", 9900)
	<-done

	// This browser: a double-click under an 800 ms delay.
	setFaults(t, env, pay.ServerFaults{DelayMS: 800})
	liveDo(t, ctx, "double-click", liveClick("#pay"), liveClick("#pay"))
	liveWait(t, ctx, "paid", waitUntilBound, paidNow+` && document.querySelectorAll("#attempts li[data-status]").length === 2`)

	// The same key with another amount.
	setFaults(t, env, pay.ServerFaults{})
	liveDo(t, ctx, "change the amount and pay",
		chromedp.Clear(chromedp.CSS("#amount")), liveType("#amount", "1,350.00"), liveClick("#pay"))
	liveWait(t, ctx, "422", waitUntilBound, `document.getElementById("pay-status").dataset.state === "mismatch"`)

	// A lost response: no answer, a wait, the retry's replayed 201.
	setFaults(t, env, pay.ServerFaults{ResponseLost: true})
	liveDo(t, ctx, "new order, retry on, pay", liveClick("#new-order"), liveClick("#opt-retry"), liveClick("#pay"))
	liveWait(t, ctx, "paid again, after a lost response", waitUntilBound, paidNow+` && `+attemptStatuses+` === "network 201"`)
	setFaults(t, env, pay.ServerFaults{DelayMS: 800, ResponseLost: true})
	liveWait(t, ctx, "every charge on the page", waitUntilBound, chargeRows+` === 5`)

	save := func(name string, png []byte) {
		t.Helper()
		writePNG(t, filepath.Join(dir, name), png)
	}

	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	save("checkout-desktop.png", png)

	phone := liveTab(t, ctx, false)
	liveStill(t, phone)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, phone, env.URL+"/")
	// The mistake on the phone: a new key per click, a double-click, and
	// the card says in red that the order was charged twice.
	setFaults(t, env, pay.ServerFaults{DelayMS: 300})
	liveDo(t, phone, "new order, the mistake on, retries off, double-click", liveClick("#new-order"), liveClick("#opt-newkey"),
		liveClick("#opt-retry"), liveClick("#pay"), liveClick("#pay"))
	liveWait(t, phone, "charged twice on the card", waitUntilBound, `document.getElementById("pay-status").dataset.state === "twice"`)
	setFaults(t, env, pay.ServerFaults{DelayMS: 800, ResponseLost: true})
	liveDo(t, phone, "the mistake off again", liveClick("#opt-newkey"))
	liveWait(t, phone, "every charge on the phone", waitUntilBound, chargeRows+` === 7`)
	liveDo(t, phone, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	png, err = chromedp.Run(phone, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	save("checkout-phone.png", png)
	liveDo(t, phone, "scroll to the timeline", chromedp.Evaluate[chromedp.Void](`document.getElementById("live").scrollIntoView()`))
	png, err = chromedp.Run(phone, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	save("checkout-phone-live.png", png)

	board := liveTab(t, ctx, false)
	liveStill(t, board)
	liveDo(t, board, "projector size", chromedp.EmulateViewport(1920, 1080))
	liveOpen(t, board, env.URL+"/board")
	png, err = chromedp.Run(board, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	save("board.png", png)

	if res := env.get("/board"); res.Status != http.StatusOK {
		t.Fatalf("GET /board: %d", res.Status)
	}
}

// screenshotDir is where a test's pictures go: $PAYTWICE_SCREENSHOTS when
// set, a temporary directory otherwise (the test still checks that the
// pages render in a real browser).
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PAYTWICE_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writePNG saves a screenshot, after checking that it is one.
func writePNG(t *testing.T, path string, png []byte) {
	t.Helper()
	if len(png) < 1000 {
		t.Fatalf("%s: screenshot of %d bytes", path, len(png))
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d KB)", path, len(png)/1024)
}

// newRealClockEnv is newTestEnv with the real clock, so that the
// pictures show real times.
func newRealClockEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	clock := sim.NewClock(nil)
	db := MustOpenDB(t, clock.Now)
	if cfg.Logger == nil {
		cfg.Logger = log.New(io.Discard, "", 0)
	}
	if cfg.Ledger == nil {
		cfg.Ledger = db
	}
	srv := NewServer(cfg, db, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return &testEnv{t: t, URL: hs.URL, DB: db, Server: srv, HTTP: hs}
}

// liveStill asks the pages for reduced motion, so a picture never catches
// a row halfway through its highlight.
func liveStill(t *testing.T, ctx context.Context) {
	t.Helper()
	liveDo(t, ctx, "reduced motion", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}},
		})
		return err
	}))
}
