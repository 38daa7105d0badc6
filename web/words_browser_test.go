package web

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"paytwice/pay"
)

// The cards of the chapters whose words were once wrong, read on a phone
// and held against the server's books: each says what the server did, not
// what a request was answered or what a guess would make of it.

// phoneInChapter starts a chapter for the room and waits until the phone
// shows it with a fresh order.
func phoneInChapter(t *testing.T, env *testEnv, phone context.Context, slug string) {
	t.Helper()
	if err := env.Server.guidedLessons().start(context.Background(), slug, "presenter"); err != nil {
		t.Fatal(err)
	}
	liveWait(t, phone, "the phone on "+slug, waitUntilBound,
		fmt.Sprintf(`document.getElementById("lesson").dataset.slug === %q && document.querySelectorAll("#attempts li").length === 0 && document.getElementById("pay").getAttribute("aria-busy") === "false"`, slug))
}

// orderCharges is how many charges the server has for the phone's
// current order, in the phone's own scope.
func orderCharges(t *testing.T, phone context.Context) int {
	t.Helper()
	return liveEval[int](t, phone, `fetch("/v1/payments?order_id=" + encodeURIComponent(document.getElementById("order-id").textContent),
		{ headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" }, cache: "no-store" }).then(r => r.json()).then(b => b.charges.length)`)
}

// pauseHold is a server's wait (Server.payments.sleep) that, while armed,
// holds every wait until released and reports each one that starts; while
// not armed it waits as the server does.
type pauseHold struct {
	mu      sync.Mutex
	reached chan struct{}
	release chan struct{}
}

