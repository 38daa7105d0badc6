package web

import (
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBrowserWorkshopPresenterRemovesAndResets: on the presenter's board,
// remove beside a name takes that student off the scoreboard and their
// gateway away, the others staying; Reset the workshop…, unfolded, takes
// every student away, and the workshop stays open.
func TestBrowserWorkshopPresenterRemovesAndResets(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	const token = "teach-ws-remove"
	env := newWorkshopEnvWith(t, token)
	gateways := map[string]string{}
	for name, endpoint := range map[string]string{"Ana": "http://127.0.0.2:8000", "Gus": "http://127.0.0.3:8000", "Cat": "http://127.0.0.4:8000"} {
		v := registerStudent(t, env, strings.ToLower(name)+"-"+hex.EncodeToString(randomBytes(8)), name, endpoint)
		gateways[name] = strings.TrimPrefix(v.Gateway, env.URL)
	}
	gatewayStatus := func(name string) int {
		t.Helper()
		return env.send(http.MethodGet, gateways[name]+"/ledger", nil).Status
	}
	browser := liveBrowserFor(t, 1366, 900, 8*time.Minute)
	board := liveTab(t, browser, true)
	boardViewport(t, board, 1366, 900)
	liveOpen(t, board, env.URL+"/board?token="+token)
	const names = `[...document.querySelectorAll('#workshop-scores tr[data-student]')].map(r => r.dataset.student).sort().join(" ")`
	liveWait(t, board, "the three students on the scoreboard", 2*time.Minute, names+` === "Ana Cat Gus"`)

	liveDo(t, board, "removing Gus", liveClick(`#workshop-scores tr[data-student="Gus"] form.workshop-remove button`))
	liveWaitAcross(t, board, "Gus off the scoreboard, Ana and Cat on it", 2*time.Minute, names+` === "Ana Cat"`)
	if s := gatewayStatus("Gus"); s != http.StatusNotFound {
		t.Errorf("Gus's gateway after his removal: %d, want 404", s)
	}
	if s := gatewayStatus("Ana"); s != http.StatusOK {
		t.Errorf("Ana's gateway after Gus's removal: %d, want 200", s)
	}

	liveDo(t, board, "unfolding the reset", liveClick(`details.workshop-reset summary`))
	liveDo(t, board, "resetting the workshop", liveClick("#ws-reset"))
	liveWaitAcross(t, board, "no student on the scoreboard", 2*time.Minute,
		`!!document.getElementById("workshop-scores") && `+names+` === ""`)
	for _, name := range []string{"Ana", "Cat"} {
		if s := gatewayStatus(name); s != http.StatusNotFound {
			t.Errorf("%s's gateway after the reset: %d, want 404", name, s)
		}
	}
	if !liveEval[bool](t, board, `!!document.getElementById("ws-run-all")`) {
		t.Error("after the reset the presenter's switches do not show the workshop open")
	}
	liveNoCSPViolations(t, board)
}
