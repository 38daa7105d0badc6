package room

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"paytwice/pay/peers"
	"paytwice/web/live"
)

// The relay joins the hubs of the servers that share one database, so that
// every page on every server shows every request and the room stays one
// room.
//
// It reads this server's hub like any viewer and sends the events that
// happened here to the other servers through the peers, and it hands the
// events they send to this server's sink, which publishes them into its
// hub with their server's name and time. It runs on goroutines of its
// own: a payment publishes into the hub, which never waits, and never
// waits on the database for an event. When the relay falls behind the
// hub's ring it skips what it missed, counts it and tells the others,
// whose pages then reload from the database rather than show a silent
// hole.
//
// A relay that has heard no other relay sends no events: there is nobody
// to read them, and encoding them and sending them through the database
// would cost a lone server on PostgreSQL a tenth of its CPU per payment.
// Each relay says hello (a notification with no events) when it starts
// listening, and answers the hello, or any notification, of a relay it has
// not heard before with its own: two servers know of each other within a
// notification's round trip of the second one listening. Events a relay
// kept to itself in the moments before that (relayJoinWindow) are owed to
// the others like any it skipped, so their pages reload rather than miss
// them.
//
// A reset empties the books of every server, but the servers' batches
// reach the room's order in the order they commit, not in the order their
// events happened: a payment made on one server just before another
// server's reset may come back after the reset's batch, and every page
// would then draw "201 paid" after a reset that emptied its charge. So
// every event carries the room's reset generation it was made in
// (live.Event.Gen), each notification names it in its head (one
// generation per notification), and the relay drops a notification of an
// older generation than a reset it has placed: every server places the
// same batches in the same order, so every server drops the same ones,
// the sender its own echoes included. A payment made after the reset
// carries the new generation: a server's reset barrier (barrier.go) holds
// the other servers' payments until they have applied the room that ends
// it, which counts the reset done.

// Sink is what the relay hands the other servers' events to: the server's
// live read model, which publishes them for its pages.
type Sink interface {
	// Heard takes the events of one notification of another server,
	// oldest first, in entries it may hand to its hub as they are
	// (live.Hub.PublishRemoteAll).
	Heard(entries []live.Entry)
	// Missed says that notifications were lost (the connection to the
	// other servers was lost and restored): the events in between will
	// never come.
	Missed()
}

// Listener is another user of the relay's listening connection, on a
// channel of its own (step mode's commands): a server then holds no more
// connections for it.
type Listener struct {
	Channel string
	// OnListen runs each time listening (re)starts, OnNotify with each
	// notification, both on the relay's listening goroutine.
	OnListen func()
	OnNotify func(payload string)
}

// RelayConfig is what a relay needs.
type RelayConfig struct {
	Peers Peers
	// Hub holds this server's events, which the relay sends on.
	Hub  *live.Hub
	Sink Sink
	// Name is this server's, on the gaps it tells the others of.
	Name string
	Now  func() time.Time
	Logf func(format string, args ...any)
	// Local reports the kinds of this server's events that concern it
	// alone and are not sent (a gap is never sent as it is).
	Local func(live.Kind) bool
	// Also share the relay's listening connection.
	Also []Listener
	// Generation, when set, is the room's reset generation as this server
	// knows it when the relay starts (the one its hub stamps on its
	// events): notifications of an older one are dropped from the start.
	Generation func() uint64
	// Echo, when set, hands this server's own events back to it in the
	// room's order, so that its pages draw them there (Ordered): those
	// sent, at their place (Entry.Place), when their batch comes back
	// from the database; those not sent (no other server heard yet, the
	// database refused them, too large), at once and unplaced. It runs
	// on the relay's goroutines and must not block.
	Echo func(entries []live.Entry)
	// IdleChecks, when set, is when the relay looks for batches it
	// missed while none came (a test drives it); otherwise every
	// relayIdleCheck.
	IdleChecks <-chan time.Time
}

// RelayChannel is the channel the servers' events travel on.
const RelayChannel = "paytwice_events"

// relayPause is how long the relay lets events gather after sending a
// batch. A batch goes out as one commit on the database, however many
// notifications it fills, and each other server reads it at once: a
// server sends at most 20 batches a second however fast payments come,
// and an event reaches the other servers' pages about this much later
// than its own (the previous batch's commit and their fan-out aside). A lone event after a quiet spell
// goes out at once.
const relayPause = 50 * time.Millisecond

