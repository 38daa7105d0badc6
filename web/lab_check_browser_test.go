package web

import (
	"testing"
	"time"

	"paytwice/web/room"
)

// TestBrowserLabCheck clicks "Run the checker" on the lab's panel with
// check-then-insert switched on: the table arrives under the button and
// names the storm's several charges.
func TestBrowserLabCheck(t *testing.T) {
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert, CheckGapMS: 50}})
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/")
	liveDo(t, ctx, "running the checker", jsClick(`#lab form.lab-check button`))
	liveWait(t, ctx, "the checker's table", time.Minute,
		`[...document.querySelectorAll("#lab-check-result tr")].some(tr => tr.textContent.includes("storm of one key") && tr.textContent.includes("FAIL (safety)"))`)
	liveWait(t, ctx, "the verdict above it", time.Second, `document.querySelector("#lab-check-result .badge.bad").textContent === "FAILED"`)
	liveNoCSPViolations(t, ctx)
}
