package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"paytwice/store/postgres/pgtest"
	"paytwice/web"
	"paytwice/web/browsertest"
)

// TestBrowserDoubleClickLandsOnTwoServers opens the checkout through the
// front door of "paytwice cluster -servers 3", holds every payment with
// the delay fault and double-clicks Pay in Chromium. The two POSTs are
// handed to two different servers, which share nothing but the database:
// the order must still be charged exactly once. The board, opened through
// the same door, must show the door's address, not a server's.
func TestBrowserDoubleClickLandsOnTwoServers(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCluster(ctx, t, binary(t), dbURL, "-servers", "3")
	// One switch for the room, turned on through the front door.
	c.setFaults(ctx, t, `{"server":{"delay_ms":800}}`)
	browser := clusterBrowser(ctx, t)

	// Which requests were the page's payments, and which server answered
	// each request: two streams of events, joined once they are over.
	watch, stopWatching := context.WithCancel(browser)
	sent := chromedp.Events(watch, network.RequestWillBeSent)
	received := chromedp.Events(watch, network.ResponseReceived)
	var (
		mu       sync.Mutex
		payments []network.RequestID // in the order they were sent
		servedBy = map[network.RequestID]string{}
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		for ev, err := range sent {
			if err != nil {
				return
			}
			if ev.Request.Method == http.MethodPost && strings.HasSuffix(ev.Request.URL, "/v1/payments") {
				mu.Lock()
				payments = append(payments, ev.RequestID)
				mu.Unlock()
			}
		}
	})
	wg.Go(func() {
		for ev, err := range received {
			if err != nil {
				return
			}
			for name, v := range ev.Response.Headers {
				if s, ok := v.(string); ok && strings.EqualFold(name, web.ServerHeader) {
					mu.Lock()
					servedBy[ev.RequestID] = s
					mu.Unlock()
				}
			}
		}
	})

	browse(t, browser, "opening the checkout through the front door", chromedp.Navigate(c.url+"/"))
	waitFor(t, browser, "the event stream", `(document.getElementById("stream-state")||{}).textContent === "live"`)
	order, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.getElementById("order-id").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	browse(t, browser, "double-clicking Pay", chromedp.Click(chromedp.CSS("#pay")), chromedp.Click(chromedp.CSS("#pay")))
	waitFor(t, browser, "two attempts answered and the order paid",
		`document.getElementById("pay-status").dataset.state === "paid" && document.querySelectorAll("#attempts li[data-status]").length === 2`)
	saveScreenshot(t, browser, "cluster-checkout.png")
	stopWatching()
	wg.Wait()

	t.Run("the two POSTs were answered by two servers", func(t *testing.T) {
		var answeredBy []string
		for _, id := range payments {
			answeredBy = append(answeredBy, servedBy[id])
		}
		if len(answeredBy) != 2 || answeredBy[0] == "" || answeredBy[1] == "" || answeredBy[0] == answeredBy[1] {
			t.Fatalf("the payments were answered by %q; want two different servers", answeredBy)
		}
		t.Logf("the two clicks were answered by %s and %s", answeredBy[0], answeredBy[1])
	})
	t.Run("the database holds one charge for the order", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM charges WHERE order_id = $1`, order).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%d charges for order %s, want 1", n, order)
		}
	})
	t.Run("the board shows the front door's address", func(t *testing.T) {
		browse(t, browser, "opening the board", chromedp.Navigate(c.url+"/board"))
		text, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := strings.Cut(strings.TrimPrefix(c.url, "http://"), ":")
		if !strings.Contains(text, c.url) || !strings.Contains(text, "paytwice cluster -addr :"+port) {
			t.Errorf("the board does not show the front door %s, or how to open it to a room", c.url)
		}
		for name, u := range c.servers {
			if strings.Contains(text, u) {
				t.Errorf("the board shows server %s's own address %s", name, u)
			}
		}
		saveScreenshot(t, browser, "cluster-board.png")
	})
}

// sharedBrowser is the one headless Chromium the package's browser tests
// share (web/browsertest); TestMain stops it.
var sharedBrowser browsertest.Shared

// clusterBrowser opens a browser context of the test's own in the
// package's headless Chromium (the one at $PAYTWICE_BROWSER, else
// Debian's), bounded by ctx and closed when the test ends. Without a
// browser the test skips, except with CI=true, where it fails: CI must
// run it.
func clusterBrowser(ctx context.Context, t *testing.T) context.Context {
	t.Helper()
	path := browsertest.Require(t)
	shared, err := sharedBrowser.Start(path, chromedp.WindowSize(1366, 900))
	if err != nil {
		t.Fatal(err)
	}
	browser, cancelBrowser := chromedp.NewContext(shared, chromedp.WithNewBrowserContext())
	t.Cleanup(cancelBrowser)
	// Open the test's first tab with no deadline, then bound the test by
	// ctx.
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("opening a browser context in %s: %v", path, err)
	}
	bounded, cancel := context.WithCancel(browser)
	stop := context.AfterFunc(ctx, cancel)
	t.Cleanup(func() { stop(); cancel() })
	return bounded
}

// browse runs steps in the browser, failing the test with what.
func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a condition in the page, for at most a minute: what it
// waits for takes milliseconds on an idle machine, seconds on a loaded
// one under -race; the bound only keeps a broken test from hanging.
func waitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	if err := browsertest.Poll(ctx, cond, 25*time.Millisecond, time.Minute); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("pay-status")||{}).textContent`))
		t.Fatalf("waiting for %s: %v\npage: %s", what, err, state)
	}
}

// saveScreenshot photographs the page into $PAYTWICE_SCREENSHOTS when it
// is set.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("PAYTWICE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()) // what the window shows
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
