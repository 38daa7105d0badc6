package lesson

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sync"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// Narration that follows the room: each chapter's "Watch for" items tick
// off, on every page, when the server sees the event they describe (the
// second charge of an order, the 409, the replay, the sweeper's close),
// and the item names the timeline row that made its point, which the
// board highlights.
//
// The narrator reads the event stream like any viewer, in its own
// goroutine: the payment path never waits for it. Which chapter it
// narrates it reads from the room's snapshot, at each event and each
// question: a lesson started, here or on another server, restarts it.

// watchFor is one "Watch for" item of a chapter: what the pages say, and
// when it ticks.
type watchFor struct {
	Text string
	// Ticks reports whether the event w sees makes the item's point; the
	// narration's memory already holds that event.
	Ticks func(w *seeing) bool
}

// seeing is one event, as the items' checks see it: with what the
// narration remembers of the events before it, and the items ticked so far.
type seeing struct {
	e          live.Event
	st         *narrationState
	order, key string // scope and order, scope and key: the memory's keys
	ticks      []Tick
	// lab is the room's lab settings as the narration reads the event:
	// an item about the fix ticks only once the fix is in.
	lab room.LabSettings
}

// is reports whether the event is of kind k.
func (w *seeing) is(k live.Kind) bool { return w.e.Kind == k }

// seen reports whether item i has ticked.
func (w *seeing) seen(i int) bool { return i < len(w.ticks) && w.ticks[i].Seen }

// twice reports whether the event is the second charge of its order.
func (w *seeing) twice() bool { return w.is(live.Charged) && w.orderCharges() == 2 }

// orderCharges and keyCharges count the charges of the event's order and
// key; orderKeys the keys its order was sent with; keyEvents the events of
// kind k of its key.
func (w *seeing) orderCharges() int         { return w.st.orderCharges[w.order] }
func (w *seeing) keyCharges() int           { return w.st.keyCharges[w.key] }
func (w *seeing) orderKeys() int            { return len(w.st.orderKeys[w.order]) }
func (w *seeing) keyEvents(k live.Kind) int { return w.st.keyEvents[w.key][k] }

// replayAfterLost reports whether the event replays a 201 whose first
// answer was lost.
func (w *seeing) replayAfterLost() bool {
	return w.is(live.Replayed) && w.e.Status == http.StatusCreated && w.keyEvents(live.ResponseLost) > 0
}

// personalKey reports whether the event's key is personal data.
func (w *seeing) personalKey() bool { return w.e.Key != "" && pay.PersonalData(w.e.Key) != "" }

// keyDone reports whether every request of the event's key that the
// narration saw arrive has been answered.
func (w *seeing) keyDone() bool { return len(w.st.keyRunning[w.key]) == 0 }

// refusedKind counts, among a key's events, the requests refused without
// a charge of their own: a 409, a replay, or the 500 of an INSERT the key
// table's constraint stopped.
const refusedKind live.Kind = "refused"

// answers reports whether e is the last step of its request: it was
// answered (or its connection ended) there.
func answers(e live.Event) bool {
	switch e.Kind {
	case live.Replayed, live.Conflict, live.Mismatch, live.Released, live.Dropped, live.Crashed,
		live.ResponseLost, live.Completed, live.RolledBack, live.Rejected:
		return true
	case labNote:
		return e.Status != 0
	}
	return false
}

// refuses reports whether e refused its request without charging.
func refuses(e live.Event) bool {
	switch e.Kind {
	case live.Conflict, live.Replayed:
		return true
	case live.Rejected, labNote:
		return e.Status == http.StatusInternalServerError
	}
	return false
}

// Tick is one "Watch for" item's state, as the room keeps it.
type Tick = room.Tick

// narrationState is what a chapter's checks remember of the events.
type narrationState struct {
	orderCharges map[string]int      // scope+order → charges
	keyCharges   map[string]int      // scope+key → charges
	orderKeys    map[string][]string // scope+order → keys seen
	keyEvents    map[string]map[live.Kind]int
	// keyRunning holds, per key, the requests received and not answered
	// yet: an outcome that more of them could still change (one charge,
	// while others of a burst still run) waits until they are done.
	keyRunning map[string]map[string]bool
	pruned     bool
	twiceOrder string // the first order charged twice
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
		delete(st.keyRunning, old)
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
		keyEvents: map[string]map[live.Kind]int{}, keyRunning: map[string]map[string]bool{}}
}

// Narrator ticks the items of the chapter the room runs.
type Narrator struct {
	book  Book
	room  *room.Room[room.State]
	hub   *live.Hub
	start sync.Once

	mu sync.Mutex
	// runs is the room's LessonRuns this narration is of, slug its
	// chapter ("" for none).
	runs  uint64
	slug  string
	items []watchFor
	ask   []Question
	ticks []Tick
	st    narrationState
}

// NewNarrator narrates book's chapters as the room r runs them, from the
// events of hub.
func NewNarrator(book Book, r *room.Room[room.State], hub *live.Hub) *Narrator {
	return &Narrator{book: book, room: r, hub: hub}
}

// WatchKind tells the pages that an item ticked: it draws nothing but
// makes the pages ask for the lesson again.
const WatchKind live.Kind = "watch"

// Start reads the events from now on until ctx ends; a second call does
// nothing. The server calls it at the room's first lesson: a server that
// never teaches has no reader here.
func (n *Narrator) Start(ctx context.Context) {
	n.start.Do(func() {
		sub := n.hub.Subscribe(n.hub.LastSeq())
		go n.run(ctx, sub)
	})
}

