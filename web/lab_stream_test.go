package web

import (
	"strings"
	"testing"
)

// frameWith reads stream's frames, at most limit of them, until one
// contains every part of want, and returns it.
func frameWith(t *testing.T, stream *sseStream, limit int, want ...string) sseEvent {
	t.Helper()
	for range limit {
		f := stream.nextFrame()
		found := true
		for _, w := range want {
			found = found && strings.Contains(f.Data, w)
		}
		if found {
			return f
		}
	}
	t.Fatalf("no frame of %d had %q", limit, want)
	return sseEvent{}
}

func TestLabNumbersComeWithTheStream(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "s1", "s2")
	a, b := envs[0], envs[1]
	onA, onB := openStream(t, a, ""), openStream(t, b, "")
	onA.nextFrame()
	onB.nextFrame()

	t.Run("a change of the lab's settings is marked, for the page to ask for the switches", func(t *testing.T) {
		if r := a.send("PATCH", "/api/lab", map[string]any{"server": map[string]any{"mode": "no_key"}}); r.Status != 200 {
			t.Fatalf("PATCH /api/lab: %d %s", r.Status, r.Body)
		}
		frameWith(t, onA, 50, "<!--room-->")
		frameWith(t, onB, 50, "<!--room-->")
	})
	t.Run("a payment's numbers reach the pages of both servers, and are no room change", func(t *testing.T) {
		for range 2 {
			if r := a.pay("lab-stream-1", `{"order_id":"LS-1","amount_satang":1000}`); r.Status != 201 {
				t.Fatalf("pay: %d %s", r.Status, r.Body)
			}
		}
		for _, stream := range []*sseStream{onA, onB} {
			f := frameWith(t, stream, 200, `id="lab-out-1"`, "<strong>1</strong>", "1 extra charge")
			if !strings.Contains(f.Data, "<!--refresh-->") || strings.Contains(f.Data, "<!--room-->") {
				t.Errorf("the lab's numbers came as %.60q…: want a refresh frame, with no room mark", f.Data)
			}
		}
	})
}
