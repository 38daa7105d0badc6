package web

import (
	"context"
	"hash/maphash"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"paytwice/pay"
)

// The lab's charge counts are kept up to date as charges are written, so
// that GET /lab/live and GET /api/lab/outcomes answer from memory: one
// map update per charge instead of a scan of the charge tables per
// question. They are rebuilt from the database (LabRows) when they cannot
// be known from this server's own writes: at start-up, after a reset, a
// prune (a pruned key no longer says it saved a 500), and when another
// server sharing the database wrote something (its relayed events do not
// say which table or key a lab charge went to, and may arrive after a
// rebuild already read the row), or its events may have been missed.

// labTally is the lab's running count of the charge tables. Every write
// that may record a charge runs between begin and end. A rebuild reads
// the tables while writes go on: a write that ends during the rebuild is
// held back and counted after it unless the rebuild read its row; one
// that began before the counts were last invalidated (a reset, a prune,
// another server's write) cannot be placed and asks for a rebuild again.
type labTally struct {
	seed    maphash.Seed
	rebuild sync.Mutex // one rebuild at a time; readers wait for it

	mu       sync.Mutex
	counts   *labCounts // nil: to be rebuilt
	epoch    uint64     // moves at every invalidation and at both ends of a rebuild
	stale    uint64     // writes begun before this epoch cannot be counted
	building bool
	held     []heldRow // written during a rebuild
	// seen is the rows the last rebuild read, kept while writes begun
	// before its end are still running; seenBefore is that end.
	seen       map[string]struct{}
	seenBefore uint64
	running    map[uint64]int // writes in flight, by the epoch they began in

	builds atomic.Int64 // how many times the tables were read
	// buildsBegun numbers the rebuilds; last is the latest one's counts,
	// lastBegun its number.
	buildsBegun, lastBegun uint64
	last                   *labCounts
	// window is how many real-protocol orders charged once the counts
	// keep (labGuardedWindow; tests make it small).
	window int
}

type heldRow struct {
	epoch uint64
	row   pay.LabRow
}

func newLabTally() *labTally {
	return &labTally{seed: maphash.MakeSeed(), running: map[uint64]int{}, window: labGuardedWindow}
}

// begin is called before a write that may record a charge; end, with
// what it recorded, once it returned.
func (t *labTally) begin() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running[t.epoch]++
	return t.epoch
}

func (t *labTally) end(epoch uint64, rows ...pay.LabRow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended(epoch)
	for _, r := range rows {
		t.count(epoch, r, nil, false)
	}
	t.forgetSeen()
}

// endLooked is end for one row with its order's charges read from the
// store after it was written (needsOrder said so).
func (t *labTally) endLooked(epoch uint64, r pay.LabRow, order []pay.LabRow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended(epoch)
	t.count(epoch, r, order, true)
	t.forgetSeen()
}

// needsOrder reports whether counting a row needs its order's charges
// from the store: its order may have been dropped from the counts.
func (t *labTally) needsOrder(r pay.LabRow) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts != nil && !t.building && t.counts.mayBeForgotten(t.seed, r)
}

func (t *labTally) ended(epoch uint64) {
	if t.running[epoch]--; t.running[epoch] <= 0 {
		delete(t.running, epoch)
	}
}

func (t *labTally) count(epoch uint64, r pay.LabRow, order []pay.LabRow, looked bool) {
	switch {
	case t.building:
		t.held = append(t.held, heldRow{epoch, r})
	case t.counts == nil:
	case epoch < t.stale:
		t.counts = nil // the write straddled an invalidation: count again
	case epoch < t.seenBefore:
		if _, read := t.seen[r.ID]; read {
			return
		}
		fallthrough
	default:
		if !t.counts.addLooked(t.seed, r, order, looked) {
			t.counts = nil // its order was dropped and not read back: count again
		}
	}
}

func (t *labTally) forgetSeen() {
	if t.seen != nil && !t.runningBefore(t.seenBefore) {
		t.seen = nil
	}
}

func (t *labTally) runningBefore(epoch uint64) bool {
	for e := range t.running {
		if e < epoch {
			return true
		}
	}
	return false
}

// invalidate says the tables changed in a way this server did not write
// itself: the next question rebuilds the counts.
func (t *labTally) invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epoch++
	t.stale = t.epoch
	t.counts = nil
}

// fresh reports whether the counts are up to date: reading them then
// reads no table.
func (t *labTally) fresh() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts != nil
}

// read calls fn with the current counts, rebuilding them first if needed.
// Counts invalidated while they were rebuilt (another server keeps
// paying, say) still answer the question that rebuilt them, and every
// question that was waiting for that rebuild: they are as new as the
// tables when it began, as a measurement would be. The next question
// rebuilds again.
func (t *labTally) read(ctx context.Context, db labRows, fn func(*labCounts)) error {
	t.mu.Lock()
	if c := t.counts; c != nil {
		fn(c)
		t.mu.Unlock()
		return nil
	}
	asked := t.buildsBegun
	t.mu.Unlock()
	c, err := t.build(ctx, db, asked)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fn(c)
	return nil
}

