package web

import (
	"encoding/hex"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"paytwice/web/workshop"
)

// TestWorkshopAllowedNetworksSurviveARestart: the networks the presenter
// sets are kept with the workshop in the room's SQLite file. The
// precedence: until the presenter sets networks, a server calls those it
// was started with (-workshop-allow), so a restart with another flag
// takes the new flag; once the presenter has set them, theirs win over
// any flag, across restarts.
func TestWorkshopAllowedNetworksSurviveARestart(t *testing.T) {
	const presenter = "teach-allow-36"
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	r := newRestartable(t, cfg)
	allowed := func() []string {
		t.Helper()
		var b WorkshopBoard
		if code := r.call(http.MethodGet, workshopAPI, "", &b); code != http.StatusOK {
			t.Fatalf("GET %s: %d", workshopAPI, code)
		}
		return b.Allowed
	}
	register := func(name, endpoint string) int {
		t.Helper()
		token := strings.ToLower(name) + "-" + hex.EncodeToString(randomBytes(8))
		code, _ := workshopSend(t, r.URL(), http.MethodPost, workshopAPI+"/endpoint", `{"name": "`+name+`", "url": "`+endpoint+`"}`,
			"Authorization", "Bearer "+token)
		return code
	}
	openWorkshop(t, r.URL(), presenter, `{"on": true}`)

	// No presenter's networks yet: a restart with another flag calls the
	// flag's.
	r.cfg.WorkshopAllow = workshop.Nets(netip.MustParsePrefix("127.0.0.3/32"))
	r.restart()
	if got := allowed(); !slices.Equal(got, []string{"127.0.0.3/32"}) {
		t.Fatalf("restarted with -workshop-allow 127.0.0.3/32 before the presenter set any, the room calls %v", got)
	}

	// The presenter sets theirs; the student there registers, the one
	// outside is refused.
	openWorkshop(t, r.URL(), presenter, `{"allowed": ["127.0.0.4", "127.0.0.2:8000"]}`)
	want := []string{"127.0.0.4/32", "127.0.0.2:8000"}
	if got := allowed(); !slices.Equal(got, want) {
		t.Fatalf("after the presenter's PUT the room calls %v, want %v", got, want)
	}

	// Restarted with yet another flag, the room calls the presenter's.
	r.cfg.WorkshopAllow = workshop.Nets(netip.MustParsePrefix("127.0.0.3/32"))
	r.restart()
	if got := allowed(); !slices.Equal(got, want) {
		t.Errorf("after a restart with -workshop-allow 127.0.0.3/32 the room calls %v, want the presenter's %v", got, want)
	}
	if code := register("Dan", "http://127.0.0.4:8000"); code != http.StatusOK {
		t.Errorf("registering at 127.0.0.4, which the presenter allowed, after the restart: %d, want 200", code)
	}
	if code := register("Cat", "http://127.0.0.3:8000"); code != http.StatusForbidden {
		t.Errorf("registering at 127.0.0.3, only the flag's, after the restart: %d, want 403", code)
	}
	if code := register("Ana", "http://127.0.0.2:8001"); code != http.StatusForbidden {
		t.Errorf("registering at 127.0.0.2:8001, the presenter allowed 127.0.0.2:8000 only: %d, want 403", code)
	}

	// The presenter allows none: the board says so in a sentence.
	openWorkshop(t, r.URL(), presenter, `{"allowed": []}`)
	r.restart()
	if got := allowed(); len(got) != 0 {
		t.Errorf("the presenter allowed no network; after a restart the room calls %v", got)
	}
	res := send(t, noRedirects, http.MethodGet, r.URL()+"/workshop", "", PresenterHeader, presenter)
	if !strings.Contains(string(res.Body), "The room calls no network yet") || strings.Contains(string(res.Body), "calls only no network") {
		t.Errorf("the presenter's switches with no network allowed do not say so in a sentence: %s", res.Body)
	}
}
