package web

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/live"
)

// prunesThenFails is a store whose prune deletes what the real one does,
// then fails, as a batched prune does when the database goes away after
// its first batches have committed.
type prunesThenFails struct{ pay.Store }

var errPruneCut = errors.New("the database went away between two batches")

func (s prunesThenFails) Prune(ctx context.Context, cutoff time.Time) (pay.Pruned, error) {
	pruned, err := s.Store.Prune(ctx, cutoff)
	if err != nil {
		return pruned, err
	}
	return pruned, errPruneCut
}

// The lab's prune that stops part way still counts the keys it deleted and
// tells the pages of them: they are gone from the database either way.
func TestLabPruneThatStopsPartWayCountsWhatItDeleted(t *testing.T) {
	t.Parallel()
	mc := sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	clock := sim.NewClock(mc.Now)
	db := MustOpenDB(t, clock.Now)
	srv := NewServer(Config{Logger: log.New(io.Discard, "", 0), Ledger: db}, prunesThenFails{db}, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	env := &testEnv{t: t, tb: t, URL: hs.URL, DB: db, Server: srv, Clock: mc, HTTP: hs}

	const keys = 3
	for i := range keys {
		body := `{"order_id":"P-` + string(rune('1'+i)) + `","amount_satang":100}`
		if r := env.pay(uuid.NewString(), body); r.Status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i, r.Status, r.Body)
		}
	}
	mc.Advance(48 * time.Hour)
	from := srv.hub.LastSeq()

	if r := env.send(http.MethodPost, "/api/lab/prune", nil); r.Status < 500 {
		t.Fatalf("a prune that failed answered %d %s, want its error", r.Status, r.Body)
	}
	if _, done, err := db.KeyCounts(t.Context()); err != nil || done != 0 {
		t.Fatalf("done keys left: %d %v, want every one pruned", done, err)
	}
	if o := env.outcomes().PruneTooSoon; o.Pruned != keys {
		t.Fatalf("the lab counts %d pruned keys, want the %d deleted", o.Pruned, keys)
	}
	told := false
	for _, e := range srv.hub.Recent(live.DefaultSize) {
		told = told || (e.Seq > from && e.Kind == live.Pruned && strings.Contains(e.Message, "3 done key(s)"))
	}
	if !told {
		t.Fatal("the pages were not told of the keys the prune deleted")
	}
}
