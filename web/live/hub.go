// Package live is paytwice's in-process event hub: every step of every
// request is published here, numbered, and kept in a bounded ring that
// the live pages stream from. When several servers share one database,
// each event names its server, and the other servers' events are
// published here too (PublishRemoteAll, from the web package's relay).
//
// Publishing is O(1) whatever the number of viewers: an event is appended
// to the ring and one channel is closed to wake every waiting viewer.
// Viewers read the ring at their own pace; one that falls further behind
// than the ring holds is dropped. The payment path never waits on a
// viewer.
package live

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Kind names a step of the protocol or an action of the presenter.
type Kind string

// The kinds of events.
const (
	Received     Kind = "received"      // a payment request arrived
	Rejected     Kind = "rejected"      // 400/413/415: nothing saved
	Claimed      Kind = "claimed"       // the key was claimed: row started
	Replayed     Kind = "replayed"      // a done key's response was sent again
	Conflict     Kind = "conflict"      // 409: the key's first request is still running
	Mismatch     Kind = "mismatch"      // 422: the key was reused with another request
	Delayed      Kind = "delayed"       // the delay fault holds the request
	GatewayCall  Kind = "gateway"       // the gateway is being called
	GatewayReply Kind = "gateway_reply" // the gateway answered (or did not)
	Charged      Kind = "charged"       // the charge was recorded locally
	Completed    Kind = "completed"     // the response was saved on the key
	Released     Kind = "released"      // the claim was deleted: a retry runs afresh
	Dropped      Kind = "dropped"       // the connection was dropped before the claim
	ResponseLost Kind = "response_lost" // the work committed, the response never left
	Crashed      Kind = "crashed"       // the request stopped after the gateway call
	RolledBack   Kind = "rolled_back"   // the charge's transaction failed halfway
	Swept        Kind = "swept"         // the sweeper closed a stuck key
	Pruned       Kind = "pruned"        // retention removed done keys
	LookedUp     Kind = "looked_up"     // an order was looked up (GET /v1/payments?order_id=)
	// The checkout page says whether an attempt's answer reached it: the
	// server only knows it sent the answer, not that it arrived.
	Delivered   Kind = "delivered"   // the page received the answer
	Undelivered Kind = "undelivered" // the page gave up or its connection closed: no answer reached it
	Switched    Kind = "switched"    // a fault switch changed
	Reset       Kind = "reset"       // the demonstration was reset
	// Gap says that this server's pages may lack other servers' events:
	// its connection to them was lost and restored, or one of them could
	// not keep up with its own events. The pages reload from the database.
	Gap Kind = "gap"
)

// SweepResult is what the sweeper did with a stuck key.
type SweepResult string

// The sweeper's results.
const (
	SweepCharged  SweepResult = "charged"  // the gateway had charged: charge recorded, key done with 201
	SweepReleased SweepResult = "released" // the gateway had not charged: key deleted
	SweepFailed   SweepResult = "failed"   // the sweeper could not close the key: it stays started
)

// Event is one published step. Everything a reader of the stream acts on
// is a field of its own; Message is prose for people (the timeline's
// tooltips and the export) and is never parsed.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    Kind      `json:"kind"`
	Request string    `json:"request,omitempty"` // groups the steps of one request
	Scope   string    `json:"scope,omitempty"`
	Key     string    `json:"key,omitempty"`
	OrderID string    `json:"order_id,omitempty"`
	Amount  int64     `json:"amount_satang,omitempty"`
	Status  int       `json:"status,omitempty"`
	// Fingerprint is the request's fingerprint (method, path, canonical
	// body), once the body has been read.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Charge is the local charge id, on Charged and on a sweep that
	// recorded one.
	Charge string `json:"charge_id,omitempty"`
	// Sweep is what the sweeper did, on Swept.
	Sweep SweepResult `json:"sweep,omitempty"`
	// Lookup is the state a look-up answered (pay.OrderState: paid,
	// pending, not_charged, never_seen), on LookedUp.
	Lookup string `json:"lookup,omitempty"`
	// Attempt is the checkout page's name for one attempt (the
	// Paytwice-Attempt header), on Received and on the page's own report
	// of whether the answer reached it (Delivered, Undelivered).
	Attempt string `json:"attempt,omitempty"`
	// Fault marks a step that a fault switch caused.
	Fault   bool   `json:"fault,omitempty"`
	Message string `json:"message,omitempty"`
	// Server names the server that handled the step, when several share
	// one database; "" on a server of its own.
	Server string `json:"server,omitempty"`
	// Source is the client address the step came from, for the kept
	// timeline's shares (kept.go); it stays on this server.
	Source string `json:"-"`
	// Priority marks a step of the presenter's own requests, which no
	// student's share of the board ever holds back (web/board/shares.go)
	// and busy mode still draws. It stays out of the JSON that pages
	// read; the relay carries it to the other servers' boards in a field
	// of its own (web/room/relay_wire.go).
	Priority bool `json:"-"`
	// Gen is the room's reset generation the step was made in (one more
	// than the resets the room had done when this server published it,
	// SetGeneration); 0 when unknown. The relay carries it, so that a step
	// made before a reset is never drawn after it (web/room/relay.go).
	Gen uint64 `json:"-"`
	// Arrived is the real time this server published the step: the
	// board paces a caller's share by it rather than by the moment it
	// draws the step, so that a board catching up after a stall does not
	// see a burst nobody sent. Zero on other servers' events.
	Arrived time.Time `json:"-"`
}

