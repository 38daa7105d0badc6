package web

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"paytwice/web/room"
)

// heldRelay holds a server's relayed events on their way to the other
// servers until released, as a busy relay or a slow database does.
type heldRelay struct {
	room.Peers
	mu      sync.Mutex
	holding bool
	held    [][]string
}

func (h *heldRelay) Notify(ctx context.Context, channel string, payloads ...string) error {
	h.mu.Lock()
	if channel == room.RelayChannel && h.holding {
		h.held = append(h.held, slices.Clone(payloads))
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	return h.Peers.Notify(ctx, channel, payloads...)
}

func (h *heldRelay) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	h.mu.Lock()
	if channel == room.RelayChannel && h.holding {
		h.held = append(h.held, slices.Clone(payloads))
		h.mu.Unlock()
		return 0, nil
	}
	h.mu.Unlock()
	return h.Peers.NotifyNumbered(ctx, channel, payloads...)
}

func (h *heldRelay) hold() { h.mu.Lock(); h.holding = true; h.mu.Unlock() }

func (h *heldRelay) release(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding = false
	for _, p := range h.held {
		if _, err := h.Peers.NotifyNumbered(context.Background(), room.RelayChannel, p...); err != nil {
			t.Fatal(err)
		}
	}
	h.held = nil
}

// membersWithout lists the room's members but one server's life, as a
// server sees them while that server's listen session is down.
type membersWithout struct {
	room.Peers
	life atomic.Pointer[string]
}

func (m *membersWithout) RoomMembers(ctx context.Context) ([]string, error) {
	all, err := m.Peers.RoomMembers(ctx)
	life := m.life.Load()
	if err != nil || life == nil {
		return all, err
	}
	return slices.DeleteFunc(all, func(s string) bool { id, _, _ := strings.Cut(s, " "); return id == *life }), nil
}

// TestBoardCountersAreOffByTheAnswersInFlightWhenAServerLeavesTheMembers:
// server B answers four requests and keeps its count while its relayed
// events are still on their way to server A, and A's board opens while B
// is missing from the room's members (its listen session dropped). A's
// board adds B's kept count and then counts B's events as they arrive:
// off by at most the four answers in flight, which the board's
// explanation says it can be. With B among the members again, B's next
// answers are counted exactly once.
func TestBoardCountersAreOffByTheAnswersInFlightWhenAServerLeavesTheMembers(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	members := &membersWithout{}
	relay := &heldRelay{}
	a := c.server(Config{Name: "a"}, func(p room.Peers) room.Peers { members.Peers = p; return members })
	b := c.server(Config{Name: "b"}, func(p room.Peers) room.Peers { relay.Peers = p; return relay })
	fromB := func() int {
		n := 0
		for _, r := range a.Server.live().Snapshot().Timeline {
			if r.Server == "b" && r.Outcome.Text != "" {
				n++
			}
		}
		return n
	}

	relay.hold()
	answerEachWay(t, b.URL, "away-1")
	b.Server.pages.answers.save(context.Background())
	life := b.Server.hub.Epoch()
	members.life.Store(&life)
	opened := boardTiles(t, a.URL)["n-requests"]
	if opened != 4 {
		t.Fatalf("A's board opened with %d requests, want B's kept 4", opened)
	}
	relay.release(t)
	waitUntil(t, "B's relayed requests on A's board", func() bool { return fromB() == 4 })
	boardCaughtUp(t, a)
	got := boardTiles(t, a.URL)["n-requests"]
	if got < 4 || got > 4+4 {
		t.Fatalf("A's board counts %d requests of 4, more than the 4 in flight off", got)
	}
	t.Logf("4 requests, 4 of them in flight: A's board counts %d", got)

	members.life.Store(nil)
	before := fromB()
	answerEachWay(t, b.URL, "away-2")
	waitUntil(t, "B's next requests on A's board", func() bool { return fromB() == before+4 })
	boardCaughtUp(t, a)
	if n := boardTiles(t, a.URL)["n-requests"]; n != got+4 {
		t.Fatalf("with B among the members, A's board went from %d to %d requests after B answered 4", got, n)
	}
}

// boardCaughtUp waits until env's board has applied every event of its hub.
func boardCaughtUp(t *testing.T, env *testEnv) {
	t.Helper()
	waitUntil(t, "the board to catch up", func() bool { return env.Server.live().Caught(env.Server.hub.LastSeq()) })
}