func (h *pauseHold) sleep(ctx context.Context, d time.Duration) error {
	h.mu.Lock()
	reached, release := h.reached, h.release
	h.mu.Unlock()
	if release == nil {
		return pay.Sleep(ctx, d)
	}
	reached <- struct{}{}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arm holds the waits that start from now on. reached has a message for
// each; release lets them all go and disarms the hold (twice is once).
func (h *pauseHold) arm() (reached <-chan struct{}, release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, rel := make(chan struct{}, 64), make(chan struct{})
	h.reached, h.release = r, rel
	var once sync.Once
	return r, func() {
		once.Do(func() {
			h.mu.Lock()
			h.reached, h.release = nil, nil
			h.mu.Unlock()
			close(rel)
		})
	}
}

func TestBrowserChapterCardsSayWhatTheBooksSay(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	phone := liveBrowser(t, 390, 844)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	// Chapter 8 holds its pause between the check and the insert; the
	// hook is in place before the page sends anything.
	pause := &pauseHold{}
	env.Server.payments.sleep = pause.sleep
	liveOpen(t, phone, env.URL+"/?backoff_ms=5")

	t.Run("chapter 11: the second order's 422 names the order id, from the answer, and the e-mail key", func(t *testing.T) {
		phoneInChapter(t, env, phone, "personal-data-key")
		liveDo(t, phone, "paying", liveClick("#pay"))
		liveWait(t, phone, "paid", waitUntilBound, paidNow)
		liveDo(t, phone, "new order, paying", liveClick("#new-order"), liveClick("#pay"))
		liveWait(t, phone, "the 422", waitUntilBound, statusState+` === "mismatch" && `+cardSettled)
		st := liveEval[string](t, phone, statusText)
		why := liveEval[string](t, phone, `document.getElementById("pay-explain").textContent`)
		if !strings.Contains(st, "the order id differs") || strings.Contains(st+why, "amount") {
			t.Errorf("the card does not say what the server said differs (the order id, not the amount): %q / %q", st, why)
		}
		if !strings.Contains(why, "e-mail address (somchai.j@example.com)") || !strings.Contains(why, "An earlier order was paid with it") {
			t.Errorf("the explanation does not say the key is the customer's e-mail: %q", why)
		}
		if got := liveEval[string](t, phone, cardAgrees); got != "ok" {
			t.Error(got)
		}
		if n := orderCharges(t, phone); n != 0 {
			t.Errorf("the refused order has %d charges", n)
		}
	})

	t.Run("chapter 6: the final card counts the six charges and never calls the same key safe", func(t *testing.T) {
		phoneInChapter(t, env, phone, "new-key-per-retry")
		liveDo(t, phone, "paying once", liveClick("#pay"))
		liveWait(t, phone, "the retries' end", waitUntilBound,
			`document.querySelectorAll('#attempts li[data-status="network"]').length === 6 && `+cardSettled+` && `+statusState+` !== "checking"`)
		if n := orderCharges(t, phone); n != 6 {
			t.Fatalf("the server has %d charges for the order, want 6 (every attempt under a new key)", n)
		}
		st := liveEval[string](t, phone, statusText)
		if !strings.Contains(st, "charged six times") || strings.Contains(st, "same key is safe") {
			t.Errorf("the final card: %q", st)
		}
		if got := liveEval[string](t, phone, cardAgrees); got != "ok" {
			t.Error(got)
		}
		if page := liveEval[string](t, phone, `document.getElementById("checkout").textContent`); strings.Contains(page, "same key is safe") {
			t.Errorf("the card says paying again with the same key is safe in the chapter whose mistake is a new key")
		}
	})

	t.Run("chapter 7: a burst's card counts charges, not answers", func(t *testing.T) {
		phoneInChapter(t, env, phone, "check-then-insert")
		liveDo(t, phone, "a burst", jsClick(`#lesson [data-lab-action="burst"]`))
		const result = `[...document.querySelectorAll("#lesson .lab-result")].map(r => r.textContent).join(" ")`
		liveWait(t, phone, "the burst's card", waitUntilBound, `/one key: charged/.test(`+result+`)`)
		text := liveEval[string](t, phone, result)
		m := regexp.MustCompile(`Order (B-\d+), one key: charged (once|twice|(\d+) times)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("the burst's card: %q", text)
		}
		said := map[string]int{"once": 1, "twice": 2}[m[2]]
		if m[3] != "" {
			said, _ = strconv.Atoi(m[3])
		}
		have := liveEval[int](t, phone, fmt.Sprintf(`fetch("/v1/payments?order_id=%s", { headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" }, cache: "no-store" }).then(r => r.json()).then(b => b.charges.length)`, m[1]))
		if said != have || have < 2 {
			t.Errorf("the card says %d charges for %s, the server has %d (the mistake charges a burst more than once): %q", said, m[1], have, text)
		}
	})

	t.Run("chapter 8 on SQLite: two servers inside the process charge a double-click twice, and the card counts both", func(t *testing.T) {
		phoneInChapter(t, env, phone, "lock-in-memory")
		if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"servers": 2}}); r.Status != http.StatusOK {
			t.Fatalf("two servers: %d %s", r.Status, r.Body)
		}
		if got := env.Server.lab.Settings().Server.Servers; got != 2 {
			t.Fatalf("the room's lab runs %d servers after the patch", got)
		}
		if page := env.get("/lab/live?s=0"); !strings.Contains(string(page.Body), "two servers inside this process") {
			t.Fatalf("the lab does not say it runs two servers inside this process: %.300s", page.Body)
		}
		// A double-click: both clicks in one turn of the page's script, so
		// both requests are sent before either is answered. Each is held at
		// the pause after its look-up until the other has looked its key up
		// too: the second cannot find the first one's row, however slowly
		// the machine runs either of them.
		waitsBefore := env.Server.lab.locks.waits.Load()
		reached, release := pause.arm()
		defer release()
		liveDo(t, phone, "double-click", chromedp.Evaluate[chromedp.Void](`(b => { b.click(); b.click(); })(document.getElementById("pay"))`))
		waitUntil(t, "both clicks at the pause after the look-up, or one waiting for the other's lock", func() bool {
			return len(reached) == 2 || env.Server.lab.locks.waits.Load() > waitsBefore
		})
		release()
		if n := env.Server.lab.locks.waits.Load() - waitsBefore; n != 0 {
			t.Fatalf("%d click(s) waited for the other's lock: the two servers inside the process share one lock table", n)
		}
		liveWait(t, phone, "charged twice on the card", time.Minute, statusState+` === "twice" && /charged twice/.test(`+statusText+`) && `+cardSettled)
		if n := orderCharges(t, phone); n != 2 {
			t.Fatalf("the look-up counts %d charges for the order, want 2", n)
		}
		if got := liveEval[string](t, phone, cardAgrees); got != "ok" {
			t.Error(got)
		}
		liveWait(t, phone, "both servers on the timeline", time.Minute,
			`(t => t.includes("in-process A") && t.includes("in-process B"))(document.getElementById("timeline").textContent)`)
	})

	t.Run("chapter 9: a paid order's headline says paid, and the 422 names the amount", func(t *testing.T) {
		phoneInChapter(t, env, phone, "retry-every-4xx")
		liveDo(t, phone, "paying", liveClick("#pay"))
		liveWait(t, phone, "paid", waitUntilBound, paidNow)
		liveDo(t, phone, "paying again with another amount", jsClick(`#lesson [data-lab-action="pay-other-amount"]`))
		liveWait(t, phone, "the 422s' end", waitUntilBound,
			`document.querySelectorAll('#attempts li[data-status="422"]').length === 6 && `+statusState+` === "mismatch" && `+cardSettled)
		st := strings.TrimSpace(liveEval[string](t, phone, statusText))
		if !strings.HasPrefix(st, "paid") || !strings.Contains(st, "is paid") || strings.Contains(st, "Refused") || !strings.Contains(st, "the amount differs") {
			t.Errorf("the card of a paid order: %q", st)
		}
		if got := liveEval[string](t, phone, cardAgrees); got != "ok" {
			t.Error(got)
		}
	})

	t.Run("chapter 2: right after the 500 the outcome is unknown, then the truth", func(t *testing.T) {
		phoneInChapter(t, env, phone, "fails-halfway")
		liveDo(t, phone, "paying", liveClick("#pay"))
		liveWait(t, phone, "the 500 and the look-up", waitUntilBound, statusState+` === "pending"`)
		st := liveEval[string](t, phone, statusText)
		if !regexp.MustCompile(`outcome unknown.*Looking again in \d seconds?`).MatchString(st) || strings.Contains(st, "no charge") {
			t.Errorf("right after the 500: %q", st)
		}
		if n := env.charges(); n != 0 {
			t.Fatalf("%d local charges before the sweeper", n)
		}
		if r := env.send(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 40}); r.Status != http.StatusOK {
			t.Fatalf("advance: %d %s", r.Status, r.Body)
		}
		if out, err := env.Server.Jobs().Sweep(context.Background()); err != nil || len(out) != 1 {
			t.Fatalf("sweep: %v, %v", out, err)
		}
		liveWait(t, phone, "the truth: paid", waitUntilBound, paidNow)
		if got := liveEval[string](t, phone, cardAgrees); got != "ok" {
			t.Error(got)
		}
	})

	t.Run("chapter 4: the key held countdown follows the room's clock", func(t *testing.T) {
		phoneInChapter(t, env, phone, "crash-midway")
		liveDo(t, phone, "paying", liveClick("#pay"))
		liveWait(t, phone, "the dropped connection", waitUntilBound, attemptStatuses+` === "network"`)
		liveDo(t, phone, "paying again", liveClick("#pay"))
		const left = `(m => m ? Number(m[1]) : -1)(/key is 30 seconds old: in (\d+) seconds?/.exec(` + statusText + `))`
		liveWait(t, phone, "the countdown", waitUntilBound, statusState+` === "held" && `+left+` > 20`)
		if r := env.send(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 20}); r.Status != http.StatusOK {
			t.Fatalf("advance: %d %s", r.Status, r.Body)
		}
		liveWait(t, phone, "the countdown 20 s shorter", waitUntilBound, left+` > 0 && `+left+` <= 10`)
	})
	liveNoCSPViolations(t, phone)
}