// Entry is an event in the ring.
type Entry struct {
	Event
	// Remote marks an event another server published and this one
	// received (PublishRemote): it is shown here, not sent back out.
	Remote bool
	// Place is the event's place in the room's order (order.go), on the
	// events the relay carries; zero on the others.
	Place Place
	// Echo marks this server's own event handed back by the relay to be
	// drawn in the room's order (PublishEchoes): only the subscriptions
	// that ask for echoes see it.
	Echo bool
	// Own is, on an echo, the number this hub gave the event when it was
	// first published.
	Own uint64
	// ownUpTo counts this server's own events published up to this one.
	ownUpTo uint64
}

// OwnUpTo counts this server's own events (not another server's, not an
// echo) that the hub published up to e, e included.
func (e *Entry) OwnUpTo() uint64 { return e.ownUpTo }

// DefaultSize is how many events the hub keeps. Besides the timeline and
// its export, the ring is where the live relay reads the events it sends
// (web/room/relay.go), and every server's events pass through every
// server's ring: with 1,024, three servers under full load
// (bench/relay.sh) filled it in a fraction of a second, a relay fell
// just over a ring behind about once a second (between one batch's
// commit and the next, on two busy cores), and every other server, told
// of a gap, reloaded its pages' model from the database.
const DefaultSize = 4096

// BusyEvents is how many events in a second make the room busy: every
// board then shows totals, refreshed twice a second, instead of drawing
// each request (web/board's busy mode), and the relay, whose batches no
// page then draws one by one, sends them less often (web/room).
const BusyEvents = 600

// Hub is the event hub. The zero value is not usable; call New.
type Hub struct {
	now func() time.Time
	// wall is the real time that stamps Arrived (SetWall).
	wall func() time.Time
	// server is the name stamped on this server's own events (SetServer).
	server string
	// gen is the room's reset generation, stamped on this server's own
	// events (SetGeneration); nil stamps none.
	gen func() uint64
	// epoch names this life of the hub (epoch.go).
	epoch string

	// spare are entries made ahead, a batch at a time: one allocation
	// for entrySlab events rather than one each. A batch lives as long as
	// any of its entries does, and the ring keeps the last size of them
	// anyway. spareMu guards it, apart from mu, so that an event is copied
	// into its entry before mu is taken.
	spareMu sync.Mutex
	spare   []Entry

	mu   sync.Mutex
	ring []*Entry
	next uint64 // the next event's Seq; Seqs start at 1
	// own counts this server's own events published (Entry.OwnUpTo).
	own uint64
	// clearedUpTo is the newest event when the hub was last cleared
	// (Clear): Recent lists none up to it.
	clearedUpTo uint64
	wake        chan struct{}
	// watched is set once wake has been handed to a viewer.
	watched bool
	closed  bool

	// kept is the timeline the class reads back, in shares (kept.go).
	kept *keeper
	// tally counts this server's own answers, remote the other servers'
	// answers this hub published (tally.go).
	tally, remote Tally
	// order is the room's order of the events the relay carries
	// (order.go).
	order roomOrder
}

// New returns a hub that keeps the last size events.
func New(size int, now func() time.Time) *Hub {
	if size <= 0 {
		size = DefaultSize
	}
	if now == nil {
		now = time.Now
	}
	return &Hub{now: now, wall: time.Now, epoch: newEpoch(), ring: make([]*Entry, size), next: 1, wake: make(chan struct{}),
		kept: newKeeper(DefaultKeptPerSource, DefaultKeptTotal)}
}

// SetServer names the server whose events this hub publishes; call it
// before the first Publish. Without it events carry no server, as on a
// server of its own.
func (h *Hub) SetServer(name string) { h.server = name }

// SetWall sets the real time that stamps each event's Arrived (the board
// paces callers' shares by it); call it before the first Publish. The
// default is the wall clock.
func (h *Hub) SetWall(wall func() time.Time) { h.wall = wall }

