package board

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"paytwice/views"
)

// orderBook is what the board remembers of the orders charged lately, to
// list them and to spot an order charged twice.
type orderBook struct {
	seen   boundedMap[string, struct{}]      // charge ids counted, so none counts twice
	orders boundedMap[orderRef, *orderState] // the orders charged lately
	twiceN int                               // orders charged more than once
	onceN  int                               // orders charged exactly once
	recent []*orderState                     // the latest orders charged, newest first
	twice  []*orderState                     // the latest orders charged more than once, oldest first
	// shown is the list as the frames made so far leave it on a page,
	// which the next charge's frame changes an order at a time
	// (orderOps); nil when a page may have another (the board was
	// reloaded, or a page was drawn from the model while dirty), so that
	// the next frame draws it whole.
	shown *views.Counters
	// dirty says charges were counted that no frame has drawn yet (busy
	// mode, a caller over its share): the model's list is not shown's.
	dirty bool
}

type orderState struct {
	id             string // the order's item in the page (orderDOMID)
	scope, orderID string
	charges        int
}

// orderRef names an order within its scope: the board's map key for
// it, compared field by field, so that finding an order allocates
// nothing.
type orderRef struct{ scope, orderID string }

// boundedMap remembers the entries put in it lately, in two generations:
// the current one takes new entries until it holds half the limit, then
// becomes the previous one, and the previous one is forgotten whole. It
// holds between half the limit and the limit of the newest entries.
// Forgetting the oldest entry at each addition instead (a lookup, an
// insert and a delete in a map of thousands, for every charge) cost more
// than twice as much, and three servers' charges reach every server.
type boundedMap[K comparable, V any] struct {
	half      int
	cur, prev map[K]V
}

func newBoundedMap[K comparable, V any](limit int) boundedMap[K, V] {
	half := max(1, limit/2)
	return boundedMap[K, V]{half: half, cur: make(map[K]V, half)}
}

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	if v, ok := b.cur[k]; ok {
		return v, true
	}
	v, ok := b.prev[k]
	return v, ok
}

// len is how many entries b holds.
func (b *boundedMap[K, V]) len() int { return len(b.cur) + len(b.prev) }

// put adds k, which get did not find, and returns the generation it
// forgot to make room, if it forgot one.
func (b *boundedMap[K, V]) put(k K, v V) (forgotten map[K]V) {
	if len(b.cur) >= b.half {
		forgotten, b.prev, b.cur = b.prev, b.cur, make(map[K]V, b.half)
	}
	b.cur[k] = v
	return forgotten
}

// forgetCharges empties what the board knows of charges and orders.
func (p *Board) forgetCharges() {
	p.seen = newBoundedMap[string, struct{}](liveSeenLimit)
	p.orders = newBoundedMap[orderRef, *orderState](liveOrderLimit)
	p.recent, p.twice, p.twiceN, p.onceN = nil, nil, 0, 0
	p.shown, p.dirty = nil, false
}

// order returns the charge count of an order, starting one if needed. An
// order charged again moves to the newer generation, so that an order
// charged twice is not forgotten sooner than one charged once since; the
// orders of the generation that makes room are forgotten.
func (p *Board) order(scope, orderID string) *orderState {
	k := orderRef{scope, orderID}
	if o, ok := p.orders.cur[k]; ok {
		return o
	}
	o, ok := p.orders.prev[k]
	if ok {
		delete(p.orders.prev, k)
	} else {
		o = &orderState{id: orderDOMID(scope, orderID), scope: scope, orderID: orderID}
	}
	for _, old := range p.orders.put(k, o) {
		if old.charges == 1 {
			p.onceN--
		}
	}
	return o
}

// countersLocked is the counters with the orders list as the board shows
// it.
func (p *Board) countersLocked() views.Counters {
	c := p.counters
	c.Orders, c.Twice = nil, p.twiceN
	// Every order charged twice (the newest OrdersListed of them), then the
	// most recently charged, in order number: a student finds theirs as
	// in an index, and the red ones stand out wherever they fall.
	for _, o := range p.twice {
		c.Orders = append(c.Orders, o.count())
	}
	for _, o := range p.recent {
		if len(c.Orders) >= OrdersListed {
			break
		}
		if o.charges == 1 {
			c.Orders = append(c.Orders, o.count())
		}
	}
	// The order is total (two orders whose numbers shorten alike differ
	// in their ids): the frames insert an order before the one that
	// follows it, which must follow it on every page alike.
	sort.Slice(c.Orders, func(i, j int) bool {
		a, b := c.Orders[i], c.Orders[j]
		if a.OrderID != b.OrderID {
			return orderNumberLess(a.OrderID, b.OrderID)
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		return a.ID < b.ID
	})
	// The orders charged once that the list leaves out: a student who
	// does not find theirs learns why.
	listed := 0
	for _, o := range c.Orders {
		if o.Charges == 1 {
			listed++
		}
	}
	c.MoreOrders = max(p.onceN-listed, 0)
	return c
}

// count is the order as the list shows it.
func (o *orderState) count() views.OrderCount {
	return views.OrderCount{ID: o.id, Scope: o.scope, OrderID: shortOrderID(o.orderID), Charges: o.charges}
}

// charged counts one more charge for an order.
func (p *Board) charged(o *orderState) {
	o.charges++
	switch o.charges {
	case 1:
		p.onceN++
	case 2:
		p.onceN--
	}
	if o.charges == 2 {
		p.twiceN++
		p.twice = append(p.twice, o)
		if len(p.twice) > OrdersListed {
			p.twice = slices.Delete(p.twice, 0, 1)
		}
	}
	if i := slices.Index(p.recent, o); i >= 0 {
		p.recent = slices.Delete(p.recent, i, i+1)
	}
	p.recent = slices.Insert(p.recent, 0, o)
	if len(p.recent) > OrdersListed {
		p.recent = p.recent[:OrdersListed]
	}
}

// orderNumberLess orders order numbers as people read them on the board:
// a run of digits compares by its value, so A-999 comes before A-1000,
// as the list of a class whose orders the API numbered from 1 should
// read. Numbers of equal value fall back on their text, so
// the order stays total.
func orderNumberLess(a, b string) bool {
	if c := compareNatural(a, b); c != 0 {
		return c < 0
	}
	return a < b
}

// compareNatural compares a and b byte by byte, but each run of digits
// as one number.
func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// leadingDigits is the length of the run of ASCII digits s starts with.
func leadingDigits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}
