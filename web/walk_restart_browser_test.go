package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"paytwice/web/room/lesson"
)

// restartChapter is the chapter in the middle of the walk in which the
// server is restarted, with a payment in flight.
const restartChapter = "check-then-insert"

// phoneBooks is a JavaScript expression: the phone's order and the ids
// of the charges the server has for it, in the phone's own scope, as
// "order:id,id".
const phoneBooks = `(async () => {
	const order = document.getElementById("order-id").textContent;
	const r = await fetch("/v1/payments?order_id=" + encodeURIComponent(order),
		{ headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" }, cache: "no-store" }).then(r => r.json());
	return order + ":" + r.charges.map(c => c.charge_id).sort().join(",");
})()`

// TestBrowserClassWalksTwelveChaptersThroughARestart: the board (1280x720)
// and three phones (390x844) walk all twelve chapters in order, never
// pressing New order, on a SQLite file at a fixed address. In the middle
// of chapter 7, with two phones paid and the third's double-click held by
// step mode, the server is stopped and started again on the same file and
// port. The held payment was never let through, so the stopping server
// charged nothing and says so; every page comes back in the chapter with
// the same order; nothing paid before the stop is lost or doubled; and the
// walk goes on to the last chapter, every card stating what the server's
// books say for its order.
func TestBrowserClassWalksTwelveChaptersThroughARestart(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	// A lock timeout of 10 s gives each payment's work 5 s: the lock in
	// memory's requests queue behind each other, and on a loaded machine
	// 1 s was not always enough.
	r := newRestartable(t, Config{PresenterToken: restartToken, LockTimeout: 10 * time.Second, SweepEvery: 200 * time.Millisecond})
	presenter := func(method, path string, body any) {
		t.Helper()
		b := ""
		if body != nil {
			j, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			b = string(j)
		}
		if code := r.call(method, path, b, nil, PresenterHeader, restartToken); code >= 300 {
			t.Fatalf("%s %s as the presenter: %d", method, path, code)
		}
	}

	board := liveBrowserFor(t, 1280, 720, 5*time.Minute)
	liveOpen(t, board, r.URL()+"/board?token="+restartToken)
	liveWait(t, board, "the board drawn for the presenter", waitUntilBound, `document.querySelector(".board").dataset.presenter === "true"`)
	phones := make([]context.Context, 3)
	for i := range phones {
		phones[i] = liveTab(t, board, true) // each its own cookies: three students
		liveDo(t, phones[i], "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
		liveOpen(t, phones[i], r.URL()+"/?backoff_ms=5")
	}
	payOn := func(which []int, double bool) {
		for _, i := range which {
			steps := []chromedp.Action[chromedp.Void]{liveClick("#pay")}
			if double {
				steps = append(steps, liveClick("#pay"))
			}
			liveDo(t, phones[i], fmt.Sprintf("phone %d pays", i+1), steps...)
		}
		for _, i := range which {
			liveWait(t, phones[i], fmt.Sprintf("phone %d's answers", i+1), waitUntilBound, cardSettled)
		}
	}
	everyPhone := []int{0, 1, 2}
	walk := chapterWalk(func(double bool) { payOn(everyPhone, double) }, presenter)

	// restartMidChapter is chapter 7 with the restart in it.
	restartMidChapter := func(ch lesson.Chapter) {
		payOn([]int{1, 2}, ch.Race)
		books := make([]string, len(phones))
		for i := 1; i < len(phones); i++ {
			books[i] = liveEval[string](t, phones[i], phoneBooks)
		}
		orders := make([]string, len(phones))
		for i, p := range phones {
			orders[i] = liveEval[string](t, p, `document.getElementById("order-id").textContent`)
		}
		charged, err := r.db.CountCharges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		loose, err := r.db.LabLooseCharges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The third phone's double-click is in flight: step mode holds both
		// requests when the server stops.
		presenter(http.MethodPut, "/api/step", map[string]bool{"on": true})
		liveWait(t, board, "step mode on the board", waitUntilBound, `document.getElementById("step-bar").classList.contains("step-on")`)
		liveDo(t, phones[0], "phone 1 pays in step mode", liveClick("#pay"), liveClick("#pay"))
		waitHeldCount(t, r, 2)

		r.restart()
		restarted := time.Now()

		for i, p := range phones {
			liveWait(t, p, fmt.Sprintf("phone %d back in chapter 7 with its order", i+1), 10*time.Second-time.Since(restarted), fmt.Sprintf(`(() => {
				const note = document.getElementById("stream-note");
				return document.getElementById("stream-state").textContent === "live" &&
					document.getElementById("lesson").dataset.slug === %q &&
					document.getElementById("order-id").textContent === %q &&
					!note.hidden && note.textContent.includes("restarted") && note.textContent.includes("chapter 7");
			})()`, restartChapter, orders[i]))
		}
		liveWait(t, board, "the board back in chapter 7, step mode on", 10*time.Second-time.Since(restarted), fmt.Sprintf(`
			document.getElementById("stream-state").textContent === "live" && document.getElementById("step-bar").classList.contains("step-on") &&
			document.getElementById("lesson").dataset.slug === %q`, restartChapter))
		t.Logf("every page back in the chapter %s after the restart", time.Since(restarted).Round(time.Millisecond))

		// The held payment: nobody stepped it, nothing was charged, and the
		// card says so; the others' charges are the same ones as before.
		liveWait(t, phones[0], "phone 1's answers", waitUntilBound, cardSettled)
		if says := liveEval[string](t, phones[0], phoneSays); strings.HasPrefix(says, "paid") || !strings.Contains(says, "nothing was charged") {
			t.Errorf("the card of the payment held at the stop: %q, want it to say nothing was charged", says)
		}
		if got := liveEval[string](t, phones[0], phoneBooks); got != orders[0]+":" {
			t.Errorf("the order held at the stop has charges: %s", got)
		}
		for i := 1; i < len(phones); i++ {
			if got := liveEval[string](t, phones[i], phoneBooks); got != books[i] {
				t.Errorf("phone %d's order across the restart: %s, before it %s", i+1, got, books[i])
			}
		}
		if n, err := r.db.CountCharges(context.Background()); err != nil || n != charged {
			t.Errorf("%d charges (%v) after the restart, %d before it", n, err, charged)
		}
		if l, err := r.db.LabLooseCharges(context.Background()); err != nil || len(l) != len(loose) {
			t.Errorf("%d unguarded charges (%v) after the restart, %d before it", len(l), err, len(loose))
		}
		assertCardsMatchTheBooks(t, phones)

		// The presenter lets payments through again, and phone 1 pays the
		// order it has.
		presenter(http.MethodPut, "/api/step", map[string]bool{"on": false})
		liveWait(t, board, "step mode off on the board", waitUntilBound, `!document.getElementById("step-bar").classList.contains("step-on")`)
		payOn([]int{0}, ch.Race)
	}

	book := lesson.Build(r.cfg.LockTimeout)
	before := make([]string, len(phones))
	walked := false
	for n, ch := range book {
		presenter(http.MethodPut, "/api/lessons/current", map[string]string{"slug": ch.Slug})
		for i, p := range phones {
			liveWait(t, p, fmt.Sprintf("phone %d on %s with a new order", i+1, ch.Slug), waitUntilBound,
				fmt.Sprintf(`document.getElementById("lesson").dataset.slug === %q && document.getElementById("order-id").textContent !== %q && document.querySelectorAll("#attempts li").length === 0`, ch.Slug, before[i]))
			if n > 0 {
				if got := liveEval[string](t, p, `document.getElementById("pay-status").textContent`); !strings.Contains(got, "closed") {
					t.Errorf("%s, phone %d: the card does not say the last order is closed: %q", ch.Slug, i+1, got)
				}
			}
		}
		liveWait(t, board, "the board on "+ch.Slug, waitUntilBound, fmt.Sprintf(`document.getElementById("lesson").dataset.slug === %q`, ch.Slug))
		switch do, ok := walk[ch.Slug]; {
		case ch.Slug == restartChapter:
			restartMidChapter(ch)
			walked = true
		case ok:
			do()
		default:
			payOn(everyPhone, ch.Race)
		}
		for i, p := range phones {
			before[i] = liveEval[string](t, p, `document.getElementById("order-id").textContent`)
			t.Logf("chapter %d %s, phone %d: %s", n+1, ch.Slug, i+1, liveEval[string](t, p, phoneSays))
			if w, ok := chapterWords[ch.Slug]; ok {
				if got := liveEval[bool](t, p, fmt.Sprintf(`(() => { const st = document.getElementById("pay-status"); return st.dataset.state !== %q || new RegExp(%q).test(st.textContent); })()`, w.state, w.re)); !got {
					t.Errorf("after %s, phone %d: the card does not say %q", ch.Slug, i+1, w.re)
				}
			}
			if got := liveEval[string](t, p, cardAgrees); got != "ok" {
				t.Errorf("after chapter %d %s, phone %d: %s", n+1, ch.Slug, i+1, got)
			}
		}
	}
	if !walked {
		t.Fatalf("the walk has no chapter %q to restart in", restartChapter)
	}
	if len(book) != 12 {
		t.Fatalf("the walk went through %d chapters, want twelve", len(book))
	}
}