// SetGeneration sets where this server's own events take their reset
// generation (Event.Gen) from: the room's, at the moment each is
// published. Call it before the first Publish.
func (h *Hub) SetGeneration(gen func() uint64) { h.gen = gen }

// Publish numbers e, stamps it with the time and this server's name
// (unless e names a server inside this process: the lab's lock in memory
// runs two), stores it and wakes the viewers. It never blocks on a viewer.
func (h *Hub) Publish(e Event) Event {
	if e.Server == "" {
		e.Server = h.server
	}
	if e.Arrived.IsZero() {
		e.Arrived = h.wall()
	}
	if e.Gen == 0 && h.gen != nil {
		e.Gen = h.gen()
	}
	return h.publish(&e, false)
}

// PublishRemote publishes an event that another server published: it
// keeps that server's name and time, and gets a number of this hub's.
func (h *Hub) PublishRemote(e Event) Event {
	return h.publish(&e, true)
}

// PublishRemoteAll publishes, in order, the events of one notification
// of another server, as PublishRemote does each, and takes the entries
// themselves into the ring: the caller hands them over and keeps no
// reference. One lock and one wake of the viewers serve them all, rather
// than a wake for each event that a viewer catching up could see.
func (h *Hub) PublishRemoteAll(entries []Entry) {
	if len(entries) == 0 {
		return
	}
	h.mu.Lock()
	for i := range entries {
		entries[i].Remote = true
		h.ringLocked(&entries[i])
	}
	wake := h.wakeLocked()
	h.mu.Unlock()
	if wake != nil {
		close(wake)
	}
}

// PublishEchoes publishes, in order, this server's own events that the
// relay hands back to be drawn in the room's order (web/room's
// RelayConfig.Echo), taking the entries themselves as PublishRemoteAll
// does. They were published once already: they are neither kept nor
// counted again, and only subscriptions made with SubscribeEchoes see
// them.
func (h *Hub) PublishEchoes(entries []Entry) {
	if len(entries) == 0 {
		return
	}
	h.mu.Lock()
	for i := range entries {
		entries[i].Remote, entries[i].Echo = true, true
		h.ringLocked(&entries[i])
	}
	wake := h.wakeLocked()
	h.mu.Unlock()
	if wake != nil {
		close(wake)
	}
}

// entrySlab is how many entries the hub makes at a time.
const entrySlab = 64

func (h *Hub) publish(e *Event, remote bool) Event {
	entry := h.newEntry()
	entry.Event, entry.Remote = *e, remote
	h.mu.Lock()
	h.ringLocked(entry)
	if !remote {
		h.tally.count(e.Kind)
	}
	wake := h.wakeLocked()
	h.mu.Unlock()
	if wake != nil {
		close(wake)
	}
	return entry.Event
}

// ringLocked numbers entry, stamps it with the time if it has none, and
// stores it in the ring. Callers hold h.mu.
func (h *Hub) ringLocked(entry *Entry) {
	entry.Seq = h.next
	if !entry.Remote {
		h.own++
	}
	entry.ownUpTo = h.own
	if entry.Time.IsZero() {
		entry.Time = h.now()
	}
	h.next++
	h.ring[entry.Seq%uint64(len(h.ring))] = entry
	if entry.Remote && !entry.Echo {
		h.remote.countOf(&entry.Event)
	}
	if !entry.Echo {
		h.kept.add(&entry.Event)
	}
}

// wakeLocked returns the channel to close, once h.mu is released, to wake
// the viewers waiting for events, and makes the next one; nil when no
// viewer holds it. Only a channel some viewer holds needs closing: with
// nobody watching, publishing allocates nothing but the entry. Callers
// hold h.mu.
func (h *Hub) wakeLocked() chan struct{} {
	if !h.watched {
		return nil
	}
	wake := h.wake
	h.wake, h.watched = make(chan struct{}), false
	return wake
}

// newEntry takes an entry from the batch made ahead, making the next
// batch once it is used up.
func (h *Hub) newEntry() *Entry {
	h.spareMu.Lock()
	if len(h.spare) == 0 {
		h.spare = make([]Entry, entrySlab)
	}
	entry := &h.spare[0]
	h.spare = h.spare[1:]
	h.spareMu.Unlock()
	return entry
}

// LastSeq returns the Seq of the newest event, 0 if none.
func (h *Hub) LastSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next - 1
}

// LastOwn returns the Seq of the newest event, as LastSeq does, and how
// many of the events up to it were this server's own (Entry.OwnUpTo).
func (h *Hub) LastOwn() (seq, own uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next - 1, h.own
}

