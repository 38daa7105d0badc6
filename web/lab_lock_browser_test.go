package web

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"paytwice/web/room"
)

// TestBrowserLabMemoryLock drives the lock in memory from the lab's card
// on one server: its switch, its pause (one setting shown on two cards),
// a double-click and a burst, each charged once.
func TestBrowserLabMemoryLock(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	looseCharges := func() int {
		t.Helper()
		ch, err := env.DB.LabLooseCharges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(ch)
	}

	labSwitch(t, ctx, env, "#lab-memlock", func(l room.LabSettings) bool { return l.Server.Mode == room.LabMemoryLock })
	liveDo(t, ctx, "a pause of 1 s", chromedp.Evaluate[chromedp.Void](
		`(s => { s.value = "1000"; s.dispatchEvent(new Event("change", { bubbles: true })); })(document.getElementById("lab-lock-gap"))`))
	liveWait(t, ctx, "the pause on both cards", waitUntilBound,
		`document.getElementById("lab-gap").value === "1000" && document.getElementById("lab-lock-gap").value === "1000"`)
	if gap := env.Server.lab.Settings().Server.CheckGapMS; gap != 1000 {
		t.Fatalf("the pause is %d ms", gap)
	}

	t.Run("a double-click on one server is charged once, the second click replayed", func(t *testing.T) {
		liveDo(t, ctx, "double-click", chromedp.ScrollIntoView(chromedp.CSS("#pay")), liveClick("#pay"), liveClick("#pay"))
		liveWait(t, ctx, "two answered attempts, paid", waitUntilBound, answered+` === 2 && `+paidNow)
		liveWait(t, ctx, "the second click replayed", waitUntilBound,
			`[...document.querySelectorAll("#attempts li")].some(li => /replayed/.test(li.textContent))`)
		if n := looseCharges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
		liveWait(t, ctx, "the card's count", waitUntilBound, labNumber(8)+` === "0" && document.getElementById("lab-out-8").classList.contains("ok")`)
	})
	t.Run("the card's burst is charged once", func(t *testing.T) {
		liveDo(t, ctx, "a burst", jsClick(`#mistake-8 [data-lab-action="burst"]`))
		liveWait(t, ctx, "the burst's answers", waitUntilBound,
			`(t => t.includes("one key: charged once") && t.includes("10 requests answered 201 \u00d710"))(document.getElementById("lab-lock-burst-result").textContent)`)
		if n := looseCharges(); n != 2 {
			t.Fatalf("%d charges, want 2 (one per order)", n)
		}
		liveWait(t, ctx, "no key charged twice", waitUntilBound, labNumber(8)+` === "0"`)
	})
	liveNoCSPViolations(t, ctx)
}
