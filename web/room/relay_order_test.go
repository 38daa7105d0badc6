package room

import (
	"context"
	"testing"
	"time"

	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/web/live"
)

// openPostgresPeers opens a server's connection pool on the database at
// url, closed when the test ends.
func openPostgresPeers(t *testing.T, url string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), url, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// PostgreSQL commits the relay's counter without waiting for the disk: a
// crash may forget the newest batches, counter and kept rows together,
// and number the next batches again. A relay that had taken the forgotten
// batches listens again after the crash; it must neither drop the
// renumbered batches as taken already nor keep quiet about it: it hears
// what comes next, and its pages are told to reload.
func TestRelayHearsOnWhenTheOrderGoesBackAfterACrash(t *testing.T) {
	// What a crash leaves when the last three commits never reached the
	// disk: the counter three back, and their batches gone with it (one
	// transaction wrote both).
	t.Run("crash", func(t *testing.T) { testOrderGoesBack(t, true) })
	// The counter alone set back: the batches under the numbers given
	// again are replaced, not refused.
	t.Run("counter alone", func(t *testing.T) { testOrderGoesBack(t, false) })
}

func testOrderGoesBack(t *testing.T, forgetBatches bool) {
	url := pgtest.NewDatabase(t)
	pa, pb := openPostgresPeers(t, url), openPostgresPeers(t, url)
	a := startRelayed(t, pa, "s1")
	cl := newCutListener(pb)
	b := startRelayed(t, cl, "s2")
	waitJoined(t, a, b)
	for _, m := range []string{"before-1", "before-2", "before-3"} {
		a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: m + " sent"})
		waitFor(t, "s2 to hear "+m, func() bool { return received(b.hub, m) })
	}

	cl.cut()
	ctx := context.Background()
	tx, err := pa.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var newest int64
	if err := tx.QueryRow(ctx, `UPDATE relay_order SET n = n - 3 WHERE id = 1 RETURNING n`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	if forgetBatches {
		if _, err := tx.Exec(ctx, `DELETE FROM relay_batches WHERE n > $1`, newest); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cl.restore()
	waitFor(t, "s2 to listen again", func() bool { return b.relay.Listening() == 2 })

	for _, m := range []string{"after-1", "after-2", "after-3", "after-4"} {
		a.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: m + " sent"})
		waitFor(t, "s2 to hear "+m+", numbered again", func() bool { return received(b.hub, m) })
	}
	if n := b.sink.missed.Load(); n != 1 {
		t.Errorf("s2's pages were told %d times to reload, want once: s2 cannot know what the forgotten numbers held", n)
	}
}