// ErrTooSlow is returned to a viewer that fell behind by more than the
// ring holds: the events it missed are gone.
var ErrTooSlow = errors.New("live: viewer fell too far behind")

// ErrClosed is returned to viewers once the hub is closed.
var ErrClosed = errors.New("live: hub closed")

// since returns the entries after seq, whether seq is still covered by
// the ring, and a channel closed by the next Publish. Callers hold h.mu.
func (h *Hub) since(seq uint64) ([]*Entry, bool, <-chan struct{}) {
	newest := h.next - 1
	h.watched = true
	if seq >= newest {
		return nil, true, h.wake
	}
	size := uint64(len(h.ring))
	oldest := uint64(1)
	if newest > size {
		oldest = newest - size + 1
	}
	ok := true
	from := seq + 1
	if from < oldest {
		ok, from = false, oldest
	}
	out := make([]*Entry, 0, newest-from+1)
	for s := from; s <= newest; s++ {
		if e := h.ring[s%size]; e != nil && e.Seq == s {
			out = append(out, e)
		}
	}
	return out, ok, h.wake
}

// Recent returns up to n of the newest events still held, oldest first.
func (h *Hub) Recent(n int) []*Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	newest := h.next - 1
	start := uint64(0)
	if newest > uint64(n) {
		start = newest - uint64(n)
	}
	out, _, _ := h.since(max(start, h.clearedUpTo))
	return slices.DeleteFunc(out, func(e *Entry) bool { return e.Echo })
}

// Clear forgets every event held, for a reset: what the class reads back
// (Kept, Recent) starts again after it. Sequence numbers keep growing, so
// a viewer resuming after the reset misses nothing new. The ring itself,
// the transport, keeps them for the subscriptions that have not read them
// yet: the relay may not have sent them (a payment a server admitted
// once its hold for another server's reset reached its bound, charged
// after the tables were emptied, is in the books after the reset), and a
// board that reads them draws them before the reset, which empties its
// panels.
func (h *Hub) Clear() {
	h.mu.Lock()
	h.clearedUpTo = h.next - 1
	h.kept.clear()
	h.mu.Unlock()
}

// Subscription is one viewer's cursor into the hub.
type Subscription struct {
	hub    *Hub
	cursor uint64
	// catchUp allows the first read to start at the oldest event held:
	// a new viewer asked for whatever is there, so nothing was "missed".
	catchUp bool
	// echoes: the viewer sees the relay's echoes too (SubscribeEchoes).
	echoes bool
	// own and remote are the hub's counts (Hub.Counts) as of the newest
	// event Next returned.
	own, remote Tally
}

// Counts are the hub's counts of answers (Hub.Counts) as of the newest
// event Next returned: a viewer that falls behind the ring can count the
// answers of the events it lost, those it read being counted already.
func (s *Subscription) Counts() (own, remote Tally) { return s.own, s.remote }

// Subscribe starts a viewer after lastSeq: 0 means "from the oldest event
// held"; a browser resuming passes its Last-Event-ID. A viewer that wants
// only new events passes LastSeq().
func (h *Hub) Subscribe(lastSeq uint64) *Subscription {
	return &Subscription{hub: h, cursor: lastSeq, catchUp: lastSeq == 0}
}

// SubscribeEchoes starts a viewer as Subscribe does, which sees the
// relay's echoes of this server's events too (PublishEchoes): the board,
// which draws them in the room's order.
func (h *Hub) SubscribeEchoes(lastSeq uint64) *Subscription {
	s := h.Subscribe(lastSeq)
	s.echoes = true
	return s
}

// Next blocks until there are events after the cursor, then returns them
// all and advances. It returns ErrTooSlow if events were lost to the ring,
// and ctx's error when ctx ends.
func (s *Subscription) Next(ctx context.Context) ([]*Entry, error) {
	for {
		s.hub.mu.Lock()
		if s.hub.closed {
			s.hub.mu.Unlock()
			return nil, ErrClosed
		}
		entries, ok, wake := s.hub.since(s.cursor)
		if len(entries) > 0 {
			s.own, s.remote = s.hub.tally, s.hub.remote
		}
		s.hub.mu.Unlock()
		if !ok && !s.catchUp {
			return nil, ErrTooSlow
		}
		if len(entries) > 0 {
			s.catchUp = false
			s.cursor = entries[len(entries)-1].Seq
			if !s.echoes {
				entries = slices.DeleteFunc(entries, func(e *Entry) bool { return e.Echo })
			}
			if len(entries) > 0 {
				return entries, nil
			}
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close wakes every viewer with ErrClosed, for shutdown.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	wake := h.wake
	h.wake = make(chan struct{})
	h.mu.Unlock()
	close(wake)
}
