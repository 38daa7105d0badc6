package workshop

import (
	"context"
	"sync"
	"time"

	"paytwice/pay"
)

// talliesFresh is how long one read of every gateway's tally serves the
// boards fetched after it: a class's boards and phones polling several
// servers cost the books one aggregate per server per talliesFresh, and
// a charge shows on the boards at most that much later.
const talliesFresh = 250 * time.Millisecond

// talliesCache holds the books' last answer to WorkshopTallies, a
// failure too, and the read in flight, which the boards fetched
// meanwhile wait for instead of reading again.
type talliesCache struct {
	mu      sync.Mutex
	read    bool // a read has finished since the start
	at      time.Time
	tallies map[string]pay.WorkshopTally
	err     error
	flight  chan struct{} // closed when the read in flight ends; nil when none
}

// readTallies is every gateway's tally as the books said it at most
// talliesFresh ago (by Config.Now), read now when they did not; with
// Config.Books set.
func (w *Workshop) readTallies(ctx context.Context) (map[string]pay.WorkshopTally, error) {
	c := &w.tallies
	for {
		c.mu.Lock()
		if age := w.cfg.Now().Sub(c.at); c.read && age >= 0 && age < talliesFresh {
			t, err := c.tallies, c.err
			c.mu.Unlock()
			return t, err
		}
		if wait := c.flight; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.flight = done
		c.mu.Unlock()

		t, err := w.cfg.Books.WorkshopTallies(ctx)

		c.mu.Lock()
		// A read cut short by its own caller leaving says nothing of the
		// books: the next board reads again.
		if err == nil || ctx.Err() == nil {
			c.read, c.at, c.tallies, c.err = true, w.cfg.Now(), t, err
		}
		c.flight = nil
		close(done)
		c.mu.Unlock()
		return t, err
	}
}
