package board

import (
	"slices"

	"github.com/a-h/templ"

	"paytwice/views"
)

// chargesQuiet notes, before a charge that no frame draws, the charges
// table as the pages have it (its rows' ids, oldest first): a caller over
// its share of the board has its charges counted with no frame of their
// own, and the frame that draws its row draws them too (chargeOps), or the
// table would lack them while the counters count them. p.mu is held.
func (p *Board) chargesQuiet() {
	p.chargesShown.quiet(func() []string {
		ids := make([]string, len(p.charges))
		for i, c := range p.charges {
			ids[i] = c.ID
		}
		return ids
	})
}

// chargesDrawn notes that a frame draws the whole charges table.
func (p *Board) chargesDrawn() { p.chargesShown.drawn() }

// chargesUnknown notes that a page is drawn from the model (onPages.unknown).
func (p *Board) chargesUnknown() { p.chargesShown.unknown() }

// chargeOps brings the charges table on the pages up to the board's: the
// charges made since are inserted at the top, oldest first, and the rows
// that fell off the table deleted. The table is drawn whole when the
// pages' copy is not known, when the rows kept are not the oldest of the
// board's, or when every row is new. In a refresh frame each insertion
// first deletes its row (see orderOps). Nothing when the pages have the
// board's table already.
func (p *Board) chargeOps(refresh bool) []templ.Component {
	was := p.chargesShown
	if !was.ahead {
		return nil
	}
	p.chargesDrawn()
	now := p.cfg.Clock.Now()
	newestFirst := slices.Clone(p.charges)
	slices.Reverse(newestFirst)
	whole := []templ.Component{redrawOf("charges-body", inTable(views.ChargesBody(newestFirst, now, true)))}
	if !was.known {
		return whole
	}
	had := make(map[string]bool, len(was.shown))
	for _, id := range was.shown {
		had[id] = true
	}
	fresh := 0
	for fresh < len(p.charges) && !had[p.charges[len(p.charges)-1-fresh].ID] {
		fresh++
	}
	old := p.charges[:len(p.charges)-fresh]
	if fresh >= len(p.charges) {
		return whole
	}
	kept := make(map[string]bool, len(old))
	for _, c := range old {
		if !had[c.ID] {
			return whole
		}
		kept[c.ID] = true
	}
	var ops []templ.Component
	for _, id := range was.shown {
		if !kept[id] {
			ops = append(ops, partOf("charges-body", "", views.FrameDelete(id)))
		}
	}
	for _, c := range p.charges[len(old):] {
		if refresh {
			ops = append(ops, partOf("charges-body", "", views.FrameDelete(c.ID)))
		}
		ops = append(ops, partOf("charges-body", "", views.FrameInsertCharge(c, now)))
	}
	return ops
}
