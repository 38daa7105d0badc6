package live

import (
	"strconv"
	"strings"
	"sync"
)

// The room's order. When several servers share one database, each hub
// numbers the events it holds in the order they reached it: its own at
// once, the others' when they arrive. Those numbers differ from server to
// server. The relay (web/room/relay.go) also gives every event it carries
// a place in one order that every server of the room shares: the number
// of its batch in the database, the part of the batch and the event's
// rank within the part. Each server, the one that sent the batch
// included, hears the batches in that order (reading back those it
// missed), and keeps the events here in it: the same events at the same
// places on every server, which a page can name and resume from on any
// of them.
//
// Only what the relay sends is placed: a server's events that concern it
// alone (its own "watch for" ticks, its gaps) and the events of a server
// that heard no other yet are not.

// Place is an event's place in the room's order: part I of batch N, the
// J-th event of that part (I and J from 1), numbered in the order's
// generation G (pay/peers.Part: a crash of the database may number batches
// again, in a new generation; 0 when the batch did not say). The zero
// Place is before every event.
type Place struct{ G, N, I, J uint64 }

// After reports whether p comes after q: a later generation comes after
// every place of an earlier one.
func (p Place) After(q Place) bool {
	switch {
	case p.G != q.G:
		return p.G > q.G
	case p.N != q.N:
		return p.N > q.N
	case p.I != q.I:
		return p.I > q.I
	}
	return p.J > q.J
}

// IsZero says whether p is the zero Place.
func (p Place) IsZero() bool { return p == Place{} }

// String is p as a page is given it: "N.I.J.G", or "N.I.J" when G is 0.
func (p Place) String() string {
	s := strconv.FormatUint(p.N, 10) + "." + strconv.FormatUint(p.I, 10) + "." + strconv.FormatUint(p.J, 10)
	if p.G != 0 {
		s += "." + strconv.FormatUint(p.G, 10)
	}
	return s
}

// ParsePlace reads a Place written by String; ok is false for anything
// else.
func ParsePlace(s string) (p Place, ok bool) {
	n, rest, ok1 := strings.Cut(s, ".")
	i, rest, ok2 := strings.Cut(rest, ".")
	j, g, generation := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return Place{}, false
	}
	var err1, err2, err3, err4 error
	p.N, err1 = strconv.ParseUint(n, 10, 64)
	p.I, err2 = strconv.ParseUint(i, 10, 64)
	p.J, err3 = strconv.ParseUint(j, 10, 64)
	if generation {
		if p.G, err4 = strconv.ParseUint(g, 10, 64); err4 == nil && p.G == 0 {
			return Place{}, false
		}
	}
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || p.N == 0 || p.I == 0 || p.J == 0 {
		return Place{}, false
	}
	return p, true
}

// Placed is an event at its place in the room's order.
type Placed struct {
	Place Place
	Event Event
}

// DefaultOrdered is how many placed events a hub keeps.
const DefaultOrdered = DefaultSize

// roomOrder keeps the newest placed events, in their order, and where
// that order holds without a hole: from the first event placed after the
// last break on.
type roomOrder struct {
	mu   sync.Mutex
	ring []Placed
	// n counts the events placed since the hub started; the newest is at
	// ring[(n-1) % len(ring)].
	n uint64
	// since is the n of the first event placed after the last break:
	// events before it may have a hole after them.
	since uint64
}

// Place keeps the events of one part of a batch at their places (part I
// of batch n of generation g, in order), after every event placed before.
// The relay calls it in the room's order; entries is read, not kept.
func (h *Hub) Place(g, n, i uint64, entries []Entry) {
	o := &h.order
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ring == nil {
		o.ring = make([]Placed, DefaultOrdered)
	}
	size := uint64(len(o.ring))
	for j := range entries {
		slot := &o.ring[o.n%size]
		slot.Place = Place{G: g, N: n, I: i, J: uint64(j) + 1}
		slot.Event = entries[j].Event
		slot.Event.Seq = 0 // each hub's own number, not the room's
		o.n++
	}
}

// BreakOrder says that the room's order has a hole here: batches were
// lost for good, or the database numbered some again. No place before
// the break is followed here by what came after it.
func (h *Hub) BreakOrder() {
	o := &h.order
	o.mu.Lock()
	o.since = o.n
	o.mu.Unlock()
}

// PlacedAfter returns the events placed after p, in the room's order, and
// whether this hub holds every one of them: false when p is older than
// what it keeps, comes before a break, or was never placed here. The
// zero Place asks for every event held since the last break.
func (h *Hub) PlacedAfter(p Place) ([]Placed, bool) {
	o := &h.order
	o.mu.Lock()
	defer o.mu.Unlock()
	from, ok := o.findLocked(p)
	if !ok {
		return nil, false
	}
	size := uint64(len(o.ring))
	out := make([]Placed, 0, o.n-from)
	for k := from; k < o.n; k++ {
		out = append(out, o.ring[k%size])
	}
	return out, true
}

// HoldsPlace reports whether PlacedAfter(p) would hold every event after
// p, without copying them.
func (h *Hub) HoldsPlace(p Place) bool {
	o := &h.order
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.findLocked(p)
	return ok
}

// findLocked returns the count of events placed up to p, included, and
// whether every event after p is held (see PlacedAfter). Callers hold
// o.mu.
func (o *roomOrder) findLocked(p Place) (from uint64, ok bool) {
	size := uint64(len(o.ring))
	oldest := o.since
	if o.n > size && o.n-size > oldest {
		oldest = o.n - size
	}
	if p.IsZero() {
		return oldest, true
	}
	// p itself must be held, past any break, for what follows it to be
	// known whole: it is looked for from the newest back.
	for k := o.n; k > oldest; k-- {
		at := o.ring[(k-1)%size].Place
		if at == p {
			return k, true
		}
		if !at.After(p) {
			break
		}
	}
	return 0, false
}

// LastPlace is the place of the newest event placed, zero if none.
func (h *Hub) LastPlace() Place {
	o := &h.order
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == 0 {
		return Place{}
	}
	return o.ring[(o.n-1)%uint64(len(o.ring))].Place
}
