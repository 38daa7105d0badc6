package live

import (
	"slices"
	"strings"
	"sync"
)

// The ring is the hub's transport: viewers and the relay read it, and a
// busy room overwrites it in a second. What the class reads back (the
// timeline's export, the events a page asks about) is kept apart, in
// shares: each source (a client address, or a caller's scope when the
// event came from another server) holds its own payments' events and,
// apart, its notes (delivery reports, look-ups); the room's own events
// (switches, resets, sweeps, lessons) have a share of their own. A share
// that is full forgets its own oldest event, and when all of them
// together hold the most the hub keeps, the largest share forgets its
// oldest: however many deliveries, simulations or payments one student
// sends, the others' payments and the room's events keep their place.

// Share is how a kept event is counted: by its source, or, for an event
// with none, by its scope (a bearer token's callers), and its class. The
// scope is a field of its own rather than a name such as "scope <scope>":
// every event published goes through shareOf, and building that name
// cost each of them an allocation (with three servers, every server
// publishes every server's events).
type share struct{ source, scope, class string }

const (
	classPayment = "payment"
	classNote    = "note"
	classRoom    = "room"
)

// shareOf says which share e belongs to.
func shareOf(e *Event) share {
	src, scope := e.Source, ""
	if src == "" {
		scope = e.Scope
	}
	switch {
	case e.Kind == Delivered || e.Kind == Undelivered || e.Kind == LookedUp:
		return share{src, scope, classNote}
	case e.Request != "":
		return share{src, scope, classPayment}
	case e.Kind == Swept || e.Kind == Pruned || e.Kind == Switched || e.Kind == Reset || e.Kind == Gap || src == "" && scope == "":
		return share{class: classRoom}
	}
	// Something else a caller's action made (the lab's flag on a key):
	// counted with that caller's notes.
	return share{src, scope, classNote}
}

// keeper holds the kept events in their shares.
type keeper struct {
	mu        sync.Mutex
	perShare  int
	total     int
	count     int
	shares    map[share]*eventQueue
	biggest   *eventQueue
	biggestOf share
}

// eventQueue is one share's events, oldest first, in a ring: a full
// share takes one event in and lets its oldest go on every event, and a
// ring does that without moving the others (a slice whose front was let
// go copied half of them now and then, and allocated a new array each
// time).
type eventQueue struct {
	events []Event // the ring; its length is its capacity
	head   int     // the oldest event
	n      int     // how many it holds
}

func (q *eventQueue) len() int { return q.n }

func (q *eventQueue) push(e Event) {
	if q.n == len(q.events) {
		q.resize(max(16, 2*len(q.events)))
	}
	q.events[(q.head+q.n)%len(q.events)] = e
	q.n++
}

func (q *eventQueue) pop() {
	q.events[q.head] = Event{}
	q.head = (q.head + 1) % len(q.events)
	q.n--
	// Let the ring shrink with the share, so that a share cut down to a
	// few events does not keep the room it once needed.
	if len(q.events) > 64 && q.n*4 < len(q.events) {
		q.resize(len(q.events) / 2)
	}
}

// resize moves the events to a ring of size, oldest first.
func (q *eventQueue) resize(size int) {
	events := make([]Event, size)
	q.appendTo(events[:0])
	q.events, q.head = events, 0
}

// appendTo appends the events to out, oldest first.
func (q *eventQueue) appendTo(out []Event) []Event {
	if q.n == 0 {
		return out
	}
	end := q.head + q.n
	if end <= len(q.events) {
		return append(out, q.events[q.head:end]...)
	}
	out = append(out, q.events[q.head:]...)
	return append(out, q.events[:end-len(q.events)]...)
}

func newKeeper(perShare, total int) *keeper {
	return &keeper{perShare: perShare, total: max(total, perShare), shares: map[share]*eventQueue{}}
}

// add keeps a copy of e.
func (k *keeper) add(e *Event) {
	sh := shareOf(e)
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.shares[sh]
	if q == nil {
		// A relayed event's strings are slices of its notification: the
		// map keeps copies, not the notification the share began with.
		sh.source, sh.scope = strings.Clone(sh.source), strings.Clone(sh.scope)
		q = &eventQueue{}
		k.shares[sh] = q
	}
	if q.len() >= k.perShare {
		q.pop()
		k.count--
	}
	q.push(*e)
	k.count++
	if k.biggest == nil || q.len() > k.biggest.len() {
		k.biggest, k.biggestOf = q, sh
	}
	for k.count > k.total {
		b := k.biggest
		b.pop()
		k.count--
		if b.len() == 0 {
			delete(k.shares, k.biggestOf)
			k.findBiggest()
		}
	}
}

func (k *keeper) findBiggest() {
	k.biggest = nil
	for sh, q := range k.shares {
		if k.biggest == nil || q.len() > k.biggest.len() {
			k.biggest, k.biggestOf = q, sh
		}
	}
}

// events returns every kept event, oldest first.
func (k *keeper) events() []Event {
	k.mu.Lock()
	out := make([]Event, 0, k.count)
	for _, q := range k.shares {
		out = q.appendTo(out)
	}
	k.mu.Unlock()
	slices.SortFunc(out, func(a, b Event) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return out
}

func (k *keeper) clear() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.shares, k.count, k.biggest = map[share]*eventQueue{}, 0, nil
}

// Default shares of the kept timeline (SetShares).
const (
	DefaultKeptPerSource = 4096
	DefaultKeptTotal     = 32768
)

// SetShares sets how many events one share of the kept timeline holds and
// how many all of them hold together; call it before the first Publish.
func (h *Hub) SetShares(perSource, total int) {
	h.kept = newKeeper(perSource, total)
}

// Kept returns the kept timeline, oldest first: every event still held in
// its share (see the top of this file).
func (h *Hub) Kept() []Event { return h.kept.events() }