// relayJoinWindow is how far back the events a relay kept to itself,
// alone, are owed to a relay it then hears of: the newcomer listened
// before it said hello, so it may have missed events from that moment on,
// and a hello takes far less than this to arrive. Older events were sent
// to nobody who listened.
const relayJoinWindow = 5 * time.Second

// relayHelloRetry is how long a relay waits to say hello again after its
// hello failed to go out: until it is heard, the others do not know it.
const relayHelloRetry = time.Second

// maxKnownRelays bounds the relay ids a relay remembers; servers that
// restart get new ids. Forgetting one only costs an extra hello.
const maxKnownRelays = 1024

// relayNotifyTimeout bounds one NOTIFY: meanwhile the relay falls behind,
// and skips rather than hold anything up.
const relayNotifyTimeout = 5 * time.Second

// relayBatch is a notification as servers of an earlier version sent it,
// in JSON: events of one server, oldest first. A server still reads it,
// so that servers being upgraded one by one keep one timeline.
type relayBatch struct {
	From   string       `json:"from"`
	Events []live.Event `json:"events"`
}

// decodeNotification reads the events of a notification, in either form,
// and the reset generation they were made in (0 when it does not say).
// Its head names the sending relay by a random id: two servers may have
// been given the same name, but never share an id, so a relay recognises
// its own notifications (PostgreSQL sends them to it too) by their first
// bytes. After the id, a space and the events' generation, unless it is
// unknown (a hello, a gap alone).
func decodeNotification(payload string) ([]live.Entry, uint64, error) {
	if rest, ok := strings.CutPrefix(payload, wireHead); ok {
		head, body, ok := strings.Cut(rest, "\n")
		if !ok {
			return nil, 0, errWire
		}
		entries, err := decodeWire(body)
		gen := headGeneration(head)
		if gen != 0 {
			for j := range entries {
				entries[j].Gen = gen // as on the server that made them
			}
		}
		return entries, gen, err
	}
	var b relayBatch
	if err := json.Unmarshal([]byte(payload), &b); err != nil {
		return nil, 0, err
	}
	entries := make([]live.Entry, len(b.Events))
	for i, e := range b.Events {
		entries[i].Event = e
	}
	return entries, 0, nil
}

// headGeneration reads the generation from a head's line after wireHead
// ("<id>" or "<id> <gen>"): 0 when it names none it can read.
func headGeneration(head string) uint64 {
	_, g, ok := strings.Cut(head, " ")
	if !ok {
		return 0
	}
	return parseGeneration(g)
}

// parseGeneration reads a generation from what follows a head's id and
// its space: 0 when it is not one.
func parseGeneration(g string) uint64 {
	g, _, _ = strings.Cut(g, " ") // what a later version may add after it
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return 0
	}
	return gen
}

// Relay is one server's relay.
type Relay struct {
	cfg RelayConfig
	// head starts every notification this relay sends and holds its
	// random id: its own notifications come back to it and are
	// recognised without being decoded. It is a hello on its own. self is
	// head without its newline, which a notification's generation follows
	// (headOf); genHead is the head of generation genHeadOf (only send
	// uses them).
	head, self string
	genHead    string
	genHeadOf  uint64
	// resetGen is the generation of the newest reset placed in the room's
	// order (or known when the relay started): notifications of an older
	// generation are dropped.
	resetGen atomic.Uint64
	// maxPayload is the largest notification sent (a test lowers it).
	maxPayload int
	// wire writes the notifications, payloads holds them until they are
	// sent (only send uses them).
	wire     *wireWriter
	payloads []string

	// skipped counts the events of this server the others never got.
	skipped atomic.Uint64
	// failing is set while notifications fail (only send uses it).
	failing bool
	// listening counts the starts of listening; a start after the first
	// means notifications may have been lost.
	listening atomic.Uint64

	// joined is set once another relay was heard: from then on the relay
	// sends its events. joinedAt is when, on realNow, set just before.
	joined   atomic.Bool
	joinedAt atomic.Pointer[time.Time]
	// hello holds a hello to send (capacity 1).
	hello chan struct{}
	// known holds the ids of the other relays heard (under listenMu).
	known map[string]bool
	// others counts them.
	others atomic.Int64
	// kept is what send kept to itself while alone, within
	// relayJoinWindow (only send uses it); keptAll counts every event
	// kept.
	kept    []keptBatch
	keptAll atomic.Uint64
	// realNow is the real clock the join window is measured on (not the
	// demo clock, which a presenter may warp); tests set their own.
	realNow func() time.Time
	// at is the last part of the class's numbered batches this relay
	// took, its own included; zero until the first (under listenMu).
	at peers.Part
	// atRest is what part at carried after its header: reading back
	// after a reconnection starts from at itself, and finds the same
	// part there only if the class's order did not go back meanwhile
	// (under listenMu).
	atRest string
	// readBackSums holds a sum of each part read back since the last
	// part heard live after at (under listenMu): the same parts may
	// then arrive as notifications too, and are dropped only if they
	// match.
	readBackSums map[peers.Part]uint64
	sumSeed      maphash.Seed
	// readBack counts the notifications read back from the kept batches
	// rather than received.
	readBack atomic.Uint64
	// listenMu serialises the listening goroutine's callbacks for the
	// relay and the idle check (watchIdle): those two alone touch at,
	// atRest, readBackSums, known, heardLive and idleFailing.
	listenMu sync.Mutex
	// heardLive is set when a batch arrived since the idle check last
	// looked; idleFailing while its reads fail (said once).
	heardLive, idleFailing bool
	// start is the newest event of the hub when the relay started: the
	// events after it are the relay's to send or echo (Ordered).
	start uint64
	// echoes holds, by payload, this server's own events sent in it,
	// until the payload comes back in the room's order (see Echo).
	echoes echoBook
}

