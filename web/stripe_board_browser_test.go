package web

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// A shop's payments through the Stripe-shaped sandbox are payments like
// any other: the board shows their rows on the timeline, by the path they
// came in on, and their orders with their charges.
func TestBrowserBoardShowsSandboxPayments(t *testing.T) {
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
	liveWait(t, ctx, "both orders among the charges per order, and the sandbox's requests on the timeline", 10*time.Second,
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
