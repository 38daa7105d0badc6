package board

import (
	"github.com/a-h/templ"

	"paytwice/views"
)

// orderOps brings the charges per order list on the pages from what the
// frames left there (p.shown) to what the board knows now, an order at a
// time: a charge changes one order's count and moves at most one other
// order off the list, and a lecture hall's pages get those few items ten
// times a second rather than the whole list of OrdersListed. The list is
// drawn whole when the pages' copy is not known, or when a part of it
// appears or goes (the alarm, the note of orders left out, the words
// that there are none). For a refresh frame, which a page may take twice
// (it shares the id of the frame before it, and a page resuming from that
// id gets it again), each new order's insertion first deletes the order,
// so that taking it again does not list it twice.
func (p *Board) orderOps(refresh bool) []templ.Component {
	now := p.countersLocked()
	was := p.shown
	p.shown, p.dirty = &now, false
	if was == nil || (was.Twice > 0) != (now.Twice > 0) || (len(was.Orders) > 0) != (len(now.Orders) > 0) ||
		(was.MoreOrders > 0) != (now.MoreOrders > 0) {
		return []templ.Component{redrawOf("orders", views.OrdersView(now, true))}
	}
	var ops []templ.Component
	if was.Twice != now.Twice {
		ops = append(ops, partOf("orders", "orders-alarm", views.OrdersAlarm(now.Twice, true)))
	}
	type item struct {
		views.OrderCount
		shared bool
	}
	before := make(map[string]item, len(was.Orders))
	for i, o := range was.Orders {
		before[o.ID] = item{o, views.OrderIDShared(was.Orders, i)}
	}
	listed := make(map[string]bool, len(now.Orders))
	for _, o := range now.Orders {
		listed[o.ID] = true
	}
	for _, o := range was.Orders {
		if !listed[o.ID] {
			ops = append(ops, partOf("orders", "", views.FrameDelete(o.ID)))
		}
	}
	// From the end, so that the order a new one goes before is on the
	// page already: the orders both lists hold are in the same order in
	// each (countersLocked's order is total).
	for i := len(now.Orders) - 1; i >= 0; i-- {
		o := item{now.Orders[i], views.OrderIDShared(now.Orders, i)}
		old, ok := before[o.ID]
		switch {
		case !ok:
			next := ""
			if i+1 < len(now.Orders) {
				next = now.Orders[i+1].ID
			}
			if refresh {
				ops = append(ops, partOf("orders", "", views.FrameDelete(o.ID)))
			}
			ops = append(ops, partOf("orders", "", views.FrameInsertOrder(o.OrderCount, o.shared, next)))
		case old != o:
			ops = append(ops, partOf("orders", o.ID, views.OrderItem(o.OrderCount, o.shared, true)))
		}
	}
	if was.MoreOrders != now.MoreOrders {
		ops = append(ops, partOf("orders", "orders-more", views.MoreOrdersNote(now.MoreOrders, true)))
	}
	return ops
}

// countersDrawnLocked is the counters for a frame that draws them whole:
// the pages' list of orders is then this one.
func (p *Board) countersDrawnLocked() views.Counters {
	c := p.countersLocked()
	p.shown, p.dirty = &c, false
	return c
}

// countersOps draws every counter, one number at a time, and brings the
// list of orders up to date (orderOps), for a frame after charges counted
// with no frame of their own; refresh as for orderOps.
func (p *Board) countersOps(refresh bool) []templ.Component {
	var ops []templ.Component
	for _, t := range views.CounterTiles(p.counters) {
		ops = append(ops, redrawOf(t.ID, views.TileCount(t.ID, t.N, true)))
	}
	return append(ops, p.orderOps(refresh)...)
}
