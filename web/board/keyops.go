package board

import (
	"github.com/a-h/templ"

	"paytwice/views"
)

// keysQuiet notes, before a change of the key rows that no frame draws,
// the key table as the pages have it (newest first): the frame that later
// draws the rows (keyOps) changes the pages' table a row at a time rather
// than redrawing its liveKeys rows on every page, which a flooding caller
// made every page receive twice a second. p.mu is held.
func (p *Board) keysQuiet() { p.keysShown.quiet(p.snapshotKeysLocked) }

// keysDrawn notes that a frame draws the whole key table: the pages have
// the board's.
func (p *Board) keysDrawn() { p.keysShown.drawn() }

// keysUnknown notes that a page is drawn from the model (onPages.unknown).
func (p *Board) keysUnknown() { p.keysShown.unknown() }

// keyOps brings the key table on the pages from what the frames left
// there to the board's rows: the rows gone are deleted, the new ones
// (which a flood adds at the top) inserted, and the rows whose status,
// code or hits changed redrawn, each by itself. The table is drawn whole
// only when the pages' copy is not known or the change is not one of rows
// added at the top (a prune, a reload: nothing else reorders it). A
// flood of a new key every few milliseconds, which turns the table over
// between two frames, still costs its rows: the new ones go in as one
// fragment, and the rows that left go out by id, a few dozen bytes each,
// so a frame's bytes follow the rows that changed, not the table.
// Nothing when the pages have the board's table already. For a refresh
// frame, which a page may take twice (see orderOps), each new row's
// insertion first deletes the row, so that taking it again does not show
// it twice.
func (p *Board) keyOps(refresh bool) []templ.Component {
	was := p.keysShown
	if !was.ahead {
		return nil
	}
	p.keysDrawn()
	now := p.cfg.Clock.Now()
	whole := []templ.Component{redrawOf("keys-body", inTable(views.KeysBody(p.snapshotKeysLocked(), now, true)))}
	if !was.known {
		return whole
	}
	before := make(map[string]int, len(was.shown))
	for i, k := range was.shown {
		before[k.ID] = i
	}
	// The new rows are the top of the board's table; the rows below them
	// are rows the pages have, in the pages' order.
	fresh := 0
	for fresh < len(p.keys) {
		if _, ok := before[p.keys[fresh].ID]; ok {
			break
		}
		fresh++
	}
	kept := make(map[string]bool, len(p.keys)-fresh)
	last := -1
	for _, k := range p.keys[fresh:] {
		i, ok := before[k.ID]
		if !ok || i < last {
			return whole
		}
		last = i
		kept[k.ID] = true
	}
	var changed []*views.KeyRow
	for _, k := range p.keys[fresh:] {
		if *k != was.shown[before[k.ID]] {
			changed = append(changed, k)
		}
	}
	var ops []templ.Component
	for _, k := range was.shown {
		if !kept[k.ID] {
			ops = append(ops, partOf("keys-body", "", views.FrameDelete(k.ID)))
		}
	}
	for _, k := range changed {
		ops = append(ops, partOf("keys-body", k.ID, inTable(views.KeyRowView(*k, now, true))))
	}
	if fresh == 0 {
		return ops
	}
	if refresh {
		for _, k := range p.keys[:fresh] {
			ops = append(ops, partOf("keys-body", "", views.FrameDelete(k.ID)))
		}
	}
	rows := make([]views.KeyRow, fresh)
	for i, k := range p.keys[:fresh] {
		rows[i] = *k
	}
	return append(ops, partOf("keys-body", "", views.FrameInsertKeys(rows, now)))
}
