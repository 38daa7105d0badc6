package web

import (
	"errors"
	"net/http"
	"slices"
	"sync"

	"paytwice/web/live"
)

// Narration that follows the room: each chapter's "Watch for" items tick
// off, on every page, when the server sees the event they describe (the
// second charge of an order, the 409, the replay, the sweeper's close),
// and the item names the timeline row that made its point, which the
// board highlights.
//
// The narrator reads the event stream like any viewer, in its own
// goroutine: the payment path never waits for it.

// watchTick is one "Watch for" item's state.
type watchTick struct {
	Seen bool
	Row  string // the timeline row (DOM id) that made the point
}

// narrationState is what a chapter's checks remember of the events.
type narrationState struct {
	orderCharges map[string]int      // scope+order → charges
	keyCharges   map[string]int      // scope+key → charges
	orderKeys    map[string][]string // scope+order → keys seen
	keyEvents    map[string]map[live.Kind]int
	pruned       bool
	twiceOrder   string // the first order charged twice
	// The keys and orders remembered, in rings: beyond narrationLimit of
	// each the oldest are forgotten, so that a lesson that runs for hours
	// holds no more than a few megabytes.
	keysIn, ordersIn recentRing
}

// recentRing holds the last narrationLimit strings added.
type recentRing struct {
	ring []string
	next int
}

// add puts s in the ring and returns the string it pushed out, if any.
func (r *recentRing) add(s string) (out string, full bool) {
	if len(r.ring) < narrationLimit {
		r.ring = append(r.ring, s)
		return "", false
	}
	out, r.ring[r.next] = r.ring[r.next], s
	r.next = (r.next + 1) % narrationLimit
	return out, true
}

// narrationLimit bounds the keys and the orders a chapter's checks
// remember. A chapter's point is made by a few requests in a row; a key
// ten thousand keys ago makes none.
const narrationLimit = 10_000

// rememberKey notes that key is remembered, forgetting the oldest beyond
// the limit.
func (st *narrationState) rememberKey(key string) {
	if _, ok := st.keyEvents[key]; ok {
		return
	}
	st.keyEvents[key] = map[live.Kind]int{}
	if old, full := st.keysIn.add(key); full {
		delete(st.keyEvents, old)
		delete(st.keyCharges, old)
	}
}

// rememberOrder is rememberKey for orders.
func (st *narrationState) rememberOrder(order string) {
	if _, ok := st.orderCharges[order]; ok {
		return
	}
	st.orderCharges[order] = 0
	if old, full := st.ordersIn.add(order); full {
		delete(st.orderCharges, old)
		delete(st.orderKeys, old)
	}
}

func newNarrationState() narrationState {
	return narrationState{orderCharges: map[string]int{}, keyCharges: map[string]int{}, orderKeys: map[string][]string{},
		keyEvents: map[string]map[live.Kind]int{}}
}

// narrator ticks the running chapter's items.
type narrator struct {
	s     *Server
	start sync.Once
	mu    sync.Mutex
	slug  string
	ticks []watchTick
	st    narrationState
}

// watchKind tells the pages that an item ticked: it draws nothing but
// makes the pages ask for the lesson again.
const watchKind live.Kind = "watch"

