package board

import (
	"context"
	"slices"
	"time"

	"paytwice/pay"
	"paytwice/views"
)

// model is what the panels show, after event modelSeq; the board's mu
// guards it.
type model struct {
	modelSeq uint64 // the model reflects every event up to this one
	rows     []*views.TimelineRow
	keys     []*views.KeyRow
	charges  []views.ChargeRow
	counters views.Counters
	faults   views.FaultSwitches
	orderBook
	// keysShown is the key table as the frames left it on the pages,
	// while the rows above are ahead of it (keyops.go).
	keysShown onPages[views.KeyRow]
	// chargesShown is the same for the charges table (chargeops.go).
	chargesShown onPages[string]

	fullNext bool // the next frame redraws every panel
	// steps is the step bar as the frames drew it last (stepbar.go's
	// drawSteps): a page drawn from a snapshot gets it, and the frames
	// after redraw only what changed since.
	steps views.StepBar
}

// loadTimeout bounds a reload of the model from the database; what it
// could not read is missing from the panels until the next one.
const loadTimeout = 5 * time.Second

// load fills the model from the database, for a start, after the
// projector fell behind, or after other servers' events were lost.
func (p *Board) load(ctx context.Context) {
	// The projector applies no event while it loads: a database that
	// does not answer must not stop the live pages for longer than this.
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	keys, err := p.cfg.Store.RecentKeys(ctx, liveKeys)
	if err != nil && ctx.Err() == nil {
		p.logf("live: loading keys: %v", err)
	}
	recent, total := p.loadCharges(ctx)
	// The lab's unguarded charges are charges too: the events drew them
	// as such, and a board loaded again (a restart, a gap) counts them as
	// the one that saw them happen did, or it would state fewer charges
	// than the books hold.
	loose, err := p.cfg.Store.LabLooseCharges(ctx)
	if err != nil && ctx.Err() == nil {
		p.logf("live: loading the lab's unguarded charges: %v", err)
	}
	if len(loose) > 0 {
		total += len(loose)
		recent = append(recent, loose...)
		slices.SortStableFunc(recent, func(a, b pay.Charge) int { return b.CreatedAt.Compare(a.CreatedAt) }) // newest first
	}
	faults := p.currentSwitches()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = p.keys[:0]
	for _, k := range keys {
		p.keys = append(p.keys, &views.KeyRow{ID: keyDOMID(k.Scope, k.Key), Scope: k.Scope, Key: k.Key, PersonalData: pay.PersonalData(k.Key),
			Fingerprint: k.Fingerprint, OrderID: shortOrderID(k.OrderID), Amount: k.AmountSatang, Status: k.Status,
			Code: k.ResponseStatus, Created: k.CreatedAt})
	}
	p.forgetCharges()
	p.charges = p.charges[:0]
	// Oldest first, so that "charged again" marks the later charge.
	for i := len(recent) - 1; i >= 0; i-- {
		c := recent[i]
		if _, ok := p.seen.get(c.ID); !ok {
			p.seen.put(c.ID, struct{}{})
		}
		o := p.order(c.Scope, c.OrderID)
		p.charged(o)
		if i < liveCharges {
			p.charges = append(p.charges, views.ChargeRow{ID: chargeDOMID(c.ID, c.Scope, c.Key), Charge: c.ID,
				Scope: c.Scope, Key: c.Key, OrderID: shortOrderID(c.OrderID), Amount: c.AmountSatang, Time: c.CreatedAt, Repeat: o.charges > 1})
		}
	}
	p.counters.Charges = total
	p.faults = faults
}

// loadChargeTries bounds the reads of loadCharges while charges keep
// being made under it.
const loadChargeTries = 4

// loadCharges reads the newest charges and the count of all of them as
// one state of the books. The two are separate reads: a charge made
// between them would be in the count and not among the charges loaded,
// and its event, arriving after the load, would count it a second time.
// So the count is read before and after the charges, and the three reads
// are taken again (a few times at most) until the count did not move
// under them; only charges are added between two resets, so an unchanged
// count means the charges read are the ones counted.
func (p *Board) loadCharges(ctx context.Context) (recent []pay.Charge, total int) {
	for range loadChargeTries {
		before, err := p.cfg.Store.CountCharges(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.logf("live: counting charges: %v", err)
			}
			return recent, total
		}
		recent, err = p.cfg.Store.RecentCharges(ctx, 5000)
		if err != nil {
			if ctx.Err() == nil {
				p.logf("live: loading charges: %v", err)
			}
			return nil, before
		}
		total, err = p.cfg.Store.CountCharges(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.logf("live: counting charges: %v", err)
			}
			return recent, before
		}
		if total == before {
			return recent, total
		}
	}
	return recent, total
}

// currentSwitches reads every switch for the panel.
func (p *Board) currentSwitches() views.FaultSwitches { return p.cfg.Switches() }

// Snapshot copies the model: the state after event Seq. A resting board
// is woken first (rest.go), so that the copy is what the books hold.
func (p *Board) Snapshot() views.Live {
	for {
		p.wake()
		p.mu.Lock()
		if !p.rest.resting {
			defer p.mu.Unlock()
			return p.snapshotLocked()
		}
		// It rested again between the wake and the lock.
		p.mu.Unlock()
	}
}

func (p *Board) snapshotLocked() views.Live {
	if p.dirty {
		// A page drawn from this has charges the frames have not drawn:
		// the next frame draws the list whole, for every page alike.
		p.shown = nil
	}
	p.keysUnknown()
	p.chargesUnknown()
	l := views.Live{Epoch: p.cfg.Hub.Epoch(), Seq: p.modelSeq, Now: p.cfg.Clock.Now(), Counters: p.countersLocked(), Faults: p.faults, Steps: p.steps}
	if !p.place.IsZero() {
		l.Place = p.place.String()
	}
	for _, r := range p.rows {
		c := *r
		c.Steps = slices.Clone(r.Steps)
		l.Timeline = append(l.Timeline, c)
	}
	for _, k := range p.keys {
		l.Keys = append(l.Keys, *k)
	}
	l.Charges = slices.Clone(p.charges)
	slices.Reverse(l.Charges) // newest first
	return l
}

func (p *Board) snapshotKeysLocked() []views.KeyRow {
	out := make([]views.KeyRow, len(p.keys))
	for i, k := range p.keys {
		out[i] = *k
	}
	return out
}

// loadKeys reads the newest key rows, after a prune.
func (p *Board) loadKeys() []views.KeyRow {
	ctx, cancel := context.WithTimeout(p.cfg.Ctx, loadTimeout)
	defer cancel()
	keys, err := p.cfg.Store.RecentKeys(ctx, liveKeys)
	if err != nil {
		p.logf("live: loading keys: %v", err)
	}
	out := make([]views.KeyRow, 0, len(keys))
	for _, k := range keys {
		out = append(out, views.KeyRow{ID: keyDOMID(k.Scope, k.Key), Scope: k.Scope, Key: k.Key, PersonalData: pay.PersonalData(k.Key),
			Fingerprint: k.Fingerprint, OrderID: shortOrderID(k.OrderID), Amount: k.AmountSatang, Status: k.Status,
			Code: k.ResponseStatus, Created: k.CreatedAt})
	}
	return out
}
