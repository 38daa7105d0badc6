package web

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"paytwice/pay/peers"
	"paytwice/web/live"
)

// TestRelayPageFromAnotherServerIsToldWhereItIs: a page whose stream
// moves between servers of one room (a load balancer's next turn) names
// its last event with the epoch of the server that numbered it. Only that
// server can resume it frame by frame; another server of the room draws
// the whole room, marked, and its note says what happened: the page now
// follows this server, and nothing restarted. Once the page's first server
// has stopped, the note says so. Back on its own server, the page resumes
// with the frames it missed and no redraw.
func TestRelayPageFromAnotherServerIsToldWhereItIs(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "s1", "s2")
	a, b := envs[0], envs[1]

	onA := openStream(t, a, "")
	if got := onA.res.Header.Get(peers.StreamEpochHeader); got != a.Server.hub.Epoch() {
		t.Fatalf("s1's stream says its epoch is %q, want its hub's %q", got, a.Server.hub.Epoch())
	}
	seen := live.EventID(a.Server.hub.Epoch(), onA.nextFrame().ID)
	onA.Close()
	if r := a.pay("moved-k1", `{"order_id":"A-1","amount_satang":1000}`); r.Status != http.StatusCreated {
		t.Fatalf("pay on s1: %d %s", r.Status, r.Body)
	}

	t.Run("on its own server the page resumes with what it missed", func(t *testing.T) {
		s := openStream(t, a, "", "Last-Event-ID", seen)
		defer s.Close()
		for {
			f := s.nextFrame()
			if strings.Contains(f.Data, "<!--resync-->") {
				t.Fatalf("s1 redrew its own page instead of resuming it: %.200s", f.Data)
			}
			if strings.Contains(f.Data, "moved-k1") {
				return
			}
		}
	})

	t.Run("on another server of the room the page is drawn whole and told it moved, not that a server restarted", func(t *testing.T) {
		waitUntil(t, "s1's payment on s2's board", func() bool {
			return slices.ContainsFunc(rowsOf(t, b), keyed("moved-k1", "s1", "201 paid"))
		})
		s := openStream(t, b, "", "Last-Event-ID", seen)
		defer s.Close()
		if got := s.res.Header.Get(peers.StreamEpochHeader); got != b.Server.hub.Epoch() {
			t.Errorf("s2's stream says its epoch is %q, want its hub's %q", got, b.Server.hub.Epoch())
		}
		f := s.nextFrame()
		for _, want := range []string{"<!--resync-->", "This page now follows server s2 of the class", "moved-k1"} {
			if !strings.Contains(f.Data, want) {
				t.Errorf("s2's first frame lacks %q: %.400s", want, f.Data)
			}
		}
		if strings.Contains(f.Data, "restarted") {
			t.Errorf("s2 says a server restarted, while s1 runs: %.400s", f.Data)
		}
	})

	t.Run("once its server stopped, the page is told that", func(t *testing.T) {
		a.Server.Close()
		waitUntil(t, "s1 to leave the room", func() bool {
			members, err := b.Server.room.Members(t.Context())
			return err == nil && !slices.ContainsFunc(members, func(m string) bool { return strings.HasPrefix(m, a.Server.hub.Epoch()) })
		})
		s := openStream(t, b, "", "Last-Event-ID", seen)
		defer s.Close()
		f := s.nextFrame()
		if !strings.Contains(f.Data, "<!--resync-->") || !strings.Contains(f.Data, "The server this page followed stopped or restarted") {
			t.Errorf("s2's first frame does not say the page's server stopped: %.400s", f.Data)
		}
	})
}