// echoBook is the events of this server's payloads on their way through
// the database, by payload (the bytes sent, Part header aside).
type echoBook struct {
	mu sync.Mutex
	m  map[string][]live.Event
}

// maxEchoes bounds the payloads on their way: one whose echo was lost
// for good (the pages then reload) would otherwise stay forever.
const maxEchoes = 4096

func (b *echoBook) put(payload string, events []live.Event) {
	b.mu.Lock()
	if b.m == nil || len(b.m) >= maxEchoes {
		b.m = map[string][]live.Event{}
	}
	b.m[payload] = events
	b.mu.Unlock()
}

// take returns and forgets the events sent in payload; ok is false for a
// payload not on its way.
func (b *echoBook) take(payload string) (events []live.Event, ok bool) {
	b.mu.Lock()
	events, ok = b.m[payload]
	delete(b.m, payload)
	b.mu.Unlock()
	return events, ok
}

// keptBatch is n events a relay did not send, alone, at real time at.
type keptBatch struct {
	at time.Time
	n  uint64
}

// relayOff is set in a build with -tags norelay, which never relays:
// bench/relay.sh measures what the relay costs against it.
var relayOff bool

// StartRelay starts relaying until ctx ends, when the server has peers
// to relay to: a server on its own has no others, and then, as in a build
// with -tags norelay, it returns nil.
func StartRelay(ctx context.Context, cfg RelayConfig) *Relay {
	if !cfg.Peers.Shared() || relayOff {
		return nil
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r := newRelay(cfg, hex.EncodeToString(b))
	// Subscribe now, not on the goroutine: every event published from here
	// on is relayed.
	start, own := cfg.Hub.LastOwn()
	r.start = start
	go r.send(ctx, cfg.Hub.Subscribe(start), own)
	go r.greet(ctx)
	go r.listen(ctx)
	go r.watchIdle(ctx)
	return r
}

func newRelay(cfg RelayConfig, id string) *Relay {
	if cfg.Local == nil {
		cfg.Local = func(live.Kind) bool { return false }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	self := wireHead + id
	head := self + "\n"
	r := &Relay{cfg: cfg, head: head, self: self, wire: newWireWriter(head), maxPayload: peers.MaxNumberedPayload,
		hello: make(chan struct{}, 1), known: map[string]bool{}, realNow: time.Now,
		readBackSums: map[peers.Part]uint64{}, sumSeed: maphash.MakeSeed()}
	if cfg.Generation != nil {
		r.resetGen.Store(cfg.Generation())
	}
	return r
}

// headOf is the head of a notification of this relay's events of
// generation gen (0: unknown, the plain head).
func (r *Relay) headOf(gen uint64) string {
	if gen == 0 {
		return r.head
	}
	if gen != r.genHeadOf {
		r.genHead, r.genHeadOf = r.self+" "+strconv.FormatUint(gen, 10)+"\n", gen
	}
	return r.genHead
}

// ownHead reports whether payload is one of this relay's notifications,
// and the generation its head names.
func (r *Relay) ownHead(payload string) (gen uint64, own bool) {
	rest, ok := strings.CutPrefix(payload, r.self)
	switch {
	case !ok || rest == "":
		return 0, false
	case rest[0] == '\n':
		return 0, true
	case rest[0] != ' ':
		return 0, false // another relay's id that starts with this one's
	}
	g, _, _ := strings.Cut(rest[1:], "\n")
	return parseGeneration(g), true
}

// stale reports whether events of generation gen were made before a
// reset the relay has placed: drawn now, they would show what the reset
// emptied. Generation 0 (not said) is never stale.
func (r *Relay) stale(gen uint64) bool {
	return gen != 0 && gen < r.resetGen.Load()
}

// placedResets notes the reset among events of generation gen, which the
// relay places in the room's order: from then on the older generations
// are stale.
func (r *Relay) placedResets(gen uint64, entries []live.Entry) {
	if gen <= r.resetGen.Load() {
		return
	}
	for j := range entries {
		if entries[j].Kind == live.Reset {
			r.resetGen.Store(gen) // stored under listenMu alone
			return
		}
	}
}

// Listening counts the starts of listening: 0 until the relay first
// listens, more after it reconnected.
func (r *Relay) Listening() uint64 { return r.listening.Load() }

// Skipped counts the events of this server the other servers never got.
func (r *Relay) Skipped() uint64 { return r.skipped.Load() }

// Kept counts the events this relay did not send because it had heard no
// other relay yet.
func (r *Relay) Kept() uint64 { return r.keptAll.Load() }

// Others counts the other relays this one has heard since it started.
func (r *Relay) Others() int { return int(r.others.Load()) }

// Ordered reports whether the relay decides where this server's pages
// draw e, one of its own events: it comes back through Echo, at its place
// in the room's order or at once. Without Echo, none.
func (r *Relay) Ordered(e *live.Entry) bool {
	return r != nil && r.cfg.Echo != nil && e.Seq > r.start && r.sends(e)
}

// release hands back through Echo, unplaced, this server's events that
// the relay did not send: its pages draw them at once.
func (r *Relay) release(events []live.Event) {
	if r.cfg.Echo == nil || len(events) == 0 {
		return
	}
	entries := make([]live.Entry, 0, len(events))
	for _, e := range events {
		// Not an event made before a reset the room's order holds
		// already: the pages would draw it after the reset.
		if e.Kind != live.Gap && !r.stale(e.Gen) {
			entries = append(entries, live.Entry{Event: e, Own: e.Seq})
		}
	}
	if len(entries) > 0 {
		r.cfg.Echo(entries)
	}
}

// send forwards this server's events until the server stops; seen counts
// this server's own events published before the first it reads
// (live.Entry.OwnUpTo).
func (r *Relay) send(ctx context.Context, sub *live.Subscription, seen uint64) {
	var owed uint64         // events the others missed, not yet told
	var events []live.Event // reused: notify is done with it when it returns
	for {
		entries, err := sub.Next(ctx)
		switch {
		case errors.Is(err, live.ErrTooSlow):
			// The ring moved past the relay: go on from the newest event.
			// Only this server's own events skipped count: the others'
			// and the echoes were not this relay's to send.
			start, own := r.cfg.Hub.LastOwn()
			owed += own - seen
			r.skipped.Add(own - seen)
			seen = own
			sub = r.cfg.Hub.Subscribe(start)
			if r.cfg.Echo != nil {
				// This server's pages wait for its events from the relay,
				// and these will never come: they reload from the database.
				r.cfg.Hub.Publish(live.Event{Kind: live.Gap, Time: r.cfg.Now(),
					Message: "this server's own events came faster than they could be put in the room's order; the tables are reloaded from the database"})
			}
			if _, gapLost := r.notify(ctx, []live.Event{r.gapEvent(owed)}); !gapLost {
				owed = 0
			}
			continue
		case err != nil:
			return
		}
		seen = entries[len(entries)-1].OwnUpTo()
		events = events[:0]
		if !r.joined.Load() {
			r.keep(entries)
			if r.cfg.Echo != nil {
				for _, e := range entries {
					if r.sends(e) {
						events = append(events, e.Event)
					}
				}
				r.release(events)
			}
			select {
			case <-time.After(relayPause):
			case <-ctx.Done():
				return
			}
			continue
		}
		if r.kept != nil {
			// Another relay was heard: what this one kept to itself just
			// before may have been missed there.
			n := r.keptRecently()
			owed += n
			r.skipped.Add(n)
			r.kept = nil
		}
		if owed > 0 {
			events = append(events, r.gapEvent(owed))
		}
		for _, e := range entries {
			if r.sends(e) {
				events = append(events, e.Event)
			}
		}
		// A batch that went out clears what was owed; one that failed is
		// owed whole, its gap included, and counted once.
		failed, gapLost := r.notify(ctx, events)
		if !gapLost {
			owed = 0
		}
		owed += failed
		r.skipped.Add(failed)
		select {
		case <-time.After(relayPause):
		case <-ctx.Done():
			return
		}
	}
}

// sends reports whether e is an event the relay sends to the others:
// this server's own, not a gap (told apart), not one of its local kinds.
func (r *Relay) sends(e *live.Entry) bool {
	return !e.Remote && e.Kind != live.Gap && !r.cfg.Local(e.Kind)
}

// keep notes the events of entries that a relay alone did not send, and
// forgets what is older than relayJoinWindow.
func (r *Relay) keep(entries []*live.Entry) {
	var n uint64
	for _, e := range entries {
		if r.sends(e) {
			n++
		}
	}
	r.keptAll.Add(n)
	now := r.realNow()
	i := 0
	for i < len(r.kept) && now.Sub(r.kept[i].at) > relayJoinWindow {
		i++
	}
	r.kept = append(r.kept[i:], keptBatch{now, n})
}

// keptRecently counts the events kept within relayJoinWindow before the
// relay joined the others (or after: send may keep a batch as the join
// happens). It is counted back from the join, not from now: send owes
// them at its next event, which may come long after.
func (r *Relay) keptRecently() uint64 {
	var n uint64
	joined := r.realNow()
	if at := r.joinedAt.Load(); at != nil {
		joined = *at
	}
	for _, k := range r.kept {
		if joined.Sub(k.at) <= relayJoinWindow {
			n += k.n
		}
	}
	return n
}

// greet sends a hello whenever one is due, until ctx ends: one the
// database did not take is tried again after relayHelloRetry.
func (r *Relay) greet(ctx context.Context) {
	for {
		select {
		case <-r.hello:
		case <-ctx.Done():
			return
		}
		nctx, cancel := context.WithTimeout(ctx, relayNotifyTimeout)
		// Numbered like any batch: its own hello, come back, tells the
		// relay where in the order it started listening, so that it can
		// read back what it misses if its connection is lost later.
		_, err := r.cfg.Peers.NotifyNumbered(nctx, RelayChannel, r.head)
		cancel()
		if err != nil {
			select {
			case <-time.After(relayHelloRetry):
				r.sayHello()
			case <-ctx.Done():
				return
			}
		}
	}
}

// sayHello has greet send a hello, unless one is due already.
func (r *Relay) sayHello() {
	select {
	case r.hello <- struct{}{}:
	default:
	}
}

// gapEvent tells the other servers that n events of this one never
// reached them.
func (r *Relay) gapEvent(n uint64) live.Event {
	return live.Event{Kind: live.Gap, Server: r.cfg.Name, Time: r.cfg.Now(),
		Message: strconv.FormatUint(n, 10) + " events of this server could not be relayed to the others; the tables are reloaded from the database"}
}

// notify sends events in as few notifications as fit, in order, all in
// one call of the peers (one commit on the database), and returns how
// many of this server's events (gaps aside) were not sent and whether a
// gap among events was not sent either. It may change events (a message
// too long is shortened), and the writer's records point into them until
// the next notify.
func (r *Relay) notify(ctx context.Context, events []live.Event) (failed uint64, gapLost bool) {
	w := r.wire
	w.reset(r.head)
	payloads := r.payloads[:0]
	steps := uint64(0) // events written that are not gaps
	gaps := false      // whether a gap was written
	echo := r.cfg.Echo != nil
	var sent [][]live.Event // with Echo: this server's events of each payload
	var cur []live.Event
	gen := uint64(0) // the generation of the notification being written
	end := func() {  // ends the notification being written, starts one of gen
		if w.events > 0 {
			payloads = append(payloads, string(w.buf))
			if echo {
				sent, cur = append(sent, cur), nil
			}
		}
		w.reset(r.headOf(gen))
	}
	var rec []byte
	for i := range events {
		e := &events[i]
		seq := e.Seq
		if e.Gen != 0 && e.Gen != gen {
			// One generation per notification, which its head names; an
			// event that does not know its own (a gap) goes with any.
			gen = e.Gen
			end()
		}
		e.Seq = 0 // the receiving hub numbers it
		rec = w.record(rec[:0], e)
		if w.events > 0 && len(w.buf)+len(rec) > r.maxPayload {
			end()
			rec = w.record(rec[:0], e)
		}
		if len(w.buf)+len(rec) > r.maxPayload {
			var fits bool
			if rec, fits = r.shorten(e, rec); !fits {
				r.cfg.Logf("live relay: a %s event does not fit in a notification; not sent", e.Kind)
				if e.Kind == live.Gap {
					gapLost = true
				} else {
					failed++
					unsent := *e
					unsent.Seq = seq
					r.release([]live.Event{unsent})
				}
				continue
			}
		}
		w.add(rec, e)
		if echo {
			cur = append(cur, *e)
			cur[len(cur)-1].Seq = seq // this hub's number: Entry.Own on the echo
		}
		if e.Kind != live.Gap {
			steps++
		} else {
			gaps = true
		}
	}
	end()
	defer func() {
		clear(payloads) // the next batch's strings, not this one's, stay referenced
		r.payloads = payloads[:0]
	}()
	if len(payloads) == 0 {
		return failed, gapLost
	}
	// The payloads may come back before NotifyNumbered returns: their
	// events are booked first.
	for i, p := range sent {
		r.echoes.put(payloads[i], p)
	}
	nctx, cancel := context.WithTimeout(ctx, relayNotifyTimeout)
	_, err := r.cfg.Peers.NotifyNumbered(nctx, RelayChannel, payloads...)
	cancel()
	switch {
	case err != nil:
		// Not sent: this server's pages draw them now. (A commit whose
		// answer was lost may still come back; its events, taken off the
		// book here, are then placed but not drawn twice.)
		for i := range sent {
			if evs, ok := r.echoes.take(payloads[i]); ok {
				r.release(evs)
			}
		}
		failed, gapLost = failed+steps, gapLost || gaps
		// Say so once, not for every batch while the database is away.
		if !r.failing && ctx.Err() == nil {
			r.cfg.Logf("live relay: events not sent to the other servers until the database answers again: %v", err)
		}
		r.failing = true
	case r.failing:
		r.failing = false
		r.cfg.Logf("live relay: sending events to the other servers again")
	}
	return failed, gapLost
}

// shorten cuts e's Message (prose for people) until its record, rec, fits
// in a notification of its own: an event is worth more than the end of
// its sentence. The relay's writer holds only a head.
func (r *Relay) shorten(e *live.Event, rec []byte) ([]byte, bool) {
	for range 4 {
		over := len(r.wire.buf) + len(rec) - r.maxPayload
		if over <= 0 {
			return rec, true
		}
		if e.Message == "" {
			return rec, false
		}
		// Each byte cut is worth at least one byte of the record (more
		// where JSON escapes it); "…" takes three.
		keep := max(0, len(e.Message)-over-len("…"))
		for keep > 0 && !utf8.RuneStart(e.Message[keep]) {
			keep--
		}
		e.Message = e.Message[:keep] + "…"
		rec = r.wire.record(rec[:0], e)
	}
	return rec, len(r.wire.buf)+len(rec) <= r.maxPayload
}

// listen hands the other servers' events to the sink until ctx ends.
func (r *Relay) listen(ctx context.Context) {
	channels := make([]string, 0, len(r.cfg.Also)+1)
	also := map[string]Listener{}
	for _, l := range r.cfg.Also {
		channels = append(channels, l.Channel)
		also[l.Channel] = l
	}
	// The relay's channel last: pg_stat_activity shows the connection's
	// last statement, "LISTEN paytwice_events", as for a relay alone.
	channels = append(channels, RelayChannel)
	_ = r.cfg.Peers.ListenEach(ctx, channels, func() {
		r.listenMu.Lock()
		r.relistened()
		r.listenMu.Unlock()
		for _, l := range r.cfg.Also {
			if l.OnListen != nil {
				l.OnListen()
			}
		}
	}, func(channel, payload string) {
		if l, ok := also[channel]; ok {
			l.OnNotify(payload)
			return
		}
		r.listenMu.Lock()
		r.heardLive = true
		r.receive(payload)
		r.listenMu.Unlock()
	})
}

// watchIdle runs the idle check at each tick until ctx ends.
func (r *Relay) watchIdle(ctx context.Context) {
	ticks := r.cfg.IdleChecks
	if ticks == nil {
		t := time.NewTicker(relayIdleCheck)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ticks:
		case <-ctx.Done():
			return
		}
		r.listenMu.Lock()
		r.checkIdle(ctx)
		r.listenMu.Unlock()
	}
}

// checkIdle reads back the batches after the last one taken, unless one
// arrived since the last check: a lost notification of the room's newest
// batch is then taken within relayIdleCheck, not when the next batch
// comes. One in flight, read back here, is dropped when it arrives
// (readBackSums). A read that fails is tried again at the next check; a
// batch no longer kept, or an order gone back, is lost for good as after
// a reconnection. r.listenMu is held.
func (r *Relay) checkIdle(ctx context.Context) {
	if r.heardLive {
		r.heardLive = false
		return
	}
	if r.at.N == 0 {
		return // no batch taken yet to read on from
	}
	rctx, cancel := context.WithTimeout(ctx, relayReadTimeout)
	payloads, kept, err := r.cfg.Peers.ReadNumbered(rctx, r.at.N, math.MaxUint64)
	cancel()
	if err != nil {
		if !r.idleFailing && ctx.Err() == nil {
			r.cfg.Logf("live relay: looking for missed events while the room is quiet: %v", err)
		}
		r.idleFailing = true
		return
	}
	r.idleFailing = false
	if !r.takeReadBack(payloads, kept, math.MaxUint64, 0) {
		r.at = peers.Part{}
		r.missed()
	}
}

// relistened runs each time the relay (re)starts listening. The batches
// sent while it was not are read back from those the peers keep; when
// they are no longer kept (or cannot be read), they are lost for good and
// the sink is told.
func (r *Relay) relistened() {
	r.sayHello()
	if r.listening.Add(1) == 1 {
		return // the first start: there was nothing to miss yet
	}
	if r.at.N == 0 || !r.catchUp(math.MaxUint64, 0) {
		// Lost for good: the pages reload, and the next batch heard is
		// where the relay starts again.
		r.at = peers.Part{}
		r.missed()
	}
}

// relayIdleCheck is how often a relay that heard no batch since its
// last look reads the batches after the last one it took: a notification
// lost on a connection that stays up is otherwise noticed only when a
// later batch comes, and a quiet room's newest events would wait for it
// without end. It costs one indexed read of the kept batches per server
// per interval, which finds the last batch taken alone when nothing was
// lost.
const relayIdleCheck = 3 * time.Second

// relayReadTimeout bounds reading back missed batches, which holds the
// listening goroutine.
const relayReadTimeout = 5 * time.Second

// receive takes one notification: a part of a numbered batch in the
// class's order (anything before it that never arrived is read back
// first), or a hello.
func (r *Relay) receive(payload string) {
	part, rest, numbered := peers.CutPart(payload)
	if !numbered {
		r.take(peers.Part{}, payload)
		return
	}
	if r.at.N != 0 && !part.After(r.at) {
		if sum, ok := r.readBackSums[part]; ok && sum == maphash.String(r.sumSeed, rest) {
			return // taken already, read back after a reconnection
		}
		// Numbered again: a crash of the database forgot the newest
		// batches (see catchUp) after the relay had read back. What the
		// forgotten numbers held is unknown here: the pages reload, and
		// the relay goes on from this part.
		r.cfg.Logf("live relay: batch #%d heard again with other events: the order of batches went back", part.N)
		r.missed()
		clear(r.readBackSums)
		r.at, r.atRest = part, rest
		r.take(part, rest)
		return
	}
	clear(r.readBackSums)
	if r.at.N != 0 && !part.Follows(r.at) && !r.catchUp(part.N, part.I) {
		// What came between is lost for good: the pages reload.
		r.missed()
	}
	r.at, r.atRest = part, rest
	r.take(part, rest)
}

// catchUp reads back the parts after r.at up to, not including, part i of
// batch n (every kept one when n is MaxUint64) and takes them in order. It
// reports whether none was missing.
//
// It reads from r.at's own batch on, and takes nothing unless r.at is
// there as it was taken. The numbers may go back: PostgreSQL commits the
// order's counter without waiting for the disk, so a crash can forget the
// newest batches, which their listeners took already, and number the next
// ones again. Nothing then reads as missing (no batch after r.at is
// numbered yet, or the batch numbered like r.at is another), while every
// batch numbered again would be dropped as taken: the relay would go deaf
// in silence. A changed or vanished r.at says so, and the relay starts
// again from the next batch it hears, the pages reloaded.
func (r *Relay) catchUp(n, i uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), relayReadTimeout)
	defer cancel()
	payloads, kept, err := r.cfg.Peers.ReadNumbered(ctx, r.at.N, n)
	if err != nil {
		r.cfg.Logf("live relay: reading back the events missed: %v", err)
		return false
	}
	return r.takeReadBack(payloads, kept, n, i)
}

