package web

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// TestRelayScreenshots photographs the board of one of three servers on
// one PostgreSQL database at projector sizes, and the checkout on a
// phone, after requests on all three (a double-click among them that
// lands on two servers), once with short server names and once with long
// host:port ones. The pictures go to $PAYTWICE_SCREENSHOTS when set, to
// a temporary directory otherwise; the test checks that every page names
// every server.
//
// It runs alone, not beside the other browser tests: once, on a machine
// loaded far past its cores, a payment on another server beside the
// response-lost lesson ended in a dropped connection. It takes pictures,
// so a quick run leaves it out (picturesOnly); the full run
// (PAYTWICE_TEST_FULL=1) and PAYTWICE_SCREENSHOTS take both sets of names.
func TestRelayScreenshots(t *testing.T) {
	picturesOnly(t)
	dir := screenshotDir(t)
	for _, tc := range []struct {
		name    string
		servers []string
	}{
		{"short", []string{"s1", "s2", "s3"}},
		{"long", []string{"192.168.100.200:8081", "paytwice-classroom-eu-west.internal:8443", "10.0.0.3:8083"}},
	} {
		t.Run(tc.name+" names", func(t *testing.T) {
			envs, _ := classServers(t, tc.servers...)
			a, b, c := envs[0], envs[1], envs[2]
			ctx := liveBrowser(t, 1280, 720)
			liveStill(t, ctx)
			liveDo(t, ctx, "projector size", chromedp.EmulateViewport(1280, 720))
			liveOpen(t, ctx, b.URL+"/board")

			body := func(order string, amount int) string {
				return fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, order, amount)
			}
			// A student's payment. The lesson's fault (response lost) is the
			// room's, on every server: its connection then closes with no
			// answer, which Go's client resends by itself only when it had
			// reused a kept-alive connection, so whether an error reaches
			// here depends on timing. Under that fault an error is the
			// lesson's point; otherwise it fails the test.
			student := func(env *testEnv, key, order string, amount int) {
				t.Helper()
				r, err := env.tryPay(key, body(order, amount), "Cookie", sessionCookie+"="+uuid.NewString())
				switch {
				case err != nil && !env.Server.room.Load().Faults.Server.ResponseLost:
					t.Fatalf("pay: %v", err)
				case err == nil && r.Status >= 500:
					t.Fatalf("pay: %d %s", r.Status, r.Body)
				}
			}
			// Requests on the two other servers: a double-click among them,
			// its first click held on one server and its second on another.
			traffic := func(orders ...string) {
				t.Helper()
				student(a, uuid.NewString(), orders[0], 45000)
				student(c, uuid.NewString(), orders[1], 12900)
				key := uuid.NewString()
				release := a.holdGateway()
				first := make(chan struct{})
				go func() {
					defer close(first)
					_, _ = a.tryPay(key, body(orders[2], 9900))
				}()
				waitRow(t, c, "the first click's claim on the other server", claimedOn(key, tc.servers[0]))
				if r := c.pay(key, body(orders[2], 9900)); r.Status != http.StatusConflict {
					t.Fatalf("second click: %d %s", r.Status, r.Body)
				}
				release()
				<-first
				c.pay(key, body(orders[2], 9900)) // the retry, replayed
				for _, name := range []string{tc.servers[0], tc.servers[2]} {
					liveWait(t, ctx, name+" on the board", waitUntilBound,
						fmt.Sprintf(`[...document.querySelectorAll("#timeline .srv")].some(e => e.textContent.includes(%q))`, name))
				}
			}
			// Without a lesson the board shows the timeline below the
			// joining card and the switches: the pictures scroll to it.
			shoot := func(layout string, scroll bool) {
				t.Helper()
				for _, size := range []struct{ w, h int64 }{{1280, 720}, {1920, 1080}} {
					liveDo(t, ctx, "projector size", chromedp.EmulateViewport(size.w, size.h))
					if scroll {
						liveDo(t, ctx, "scroll to the timeline", chromedp.Evaluate[chromedp.Void](`document.querySelector(".panel-timeline").scrollIntoView()`))
					}
					png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
					if err != nil {
						t.Fatal(err)
					}
					writePNG(t, filepath.Join(dir, fmt.Sprintf("servers-%s-%s-%dx%d.png", tc.name, layout, size.w, size.h)), png)
				}
			}
			traffic("A-2201", "A-2202", "A-3307")
			shoot("board", true)

			// A lesson on the board's server: the timeline takes the left
			// of the screen. Its reset clears every server's timeline.
			req, _ := http.NewRequest(http.MethodPut, b.URL+"/api/lessons/current", strings.NewReader(`{"slug":"response-lost"}`))
			req.Header.Set("Content-Type", "application/json")
			if r, err := do(req); err != nil || r.Status != http.StatusOK {
				t.Fatalf("start a lesson: %v %d %s", err, r.Status, r.Body)
			}
			liveWait(t, ctx, "the lesson on the board", waitUntilBound, `!!document.querySelector(".lesson-caption")`)
			traffic("A-5501", "A-5502", "A-5503")
			liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
			shoot("lesson", false)

			phone := liveTab(t, ctx, true)
			liveStill(t, phone)
			liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
			liveOpen(t, phone, c.URL+"/")
			liveDo(t, phone, "scroll to the timeline", chromedp.Evaluate[chromedp.Void](`document.getElementById("timeline").scrollIntoView()`))
			png, err := chromedp.Run(phone, chromedp.CaptureScreenshot())
			if err != nil {
				t.Fatal(err)
			}
			writePNG(t, filepath.Join(dir, "servers-"+tc.name+"-phone.png"), png)
			// On a phone a long name must not widen the page.
			if w := liveEval[int](t, phone, `document.documentElement.scrollWidth`); w > 390 {
				t.Errorf("the phone page is %d px wide", w)
			}
			for _, name := range tc.servers {
				if !liveEval[bool](t, phone, fmt.Sprintf(`[...document.querySelectorAll("#timeline .srv")].some(e => e.title.endsWith(%q))`, name)) {
					t.Errorf("the phone's timeline does not name %s", name)
				}
			}
		})
	}
}
