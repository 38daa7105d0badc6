package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestLessonSaysSwitchedOnOnlyWhileTheSwitchesAreTheChapters: the lesson
// panel's list of a chapter's switches is headed "Switched on" only while
// the room's switches are the ones the chapter set. Once the presenter
// changes them (as the first chapter asks, turning its fault off), the
// heading says they were changed since, on the checkout page and on the
// board, and the panel's version changes so that open pages fetch it
// again; a chapter the class is not on says what it would switch on.
func TestLessonSaysSwitchedOnOnlyWhileTheSwitchesAreTheChapters(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	if err := env.Server.guidedLessons().start(context.Background(), "connection-never-happens", "test"); err != nil {
		t.Fatal(err)
	}
	const asSet, changed, other = ">Switched on</h3>", ">Switched on at the start; the switches were changed since</h3>", ">This chapter switches on</h3>"
	for _, path := range []string{"/", "/board"} {
		if page := string(env.get(path).Body); !strings.Contains(page, asSet) || strings.Contains(page, changed) {
			t.Fatalf("%s with the chapter's switches as it set them: the heading is not %q", path, asSet)
		}
	}
	before := env.Server.guidedLessons().version()
	if r := env.send(http.MethodPut, "/api/faults", map[string]any{}); r.Status != http.StatusOK {
		t.Fatalf("PUT /api/faults: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"/", "/board"} {
		if page := string(env.get(path).Body); !strings.Contains(page, changed) || strings.Contains(page, asSet) {
			t.Errorf("%s after the switches were turned off: the heading is not %q", path, changed)
		}
	}
	if env.Server.guidedLessons().version() == before {
		t.Error("the lesson panel's version did not change with the switches: open pages keep saying they are on")
	}
	if page := string(env.get("/?lesson=fails-halfway").Body); !strings.Contains(page, other) {
		t.Errorf("a chapter the class is not on: the heading is not %q", other)
	}
}