// follow makes the narration the one of the room's snapshot st: a lesson
// started or left since starts it again. n.mu is held.
func (n *Narrator) follow(st room.State) {
	defer n.adopt(st)
	if st.LessonRuns == n.runs && n.ticks != nil {
		return
	}
	_, ch, _ := n.book.Find(st.Lesson)
	n.runs, n.slug, n.items, n.ask = st.LessonRuns, st.Lesson, ch.Watch, ch.Ask
	n.ticks, n.st = make([]Tick, len(ch.Watch)), newNarrationState()
}

// adopt takes the ticks the room keeps for this run: those another
// server's narration made, or this server's before it restarted. The
// room's tick of an item is the one every server shows, its row the row
// of the first server that ticked it. n.mu is held.
func (n *Narrator) adopt(st room.State) {
	for i, t := range st.WatchedOf(n.runs) {
		if i < len(n.ticks) && t.Seen {
			n.ticks[i] = t
		}
	}
}

// Ticked returns the chapter's ticks, if slug is the chapter the room
// runs.
func (n *Narrator) Ticked(slug string) []Tick {
	st := n.room.Load()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.follow(st)
	if slug != n.slug {
		return nil
	}
	return append([]Tick(nil), n.ticks...)
}

// Version changes whenever the lesson panel does: at each lesson started
// or left, at each item ticked, and, while a chapter runs, at each change
// of the switches (the panel says whether they are still the chapter's).
// It is a hash of what the panel shows
// (the chapter, which run of it, the items ticked and by which row), not
// a count of this server's: a page that the front door sends to another
// server gets the same version for the same panel, and a new one for
// another. It is never 0, which a page with no lesson panel yet may send,
// and below 2^53 so that it survives JavaScript's numbers.
func (n *Narrator) Version() uint64 {
	st := n.room.Load()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.follow(st)
	h := fnv.New64a()
	fmt.Fprintf(h, "%q %d", n.slug, n.runs)
	if n.slug != "" {
		// Only a chapter running says whether the switches are its own;
		// with none, a switch changes nothing the panel shows.
		fmt.Fprintf(h, " %d %v", st.FaultWrites, st.Lab)
	}
	for _, t := range n.ticks {
		fmt.Fprintf(h, " %t %q", t.Seen, t.Row)
	}
	if v := h.Sum64() & (1<<53 - 1); v != 0 {
		return v
	}
	return 1
}

// run reads the events until ctx ends.
func (n *Narrator) run(ctx context.Context, sub *live.Subscription) {
	for {
		entries, err := sub.Next(ctx)
		if errors.Is(err, live.ErrTooSlow) {
			sub = n.hub.Subscribe(n.hub.LastSeq())
			continue
		}
		if err != nil {
			return
		}
		var ticked []tickMade
		for _, e := range entries {
			t, g := n.see(e.Event)
			ticked = append(ticked, t...)
			if g != nil {
				n.grade(ctx, *g)
			}
		}
		if len(ticked) > 0 && !n.keep(ctx, ticked) {
			// The room could not be written: this server's pages still
			// show what its narration saw.
			n.hub.Publish(live.Event{Kind: WatchKind})
		}
	}
}

// tickMade is an item the narration ticked: which, of which run of a
// chapter of how many items, and by which row.
type tickMade struct {
	runs  uint64
	items int
	i     int
	tick  Tick
}

// errTicked is an edit of the room that found its items ticked already,
// or the chapter left: it changes nothing.
var errTicked = errors.New("the items are ticked already")

// keep records the items ticked in the room, where every server's pages
// read them and a restarted server finds them again; the room's change
// is what tells the pages (the server publishes WatchKind when it applies
// one). It reports false when the room could not be written.
func (n *Narrator) keep(ctx context.Context, ticked []tickMade) bool {
	_, _, err := n.room.Change(ctx, func(s *room.State) error {
		changed := false
		for _, t := range ticked {
			if s.TickWatch(t.runs, t.items, t.i, t.tick.Row) {
				changed = true
			}
		}
		if !changed {
			return errTicked
		}
		return nil
	})
	return err == nil || errors.Is(err, errTicked)
}

// see applies one event and returns the items it ticked, and the grade
// of the room's vote it shows, if it shows one.
func (n *Narrator) see(e live.Event) ([]tickMade, *pollGrade) {
	if e.Kind == WatchKind {
		return nil, nil
	}
	snapshot := n.room.Load()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.follow(snapshot)
	if n.slug == "" && (snapshot.Poll == nil || snapshot.Poll.Request == "") {
		// No chapter and no step mode question: nothing to narrate.
		return nil, nil
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
	if e.Key != "" && e.Request != "" {
		switch {
		case e.Kind == live.Received:
			if st.keyRunning[key] == nil {
				st.keyRunning[key] = map[string]bool{}
			}
			st.keyRunning[key][e.Request] = true
		case answers(e):
			delete(st.keyRunning[key], e.Request)
		}
		if refuses(e) {
			st.keyEvents[key][refusedKind]++
		}
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
	w := &seeing{e: e, st: st, order: order, key: key, ticks: n.ticks, lab: snapshot.Lab}
	var ticked []tickMade
	for i, item := range n.items {
		if !n.ticks[i].Seen && item.Ticks(w) {
			n.ticks[i] = Tick{Seen: true, Row: row}
			ticked = append(ticked, tickMade{runs: n.runs, items: len(n.items), i: i, tick: n.ticks[i]})
		}
	}
	return ticked, n.gradeOf(snapshot.Poll, w, row)
}
