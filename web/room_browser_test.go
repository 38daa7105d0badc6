package web

import (
	"net/http"
	"testing"
)

// TestBrowserBoardFollowsTheRoom opens the board of one of three servers
// on one PostgreSQL database and changes the room through the other two:
// the open board shows the switches, the lesson and the reset as they
// happen, without a reload.
func TestBrowserBoardFollowsTheRoom(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	envs, _ := classServers(t, "s1", "s2", "s3")
	a, b, c := envs[0], envs[1], envs[2]
	ctx := liveBrowser(t, 1280, 720)
	liveOpen(t, ctx, b.URL+"/board")

	a.must(http.MethodPatch, "/api/faults", `{"server":{"crash_midway":true}}`)
	liveWait(t, ctx, "s1's switch on s2's board", waitUntilBound, `document.getElementById("f-crash").checked`)

	c.must(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`)
	liveWait(t, ctx, "s3's lesson and its switches on s2's board", waitUntilBound,
		`!!document.querySelector('#lesson[data-slug="no-key"]') && !document.getElementById("f-crash").checked &&
		 document.getElementById("f-delay").value === "800"`)

	a.must(http.MethodPost, "/api/reset", "")
	liveWait(t, ctx, "s1's reset on s2's board", waitUntilBound,
		`!document.querySelector('#lesson[data-slug="no-key"]') && document.getElementById("f-delay").value === "0"`)
	liveNoCSPViolations(t, ctx)
}
