package room

import (
	"context"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
	"paytwice/web/live"
)

// crash does to m's order what a crash of PostgreSQL may do to the
// relay's: the batches from number from on are forgotten, their numbers
// are given again, and the order starts a new generation
// (store/postgres's relay_life, emptied by the recovery).
func (m *MemoryPeers) crash(from uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if from <= m.lastNumbered && from >= m.firstNumbered {
		m.numbered = m.numbered[:from-m.firstNumbered]
		m.lastNumbered = from - 1
	}
	if len(m.numbered) == 0 {
		m.firstNumbered = 0
	}
	m.generation++
}

// A crash of the database forgets a batch that one server heard, and the
// next batch takes its number. A server that heard nothing across the
// crash (its connection was down) has no way to see, from the numbers
// alone, that the place a page from the first server names is not the
// one it holds: the page would resume after the forgotten batch and never
// be sent the one numbered like it. With the order's generation in every
// place, the place is not held there, and the page is drawn whole; a
// place from before the crash still resumes.
func TestAPlaceForgottenInACrashIsNotTakenForTheOneNumberedAgain(t *testing.T) {
	t.Run("memory peers", func(t *testing.T) {
		p := SharedMemory()
		testPlaceAcrossACrash(t, p, p, func(t *testing.T, from uint64) { p.crash(from) })
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		pa, pb := openPostgresPeers(t, url), openPostgresPeers(t, url)
		testPlaceAcrossACrash(t, pa, pb, func(t *testing.T, from uint64) {
			// What the recovery leaves when the last commits never reached
			// the disk: the counter back, their batches gone, and the
			// unlogged relay_life emptied.
			ctx := context.Background()
			tx, err := pa.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, `UPDATE relay_order SET n = $1 WHERE id = 1`, int64(from)-1); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM relay_batches WHERE n >= $1`, int64(from)); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM relay_life`); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func testPlaceAcrossACrash(t *testing.T, pa, pb Peers, crash func(t *testing.T, from uint64)) {
	a := startRelayed(t, pa, "s1")
	cl := newCutListener(pb)
	b := startRelayed(t, cl, "s2")
	waitJoined(t, a, b)

	publish := func(msg string) {
		a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: msg + " sent"})
	}
	placeOf := func(s relayedServer, word string) func() (live.Place, bool) {
		return func() (live.Place, bool) {
			placed, _ := s.hub.PlacedAfter(live.Place{})
			for _, p := range placed {
				if p.Event.Message == word+" sent" {
					return p.Place, true
				}
			}
			return live.Place{}, false
		}
	}
	waitPlaced := func(s relayedServer, word string) live.Place {
		t.Helper()
		waitFor(t, s.relay.cfg.Name+" to place "+word, func() bool { _, ok := placeOf(s, word)(); return ok })
		p, _ := placeOf(s, word)()
		return p
	}

	publish("before")
	beforeAt := waitPlaced(b, "before")
	cl.cut()
	// Two batches forgotten: s2's hello, when it listens again, takes the
	// first number given again, and "after" the next.
	publish("forgotten-1")
	firstAt := waitPlaced(a, "forgotten-1")
	publish("forgotten-2")
	secondAt := waitPlaced(a, "forgotten-2")
	crash(t, firstAt.N)
	cl.restore()
	waitFor(t, "s2 to listen again", func() bool { return b.relay.Listening() == 2 })
	publish("after")
	afterAt := waitPlaced(b, "after")

	var forgottenAt live.Place
	for _, p := range []live.Place{firstAt, secondAt} {
		if p.N == afterAt.N && p.I == afterAt.I && p.J == afterAt.J {
			forgottenAt = p
		}
	}
	if forgottenAt.IsZero() {
		t.Fatalf("the batch after the crash is at %v, the forgotten ones were at %v and %v: its number was not given again", afterAt, firstAt, secondAt)
	}
	if afterAt.G <= forgottenAt.G {
		t.Errorf("the batch numbered again after the crash is of generation %d, the forgotten one of %d: want a greater one", afterAt.G, forgottenAt.G)
	}
	if b.hub.HoldsPlace(forgottenAt) {
		t.Errorf("s2 holds %v, the place of a batch the crash forgot, as its own: a page resuming from it there would skip %q", forgottenAt, "after")
	}
	if after, ok := b.hub.PlacedAfter(beforeAt); !ok || len(after) != 1 || after[0].Place != afterAt {
		t.Errorf("from %v, before the crash, s2 gives %v (held %v); want only the batch numbered after it", beforeAt, after, ok)
	}
	if n := b.sink.missed.Load(); n != 0 {
		t.Errorf("s2's pages were told %d times to reload: it missed nothing", n)
	}
}