// takeReadBack takes the parts of payloads, read back from r.at's batch
// on (kept as ReadNumbered said), after r.at and before part i of batch
// n, as catchUp does, and reports whether none was missing.
func (r *Relay) takeReadBack(payloads []string, kept bool, n, i uint64) bool {
	anchor, anchored := r.at, false
	for _, p := range payloads {
		part, rest, ok := peers.CutPart(p)
		if !ok {
			continue
		}
		if part == anchor {
			anchored = rest == r.atRest
			continue
		}
		if !part.After(r.at) {
			continue
		}
		if !anchored || part.N > n || part.N == n && part.I >= i {
			break
		}
		if !part.Follows(r.at) {
			kept = false
		}
		r.at, r.atRest = part, rest
		r.readBackSums[part] = maphash.String(r.sumSeed, rest)
		r.readBack.Add(1)
		r.take(part, rest)
	}
	if !anchored {
		if !kept {
			return false // forgotten with the oldest batches
		}
		r.cfg.Logf("live relay: the batch last heard, #%d, is no longer in the database as it was heard: the order of batches went back", anchor.N)
		return false
	}
	return kept && (n == math.MaxUint64 || peers.Part{N: n, I: i}.Follows(r.at))
}

// ReadBack counts the notifications this relay read back from the kept
// batches after missing them.
func (r *Relay) ReadBack() uint64 { return r.readBack.Load() }

