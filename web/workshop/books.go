package workshop

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"paytwice/pay"
	"paytwice/sim"
)

// The books of each student's gateway, kept in Config.Books one charge at
// a time: the gateway writes each charge there before it answers, and a
// restarted server's gateway reads them back.

// DefaultBooksCap bounds each student's gateway's books (Config.BooksCap):
// a new charge past it prunes the oldest, in memory and in Config.Books,
// and the pruned are counted.
const DefaultBooksCap = 10_000

// newGateway is the gateway of the student whose secret is secret, its
// books in Config.Books when set, holding held of what t says is kept
// there, and the fence its charges pass to reach the books; w.mu is held
// or w not yet shared.
func (w *Workshop) newGateway(secret string, held []sim.GatewayHTTPCharge, t sim.GatewayTally) (*sim.GatewayHandler, *booksFence) {
	gw := sim.NewGatewayHandler(w.cfg.Now)
	gw.SetMaxCharges(w.cfg.BooksCap)
	gw.SetBaseFaults(w.faults)
	fence := &booksFence{}
	if w.cfg.Books != nil {
		gw.KeepIn(studentBooks{w.cfg.Books, secret, w.cfg.BooksCap, fence}, held, t)
	}
	return gw, fence
}

// booksFence is what a removal and the charges of the student removed
// agree by: a charge already inside the gateway (its latency, say) when
// the presenter removes the student either reaches the books before the
// removal deletes them, which then deletes it too, or is refused; it
// never writes a row that belongs to no student.
type booksFence struct {
	mu       sync.Mutex
	closed   bool
	inFlight int           // charges past the fence, on their way to the books
	left     chan struct{} // closed when the last of them leaves a closed fence
}

// errRemovedStudent refuses a charge whose student the presenter removed
// while it was inside their gateway: a 410 with this sentence, which is
// no outage of the gateway, so no advice to send it again.
var errRemovedStudent = &sim.GatewayClosed{Reason: "The presenter removed this student from the workshop: nothing was charged, and this gateway takes no more charges. Open the workshop page again to register anew, with a new gateway."}

// enter lets a charge through on its way to the books, unless f is
// closed; the charge calls leave once the books have answered it.
func (f *booksFence) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.inFlight++
	return true
}

func (f *booksFence) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight--; f.inFlight == 0 && f.left != nil {
		close(f.left)
		f.left = nil
	}
}

// close refuses every charge from now on, at once.
func (f *booksFence) close() {
	if f != nil {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
	}
}

// isClosed says whether f refuses charges.
func (f *booksFence) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// closeAndWait closes f, then waits for the charges already on their way
// to the books, or for ctx to end (the presenter hung up, the server is
// stopping): the books can be deleted once it returns nil, and not
// before, since a charge still on its way would write after them.
func (f *booksFence) closeAndWait(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	f.closed = true
	if f.inFlight == 0 {
		f.mu.Unlock()
		return nil
	}
	if f.left == nil {
		f.left = make(chan struct{})
	}
	left := f.left
	f.mu.Unlock()
	select {
	case <-left:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keptBooks are one student's charges read from Config.Books.
type keptBooks struct {
	held  []sim.GatewayHTTPCharge
	tally sim.GatewayTally
}

// CountBooks reads what every student's books hold from Config.Books, in
// one statement, for the rows shown next: charges taken through another
// server sharing the books count too. Without Config.Books the gateways'
// memory is the books, and there is nothing to read.
func (w *Workshop) CountBooks(ctx context.Context) error {
	if w.cfg.Books == nil {
		return nil
	}
	all, err := w.cfg.Books.WorkshopTallies(ctx)
	if err != nil {
		return fmt.Errorf("workshop: counting the gateways' books: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for secret, st := range w.bySecret {
		t := all[secret]
		st.gw.BooksSay(sim.GatewayTally{Held: t.Held, Pruned: t.Pruned})
	}
	return nil
}

// readBooks reads the books of every kept student's gateway, by secret.
func (w *Workshop) readBooks(ctx context.Context, doc kept) (map[string]keptBooks, error) {
	out := map[string]keptBooks{}
	if w.cfg.Books == nil {
		return out, nil
	}
	for _, k := range doc.Students {
		if k.Secret == "" {
			continue
		}
		held, t, err := w.cfg.Books.WorkshopCharges(ctx, k.Secret, w.cfg.BooksCap)
		if err != nil {
			return nil, fmt.Errorf("workshop: reading %s's gateway's books: %w", k.Name, err)
		}
		kb := keptBooks{tally: sim.GatewayTally{Held: t.Held, Pruned: t.Pruned}}
		for _, c := range held {
			kb.held = append(kb.held, httpCharge(c))
		}
		out[k.Secret] = kb
	}
	return out, nil
}

// studentBooks are one student's gateway's books in Config.Books, behind
// the student's fence.
type studentBooks struct {
	books  Books
	secret string
	keep   int
	fence  *booksFence
}

func (b studentBooks) Record(ctx context.Context, c sim.GatewayHTTPCharge) (sim.GatewayHTTPCharge, bool, sim.GatewayTally, error) {
	if !b.fence.enter() {
		return sim.GatewayHTTPCharge{}, false, sim.GatewayTally{}, errRemovedStudent
	}
	defer b.fence.leave()
	kept, fresh, t, err := b.books.RecordWorkshopCharge(ctx, b.secret,
		pay.GatewayCharge{Key: c.Key, ID: c.ID, OrderID: c.OrderID, AmountSatang: c.AmountSatang, CreatedAt: c.CreatedAt}, b.keep)
	if errors.Is(err, pay.ErrWorkshopStudentRemoved) {
		// Removed through another server sharing the books, which this
		// one has not heard of yet.
		return sim.GatewayHTTPCharge{}, false, sim.GatewayTally{}, errRemovedStudent
	}
	return httpCharge(kept), fresh, sim.GatewayTally{Held: t.Held, Pruned: t.Pruned}, err
}

func (b studentBooks) ByOrder(ctx context.Context, orderID string, limit int) ([]sim.GatewayHTTPCharge, int, error) {
	kept, total, err := b.books.WorkshopChargesByOrder(ctx, b.secret, orderID, limit)
	out := make([]sim.GatewayHTTPCharge, 0, len(kept))
	for _, c := range kept {
		out = append(out, httpCharge(c))
	}
	return out, total, err
}

func httpCharge(c pay.GatewayCharge) sim.GatewayHTTPCharge {
	return sim.GatewayHTTPCharge{ID: c.ID, Key: c.Key, OrderID: c.OrderID, AmountSatang: c.AmountSatang, CreatedAt: c.CreatedAt}
}
