package web

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// A shop's payments through the Stripe-shaped sandbox are payments like
// any other: the board shows their rows on the timeline, by the path they
// came in on, and their orders with their charges.
func TestBrowserBoardShowsSandboxPayments(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1280, 720)
	liveOpen(t, ctx, env.URL+"/board")
	sdk := sandboxClient(t, env.URL)

	if _, err := createIntent(sdk, "SBX-1", "sbx-one-step", "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
	pi, err := createUnconfirmed(sdk, "SBX-2", "sbx-create", 12900)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := confirmIntent(sdk, pi.ID, "sbx-confirm", ""); err != nil {
		t.Fatal(err)
	}
	liveWait(t, ctx, "both orders among the charges per order, and the sandbox's requests on the timeline", waitUntilBound,
		`(() => { const o = document.getElementById("orders").textContent, tl = document.getElementById("timeline").textContent;
			return o.includes("SBX-1") && o.includes("SBX-2") && tl.includes("/v1/payment_intents") && tl.includes("/confirm"); })()`)
	// Each order is shown charged once: the board reads the books.
	orders := liveEval[string](t, ctx, `document.getElementById("orders").innerText`)
	for _, order := range []string{"SBX-1", "SBX-2"} {
		if !regexp.MustCompile(regexp.QuoteMeta(order) + `\s+1×\s+1 charge\b`).MatchString(orders) {
			t.Errorf("the board's charges per order do not show %s charged once:\n%s", order, orders)
		}
	}
	// The unconfirmed create is on the timeline as what it was: an answer
	// saved, nothing charged.
	if tl := liveEval[string](t, ctx, `document.getElementById("timeline").innerText`); !strings.Contains(tl, "200 OK, saved") {
		t.Errorf("the create with confirm=false is not shown as a saved 200:\n%s", tl)
	}
	liveNoCSPViolations(t, ctx)
}

// Once a student has paid through the room's proxy (/byo/<name>/), the
// board shows the scoreboard, folded: opened, it lists the student with
// the rules their client kept, and keeps itself up to date.
func TestBrowserBoardShowsTheRoomsScoreboard(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1280, 720)
	liveOpen(t, ctx, env.URL+"/board")
	if n := liveEval[int](t, ctx, `document.querySelectorAll(".board-byoc").length`); n != 0 {
		t.Fatalf("the scoreboard is on the board before any student paid through the room's proxy")
	}
	req, err := http.NewRequest(http.MethodPost, env.URL+"/byo/ana/v1/payments", strings.NewReader(`{"order_id":"BYO-1","amount_satang":12900}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "ana-byo-1")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close() // the proxy may have injected a failure: any answer will do
	}
	liveOpen(t, ctx, env.URL+"/board")
	liveDo(t, ctx, "open the scoreboard", liveClick(".board-byoc summary"))
	liveWait(t, ctx, "the student on the board's scoreboard", waitUntilBound,
		`(() => { const s = document.querySelector(".board-byoc #byoc-scores"); return !!s && s.checkVisibility() && [...s.querySelectorAll("tbody th")].some(th => th.textContent.trim() === "ana"); })()`)
	liveNoCSPViolations(t, ctx)
}
