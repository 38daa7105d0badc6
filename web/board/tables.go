package board

import (
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/a-h/templ"

	"paytwice/pay"
	"paytwice/views"
)

// The key and charge tables, as events change them.

// upsertKey changes the event's key row, inserting it at the top if the
// table does not have it.
func (p *Board) upsertKey(u *update, change func(*views.KeyRow)) {
	e := u.e
	if e.Key == "" {
		return
	}
	if u.quiet {
		p.keysQuiet()
	}
	if k := p.findKey(e.Scope, e.Key); k != nil {
		change(k)
		if !u.quiet {
			u.add(p.keyRowOps(k)...)
		}
		return
	}
	k := &views.KeyRow{ID: keyDOMID(e.Scope, e.Key), Scope: e.Scope, Key: e.Key, PersonalData: pay.PersonalData(e.Key), Fingerprint: e.Fingerprint, OrderID: shortOrderID(e.OrderID), Amount: e.Amount, Created: e.Time}
	change(k)
	p.keys = slices.Insert(p.keys, 0, k)
	var old *views.KeyRow
	if len(p.keys) > liveKeys {
		old = p.keys[len(p.keys)-1]
		p.keys[len(p.keys)-1] = nil
		p.keys = p.keys[:len(p.keys)-1]
	}
	switch {
	case u.quiet:
	case p.keysShown.ahead:
		u.add(p.keyOps(false)...)
	default:
		u.add(views.FrameInsertKeys([]views.KeyRow{*k}, p.cfg.Clock.Now()))
		if old != nil {
			u.add(views.FrameDelete(old.ID))
		}
	}
}

// keyRowOps draws a changed key row: by itself, or with the changes the
// pages have not had yet (keyOps).
func (p *Board) keyRowOps(k *views.KeyRow) []templ.Component {
	if p.keysShown.ahead {
		return p.keyOps(false)
	}
	return []templ.Component{redrawOf(k.ID, inTable(views.KeyRowView(*k, p.cfg.Clock.Now(), true)))}
}

// findKey returns the row of a key the table shows, nil if none. A row is
// found by its scope and key rather than by its id, which would have to
// be made (and allocated) for every event in busy mode.
func (p *Board) findKey(scope, key string) *views.KeyRow {
	for _, k := range p.keys {
		if k.Key == key && k.Scope == scope {
			return k
		}
	}
	return nil
}

// hitKey counts a request that found its key already there.
func (p *Board) hitKey(u *update) {
	if k := p.findKey(u.e.Scope, u.e.Key); k != nil {
		if u.quiet {
			p.keysQuiet()
		}
		k.Hits++
		if !u.quiet {
			u.add(p.keyRowOps(k)...)
		}
	}
}

func (p *Board) removeKey(u *update) {
	id := keyDOMID(u.e.Scope, u.e.Key)
	for i, k := range p.keys {
		if k.ID == id {
			if u.quiet {
				p.keysQuiet()
			}
			p.keys = slices.Delete(p.keys, i, i+1)
			if p.keysShown.ahead && !u.quiet {
				u.add(p.keyOps(false)...)
			} else {
				u.add(views.FrameDelete(id))
			}
			return
		}
	}
}

// addCharge records a charge, once per charge id.
func (p *Board) addCharge(u *update, chargeID string) {
	e := u.e
	if chargeID != "" {
		if _, ok := p.seen.get(chargeID); ok {
			return
		}
		p.seen.put(chargeID, struct{}{})
	}
	o := p.order(e.Scope, e.OrderID)
	p.charged(o)
	if u.quiet {
		p.dirty = true // no frame tells the pages of this charge yet
		p.chargesQuiet()
	}
	c := views.ChargeRow{ID: chargeDOMID(chargeID, e.Scope, e.Key), Charge: chargeID, Scope: e.Scope, Key: e.Key,
		OrderID: shortOrderID(e.OrderID), Amount: e.Amount, Time: e.Time, Repeat: o.charges > 1}
	p.charges = append(p.charges, c) // oldest first
	var old *views.ChargeRow
	if len(p.charges) > liveCharges {
		old = &p.charges[0]
		p.charges = p.charges[1:]
	}
	switch {
	case u.quiet:
	case p.chargesShown.ahead:
		u.add(p.chargeOps(false)...)
	default:
		u.add(views.FrameInsertCharge(c, p.cfg.Clock.Now()))
		if old != nil {
			u.add(views.FrameDelete(old.ID))
		}
	}
	p.counters.Charges++
}

// keyDOMID names a key row in the page without putting the key (any
// visible ASCII) into an id or a selector.
func keyDOMID(scope, key string) string { return scopedDOMID("k-", scope, key) }

// orderDOMID names an order's item in the charges per order list, from
// its scope and whole number (the list shows a number shortened).
func orderDOMID(scope, orderID string) string { return scopedDOMID("o-", scope, orderID) }

// scopedDOMID is an id for a page's element from a caller's scope and a
// name of its choosing, which may hold any visible ASCII.
func scopedDOMID(prefix, scope, name string) string {
	h := fnv.New64a()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return prefix + strconv.FormatUint(h.Sum64(), 36)
}

func chargeDOMID(chargeID, scope, key string) string {
	if chargeID != "" {
		return "c-" + chargeID
	}
	return "c" + keyDOMID(scope, key)
}
