package main

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserProxyLivePage opens the proxy's live page in Chromium before
// any client comes, then pays through the proxy: the action appears on
// the open page, with its fault, its two attempts and its rules, without
// a reload.
func TestBrowserProxyLivePage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, _, _ := startProxyCmd(t, ctx, "-faults", "lost")
	browser := clusterBrowser(ctx, t)
	browse(t, browser, "opening the live page", chromedp.Navigate(addr+"/"))
	waitFor(t, browser, "the empty page", `location.pathname === "/_proxy/" && document.body.textContent.includes("No client has sent a POST yet")`)
	// htmx and its stream extension have loaded; whatever the client does
	// before the stream opens, its first frame draws.
	waitFor(t, browser, "htmx", `typeof htmx !== "undefined" && document.querySelector("[sse-connect]") !== null`)

	runCmd(t, "pay", "-url", addr, "-order", "LIVE-1", "-base", "20ms", "-cap", "100ms", "-budget", "5s")
	waitFor(t, browser, "the action to appear", `(() => {
		const row = document.getElementById("action-1");
		if (!row) return false;
		const t = row.textContent;
		return t.includes("LIVE-1") && t.includes("lost") && t.includes("no answer") && t.includes("201 Created (replayed)") && t.includes("kept");
	})()`)
	waitFor(t, browser, "the grades", `[...document.querySelectorAll(".proxy-rules tbody tr")].length === 10 &&
		document.querySelector(".proxy-rules").textContent.includes("passed")`)
	saveScreenshot(t, browser, "proxy-live.png")
}
