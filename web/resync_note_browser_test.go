package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestBrowserResyncNoteGoesWhenTheClassMovesOn: after a restart the board
// and a phone say the server restarted and which chapter the class is
// in; the presenter then starts another chapter within the note's few
// seconds, and once a page shows that chapter its note no longer names
// the old one (it used to stay, saying chapter 6 under chapter 7's panel).
func TestBrowserResyncNoteGoesWhenTheClassMovesOn(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	r := newRestartable(t, Config{})
	start := func(slug string) {
		t.Helper()
		if code := r.call(http.MethodPut, "/api/lessons/current", `{"slug":"`+slug+`"}`, nil); code != http.StatusOK {
			t.Fatalf("starting %s: %d", slug, code)
		}
	}
	start("new-key-per-retry")
	board := liveBrowser(t, 1280, 720)
	liveOpen(t, board, r.URL()+"/board")
	phone := liveTab(t, board, true)
	liveDo(t, phone, "a phone's window", liveResize(390, 844))
	liveOpen(t, phone, r.URL()+"/")
	pages := []struct {
		name string
		ctx  context.Context
	}{{"board", board}, {"phone", phone}}
	for _, p := range pages {
		liveWait(t, p.ctx, p.name+" on chapter 6", waitUntilBound, `document.getElementById("lesson").dataset.slug === "new-key-per-retry"`)
	}

	r.restart()
	for _, p := range pages {
		liveWait(t, p.ctx, p.name+"'s note after the restart", waitUntilBound, `(() => {
			const note = document.getElementById("stream-note");
			return document.getElementById("stream-state").textContent === "live" && !note.hidden && note.textContent.includes("chapter 6");
		})()`)
	}
	start("check-then-insert")
	for _, p := range pages {
		liveWait(t, p.ctx, p.name+" on chapter 7", waitUntilBound, `document.getElementById("lesson").dataset.slug === "check-then-insert"`)
		// The lesson panel and the note are drawn by the same answer: no
		// wait between them.
		if said := liveEval[string](t, p.ctx, `(() => { const n = document.getElementById("stream-note"); return n.hidden ? "" : n.textContent; })()`); said != "" && !strings.Contains(said, "chapter 7") {
			t.Errorf("%s shows chapter 7 under a note that says: %q", p.name, said)
		}
	}
}
