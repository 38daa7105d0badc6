package workshop

import (
	"context"
	"fmt"

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
// there; w.mu is held or w not yet shared.
func (w *Workshop) newGateway(secret string, held []sim.GatewayHTTPCharge, t sim.GatewayTally) *sim.GatewayHandler {
	gw := sim.NewGatewayHandler(w.cfg.Now)
	gw.SetMaxCharges(w.cfg.BooksCap)
	gw.SetBaseFaults(w.faults)
	if w.cfg.Books != nil {
		gw.KeepIn(studentBooks{w.cfg.Books, secret, w.cfg.BooksCap}, held, t)
	}
	return gw
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

// studentBooks are one student's gateway's books in Config.Books.
type studentBooks struct {
	books  Books
	secret string
	keep   int
}

func (b studentBooks) Record(ctx context.Context, c sim.GatewayHTTPCharge) (sim.GatewayHTTPCharge, bool, sim.GatewayTally, error) {
	kept, fresh, t, err := b.books.RecordWorkshopCharge(ctx, b.secret,
		pay.GatewayCharge{Key: c.Key, ID: c.ID, OrderID: c.OrderID, AmountSatang: c.AmountSatang, CreatedAt: c.CreatedAt}, b.keep)
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