// begin starts a chapter's narration ("" for none).
func (n *narrator) begin(slug string, items int) {
	if slug != "" {
		// Read the events from the first lesson on: a server that never
		// teaches has no reader here.
		n.start.Do(func() {
			sub := n.s.hub.Subscribe(n.s.hub.LastSeq())
			go n.run(sub)
		})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.slug, n.ticks, n.st = slug, make([]watchTick, items), newNarrationState()
}

// ticked returns the chapter's ticks, if slug is the chapter narrated.
func (n *narrator) ticked(slug string) []watchTick {
	n.mu.Lock()
	defer n.mu.Unlock()
	if slug != n.slug {
		return nil
	}
	return append([]watchTick(nil), n.ticks...)
}

// run reads the events until the server stops.
func (n *narrator) run(sub *live.Subscription) {
	ctx := n.s.baseCtx
	for {
		entries, err := sub.Next(ctx)
		if errors.Is(err, live.ErrTooSlow) {
			sub = n.s.hub.Subscribe(n.s.hub.LastSeq())
			continue
		}
		if err != nil {
			return
		}
		changed := false
		for _, e := range entries {
			if n.see(e.Event) {
				changed = true
			}
		}
		if changed {
			n.s.lab.lessonSeq.Add(1)
			n.s.hub.Publish(live.Event{Kind: watchKind})
		}
	}
}

// see applies one event and reports whether an item ticked.
func (n *narrator) see(e live.Event) bool {
	if e.Kind == watchKind {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.slug == "" {
		return false
	}
	st := &n.st
	order, key := e.Scope+"\x00"+e.OrderID, e.Scope+"\x00"+e.Key
	if e.Key != "" {
		st.rememberKey(key)
		st.keyEvents[key][e.Kind]++
	}
	if e.OrderID != "" {
		st.rememberOrder(order)
	}
	switch e.Kind {
	case live.Received:
		if ks := st.orderKeys[order]; e.OrderID != "" && e.Key != "" && !slices.Contains(ks, e.Key) {
			st.orderKeys[order] = append(ks, e.Key)
		}
	case live.Charged:
		st.orderCharges[order]++
		st.keyCharges[key]++
		if st.orderCharges[order] == 2 && st.twiceOrder == "" {
			st.twiceOrder = order
		}
	case live.Swept:
		if e.Sweep == live.SweepCharged {
			st.orderCharges[order]++
			st.keyCharges[key]++
		}
	case live.Pruned:
		st.pruned = true
	}
	row := ""
	if e.Request != "" {
		row = "tl-" + e.Request
	}
	changed := false
	tick := func(i int, ok bool) {
		if ok && i < len(n.ticks) && !n.ticks[i].Seen {
			n.ticks[i] = watchTick{Seen: true, Row: row}
			changed = true
		}
	}
	seen := func(i int) bool { return i < len(n.ticks) && n.ticks[i].Seen }
	twice := e.Kind == live.Charged && st.orderCharges[order] == 2
	switch n.slug {
	case "connection-never-happens":
		tick(0, e.Kind == live.Dropped)
		tick(2, e.Kind == live.Dropped)
		tick(1, seen(0) && e.Kind == live.Charged)
	case "fails-halfway":
		tick(0, e.Kind == live.Conflict && st.keyEvents[key][live.RolledBack] > 0)
		tick(1, e.Kind == live.Swept && e.Sweep == live.SweepCharged)
		tick(2, seen(1) && e.Kind == live.Replayed && e.Status == http.StatusCreated && st.orderCharges[order] == 1)
	case "response-lost":
		tick(0, e.Kind == live.ResponseLost)
		replay := e.Kind == live.Replayed && e.Status == http.StatusCreated && st.keyEvents[key][live.ResponseLost] > 0
		tick(1, replay)
		tick(2, replay && st.orderCharges[order] == 1)
	case "no-key":
		tick(0, twice)
		tick(1, twice)
	case "new-key-per-retry":
		tick(0, e.Kind == live.Received && len(st.orderKeys[order]) >= 2)
		tick(1, twice)
	case "check-then-insert":
		tick(0, e.Kind == live.Charged && st.keyCharges[key] == 2)
		tick(1, seen(0) && st.keyCharges[key] == 1 && (e.Kind == live.Conflict || e.Kind == live.Replayed ||
			(e.Kind == live.Rejected && e.Status == http.StatusInternalServerError)))
	case "lock-in-memory":
		tick(0, e.Kind == live.Replayed && st.keyCharges[key] == 1)
		tick(1, e.Kind == live.Charged && st.keyCharges[key] == 2)
		tick(2, e.Kind == live.Charged && st.keyCharges[key] == 2)
	case "retry-every-4xx":
		again := e.Kind == live.Mismatch && st.keyEvents[key][live.Mismatch] >= 2
		tick(0, again)
		tick(1, again)
	case "new-key-after-500":
		tick(0, twice)
		tick(1, seen(0) && e.Kind == live.Completed && e.Status == http.StatusInternalServerError && order != st.twiceOrder && st.orderCharges[order] == 1)
	case "personal-data-key":
		pii := e.Key != "" && PersonalData(e.Key) != ""
		tick(0, pii && e.Kind == live.Claimed)
		tick(1, pii && e.Kind == live.Claimed)
		tick(2, pii && e.Kind == live.Mismatch)
	case "prune-too-soon":
		tick(0, e.Kind == live.Pruned)
		tick(1, st.pruned && twice)
		tick(2, seen(1) && e.Kind == live.Replayed)
	}
	return changed
}
