package board

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/a-h/templ"

	"paytwice/pay/peers"
	"paytwice/views"
	"paytwice/web/live"
)

// oobElement matches the start of each fragment of a frame that is an
// element swapped in by id.
var oobElement = regexp.MustCompile(`<(\w+) [^>]*?id="([^"]+)"[^>]*?hx-swap-oob="([^"]*)"`)

// Epochs the test board's Origin knows: another server of the room that
// runs, and one whose state cannot be read.
const (
	otherServerEpoch   = "00aa00aa00aa"
	unknownServerEpoch = "00bb00bb00bb"
)

// TestStreamResumesOnlyWithinOneLife checks the event ids' epochs: a page
// resumes where it left off only with an id of this life of the server;
// from another life, or from further back than the frames kept, it first
// gets the whole room, marked, and then the live events.
func TestStreamResumesOnlyWithinOneLife(t *testing.T) {
	newBoard := func(t *testing.T) *testBoard {
		b := newTestBoard(t, func(c *Config) {
			c.ResyncNote = func(why Why) templ.Component {
				return views.StreamNote([whys]string{FellBehind: "fell behind", Restarted: "restarted", Moved: "moved", Reconnected: "reconnected"}[why], true)
			}
			// Another server of the room runs under this epoch; any other
			// is gone, and this one cannot be looked up.
			c.Origin = func(_ context.Context, epoch string) Why {
				switch epoch {
				case otherServerEpoch:
					return Moved
				case unknownServerEpoch:
					return Reconnected
				}
				return Restarted
			}
		}, 10)
		for _, e := range paymentEvents(1) {
			b.hub.Publish(e)
		}
		return b.caughtUp(t)
	}

	t.Run("every id carries the epoch of the hub that numbered it", func(t *testing.T) {
		b := newBoard(t)
		s := b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), 1))
		for {
			raw, err := s.r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(raw, "id: ") {
				if want := "id: " + b.hub.Epoch() + "-"; !strings.HasPrefix(raw, want) {
					t.Fatalf("frame id %q, want it to start with %q", raw, want)
				}
				return
			}
		}
	})

	t.Run("a page of this life resumes: no redraw, only what it missed", func(t *testing.T) {
		b := newBoard(t)
		s := b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), 2))
		_, data, _, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(data, "<!--resync-->") || strings.Contains(data, `id="fault-fields"`) {
			t.Fatalf("a page of this life was redrawn instead of resumed: %.200s", data)
		}
	})

	// A page of an earlier life holds a larger number than this life has
	// reached, or a smaller one: either way the number means nothing here.
	for _, seq := range []uint64{3, 999999} {
		t.Run("a page of another life gets the whole room first, then the live events", func(t *testing.T) {
			b := newBoard(t)
			s := b.open(t, "Last-Event-ID", live.EventID("0123456789ab", seq))
			id, data, _, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(data, "<!--room--><!--resync-->") || !strings.Contains(data, ">restarted</p>") {
				t.Fatalf("the first frame is not the marked whole room with the restart note: %.300s", data)
			}
			for _, want := range []string{`id="timeline"`, `id="keys-body"`, `id="charges-body"`, `id="counters"`, `id="fault-fields"`, `id="step-bar"`, "201 paid"} {
				if !strings.Contains(data, want) {
					t.Errorf("the whole room lacks %s", want)
				}
			}
			if id != b.Snapshot().Seq {
				t.Errorf("its id is %d, want the board's %d", id, b.Snapshot().Seq)
			}
			for _, e := range paymentEvents(2) {
				b.hub.Publish(e)
			}
			for {
				_, data, _, err := s.next()
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(data, "<!--resync-->") {
					t.Fatal("the whole room was sent twice")
				}
				if strings.Contains(data, "B-2") {
					break // the live events follow
				}
			}
		})
	}

	for _, c := range []struct{ epoch, note string }{{otherServerEpoch, "moved"}, {unknownServerEpoch, "reconnected"}} {
		t.Run("a page of another server of the room gets the whole room with a note that says so, not that a server restarted", func(t *testing.T) {
			b := newBoard(t)
			s := b.open(t, "Last-Event-ID", live.EventID(c.epoch, 3))
			if got := s.res.Header.Get(peers.StreamEpochHeader); got != b.hub.Epoch() {
				t.Errorf("the stream's %s is %q, want the hub's epoch %q", peers.StreamEpochHeader, got, b.hub.Epoch())
			}
			_, data, _, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(data, "<!--room--><!--resync-->") || !strings.Contains(data, ">"+c.note+"</p>") || strings.Contains(data, ">restarted</p>") {
				t.Fatalf("the first frame is not the marked whole room with the note %q: %.300s", c.note, data)
			}
		})
	}

	t.Run("a bare number, from a page loaded before ids had epochs, gets the whole room", func(t *testing.T) {
		b := newBoard(t)
		_, data, _, err := b.open(t, "Last-Event-ID", "2").next()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(data, "<!--resync-->") {
			t.Fatalf("not resynced: %.200s", data)
		}
	})

	t.Run("a page of this life further back than the frames kept gets the whole room, without the restart note", func(t *testing.T) {
		b := newBoard(t)
		big := templ.Raw("x")
		b.mu.Lock()
		for i := range uint64(liveFrames + 10) {
			b.addFrameLocked(b.modelSeq+i+1, false, []templ.Component{big})
		}
		b.modelSeq += liveFrames + 10
		b.mu.Unlock()
		_, data, _, err := b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), 1)).next()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(data, "<!--resync-->") || !strings.Contains(data, ">fell behind</p>") {
			t.Fatalf("not resynced as fallen behind: %.300s", data)
		}
	})

	t.Run("the whole room replaces whole elements only, so a page that applies it twice is as after once", func(t *testing.T) {
		b := newBoard(t)
		_, first, _, err := b.open(t, "Last-Event-ID", live.EventID("0123456789ab", 7)).next()
		if err != nil {
			t.Fatal(err)
		}
		_, again, _, err := b.open(t, "Last-Event-ID", live.EventID("0123456789ab", 7)).next()
		if err != nil {
			t.Fatal(err)
		}
		if first != again {
			t.Fatal("two pages resyncing at one moment got different snapshots")
		}
		frags := oobElement.FindAllStringSubmatch(first, -1)
		if len(frags) < 6 {
			t.Fatalf("only %d fragments swapped by id in %.300s", len(frags), first)
		}
		seen := map[string]bool{}
		for _, f := range frags {
			if f[3] != "true" && f[3] != "outerHTML" {
				t.Errorf("fragment #%s is swapped with %q: applying it twice would add it twice", f[2], f[3])
			}
			if seen[f[2]] {
				t.Errorf("#%s is swapped twice in one snapshot", f[2])
			}
			seen[f[2]] = true
		}
		if strings.Contains(first, "beforeend") || strings.Contains(first, "afterbegin") {
			t.Errorf("the snapshot appends to an element: %.300s", first)
		}
	})
}