// take hands one notification's events to the sink, unless this relay
// sent it, and places them in the room's order when it is numbered (part
// is zero when not), this relay's own included. A notification from a
// relay not heard before is answered with a hello; one with no events is
// a hello.
func (r *Relay) take(part peers.Part, payload string) {
	if gen, own := r.ownHead(payload); own {
		if payload != r.head {
			r.takeOwn(part, gen, payload)
		}
		return
	}
	r.heard(payload)
	events, gen, err := decodeNotification(payload)
	if err != nil {
		r.cfg.Logf("live relay: ignoring a notification that is not a batch of events: %v", err)
		return
	}
	if r.stale(gen) {
		return // made before a reset placed before it: on no server's pages
	}
	r.placedResets(gen, events)
	if part.N != 0 && len(events) > 0 {
		r.cfg.Hub.Place(part.N, part.I, events)
		for j := range events {
			events[j].Place = live.Place{N: part.N, I: part.I, J: uint64(j) + 1}
		}
	}
	if len(events) > 0 {
		r.cfg.Sink.Heard(events)
	}
}

// takeOwn takes one of this server's own payloads, of generation gen,
// back from the room's order: its events are placed there and, with Echo,
// handed back to be drawn there. Its events are those booked when it was
// sent; a payload not booked (the book was full, or the relay had given
// up on it) is read from its bytes, and then it is placed but not handed
// back: whatever the relay gave up on, the pages had drawn already or
// will reload. A payload made before a reset placed before it is dropped,
// as every other server drops it.
func (r *Relay) takeOwn(part peers.Part, gen uint64, payload string) {
	booked, ok := r.echoes.take(payload)
	if part.N == 0 || r.stale(gen) {
		return
	}
	var entries []live.Entry
	if ok {
		entries = make([]live.Entry, len(booked))
		for j := range booked {
			entries[j].Event, entries[j].Own = booked[j], booked[j].Seq
		}
	} else {
		decoded, _, err := decodeNotification(payload)
		if err != nil {
			return
		}
		entries = decoded
	}
	r.placedResets(gen, entries)
	r.cfg.Hub.Place(part.N, part.I, entries)
	if !ok || r.cfg.Echo == nil {
		return
	}
	echoed := entries[:0]
	for j := range entries {
		if entries[j].Kind == live.Gap {
			continue // told to the others; this server's pages had no hole
		}
		entries[j].Place = live.Place{N: part.N, I: part.I, J: uint64(j) + 1}
		echoed = append(echoed, entries[j])
	}
	if len(echoed) > 0 {
		r.cfg.Echo(echoed)
	}
}

// missed tells the sink that batches were lost for good, and breaks the
// room's order here: no page resumes across the hole.
func (r *Relay) missed() {
	r.cfg.Hub.BreakOrder()
	r.cfg.Sink.Missed()
}

// heard notes the relay that sent payload, another one: the first time,
// this relay joins the others and says hello back, so that the sender
// knows of it too. A notification in the JSON of an earlier version names
// no relay; its sender sends its events anyway.
func (r *Relay) heard(payload string) {
	if !r.joined.Load() {
		at := r.realNow()
		r.joinedAt.Store(&at)
		r.joined.Store(true)
	}
	rest, ok := strings.CutPrefix(payload, wireHead)
	if !ok {
		return
	}
	head, _, _ := strings.Cut(rest, "\n")
	id, _, _ := strings.Cut(head, " ") // the generation after it
	if r.known[id] {
		return
	}
	if len(r.known) >= maxKnownRelays {
		clear(r.known)
	}
	r.known[id] = true
	r.others.Add(1)
	r.sayHello()
}
