package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"paytwice/web/browsertest"
)

// summaryText is the words of a lab summary's HTML, as a page reads them:
// its badges' texts, space-separated.
const summaryText = `(html => { const t = document.createElement("template"); t.innerHTML = html;
	return [...t.content.querySelectorAll(".badge")].map(b => b.textContent.trim()).join(" | "); })`

// TestBrowserPhoneLabBadgeFollowsTheServer changes the lab's switches
// through the API, one change after another, and holds a phone's lab
// badge on the checkout page against what the server says after each:
// the badge follows every change, within a bounded wait.
func TestBrowserPhoneLabBadgeFollowsTheServer(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	phone := liveBrowser(t, 390, 844)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, phone, env.URL+"/?backoff_ms=5")
	phoneInChapter(t, env, phone, "lock-in-memory")

	// One round: the two servers of chapter 8 and back (changes that
	// only the badge's words show), another mistake, a client's mistake,
	// and back to the chapter's.
	round := []map[string]any{
		{"server": map[string]any{"servers": 2}},
		{"server": map[string]any{"servers": 1}},
		{"server": map[string]any{"mode": "no_key"}},
		{"client": map[string]any{"new_key_per_retry": true}},
		{"server": map[string]any{"mode": "memory_lock"}, "client": map[string]any{"new_key_per_retry": false}},
	}
	var changes []map[string]any
	for range 5 {
		changes = append(changes, round...)
	}
	for i, change := range changes {
		if r := env.send(http.MethodPatch, "/api/lab", change); r.Status != http.StatusOK {
			t.Fatalf("change %d %v: %d %s", i+1, change, r.Status, r.Body)
		}
		page := env.get("/lab/live?s=0")
		var live LabLive
		if err := json.Unmarshal(page.Body, &live); err != nil {
			t.Fatalf("change %d: /lab/live: %v: %.300s", i+1, err, page.Body)
		}
		html, ok := live.HTML["lab-summary"]
		if !ok {
			t.Fatalf("change %d: /lab/live has no summary: %.300s", i+1, page.Body)
		}
		want := liveEval[string](t, phone, fmt.Sprintf("%s(%q)", summaryText, html))
		shown := fmt.Sprintf(`%s(document.getElementById("lab-summary").outerHTML)`, summaryText)
		if err := browsertest.Poll(phone, fmt.Sprintf("%s === %q", shown, want), 25*time.Millisecond, 5*time.Second); err != nil {
			t.Fatalf("change %d %v: after 5 s the phone's lab badge says %q; the server says %q",
				i+1, change, liveEval[string](t, phone, shown), want)
		}
	}
}