// build rebuilds the counts from the tables, unless a rebuild that began
// after the question (asked) has ended meanwhile: then its counts answer.
func (t *labTally) build(ctx context.Context, db labRows, asked uint64) (*labCounts, error) {
	t.rebuild.Lock()
	defer t.rebuild.Unlock()
	t.mu.Lock()
	if t.counts != nil {
		defer t.mu.Unlock()
		return t.counts, nil
	}
	if t.last != nil && t.lastBegun > asked {
		defer t.mu.Unlock()
		return t.last, nil
	}
	t.epoch++
	start := t.epoch
	t.buildsBegun++
	begun := t.buildsBegun
	t.building, t.held = true, nil
	t.mu.Unlock()

	t.builds.Add(1)
	// Read unbounded, bounded once read (labCounts.bound).
	fresh, seen := newLabCounts(), map[string]struct{}{}
	err := db.LabRows(ctx, func(r pay.LabRow) {
		fresh.add(t.seed, r)
		seen[r.ID] = struct{}{}
	})

	t.mu.Lock()
	defer t.mu.Unlock()
	held := t.held
	t.building, t.held = false, nil
	t.epoch++
	if err != nil {
		return nil, err
	}
	settled := t.stale <= start // not invalidated since the rebuild began
	for _, h := range held {
		// A write begun before an invalidation cannot be placed.
		settled = settled && h.epoch >= t.stale
		if _, read := seen[h.row.ID]; !read {
			fresh.add(t.seed, h.row)
		}
	}
	fresh.bound(t.window)
	t.last, t.lastBegun = fresh, begun
	if !settled {
		return fresh, nil // answers the waiting questions; the next one rebuilds
	}
	t.counts = fresh
	t.seen, t.seenBefore = seen, t.epoch
	if !t.runningBefore(t.seenBefore) {
		t.seen = nil
	}
	return fresh, nil
}

// labRows is what the tally is rebuilt from: the rows of the payments
// database's charge tables.
type labRows interface {
	LabRows(ctx context.Context, fn func(pay.LabRow)) error
}

// talliedStorage is the protocol's storage, telling the lab's tally of the
// charges it records (payments and the sweeper alike).
type talliedStorage struct {
	pay.Storage
	t *labTally
}

func (s talliedStorage) Complete(ctx context.Context, c pay.Completion) (pay.Completed, error) {
	epoch := s.t.begin()
	saved, err := s.Storage.Complete(ctx, c)
	if err != nil || c.Charge == nil || saved.ChargeExisted {
		s.t.end(epoch)
		return saved, err
	}
	ch := c.Charge
	row := pay.LabRow{Table: pay.LabCharges, ID: ch.ID, Scope: ch.Scope, Key: ch.Key, OrderID: ch.OrderID,
		CreatedAt: ch.CreatedAt, Saved500: c.Status == 500}
	if store, ok := s.Storage.(labOrderRows); ok && s.t.needsOrder(row) {
		var order []pay.LabRow
		if err := store.LabOrderRows(ctx, ch.Scope, ch.OrderID, func(r pay.LabRow) { order = append(order, r) }); err == nil {
			s.t.endLooked(epoch, row, order)
			return saved, nil
		}
	}
	s.t.end(epoch, row)
	return saved, err
}

// labOrderRows is the store read back from when a charge's order may
// have been dropped from the counts: the charges of one order.
type labOrderRows interface {
	LabOrderRows(ctx context.Context, scope, orderID string, fn func(pay.LabRow)) error
}

// labRecordCharge is the store's LabRecordCharge, told to the tally.
func (b *paymentBooks) labRecordCharge(ctx context.Context, ch pay.Charge) error {
	t := b.tally
	epoch := t.begin()
	err := b.store.LabRecordCharge(ctx, ch)
	if err != nil {
		t.end(epoch)
		return err
	}
	t.end(epoch, pay.LabRow{Table: pay.LabCharges, ID: ch.ID, Scope: ch.Scope, Key: ch.Key, OrderID: ch.OrderID, CreatedAt: ch.CreatedAt})
	return nil
}

// labLooseInsertKey is the store's LabLooseInsertKey, told to the tally.
func (b *paymentBooks) labLooseInsertKey(ctx context.Context, c pay.ClaimRequest, request string) (rowID int64, rows int, err error) {
	t := b.tally
	epoch := t.begin()
	rowID, rows, err = b.store.LabLooseInsertKey(ctx, c, request)
	if err != nil {
		t.end(epoch)
		return rowID, rows, err
	}
	t.end(epoch, pay.LabRow{Table: pay.LabLooseKeys, ID: strconv.FormatInt(rowID, 10), Scope: c.Scope, Key: c.Key, OrderID: c.OrderID})
	return rowID, rows, nil
}

// labLooseComplete is the store's LabLooseComplete with a charge, told to
// the tally.
func (b *paymentBooks) labLooseComplete(ctx context.Context, rowID int64, ch pay.Charge, request string) (int, error) {
	t := b.tally
	epoch := t.begin()
	n, err := b.store.LabLooseComplete(ctx, rowID, http.StatusCreated, ch.ResponseBody(), &ch, request)
	if err != nil {
		t.end(epoch)
		return n, err
	}
	t.end(epoch, pay.LabRow{Table: pay.LabLooseCharges, ID: ch.ID, Scope: ch.Scope, Key: ch.Key, OrderID: ch.OrderID, CreatedAt: ch.CreatedAt})
	return n, nil
}
