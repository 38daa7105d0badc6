package room

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"paytwice/pay/peers"
	"paytwice/web/live"
)

// relay.go holds the relay's type, its config and StartRelay. The relay's
// work is split by concern into the files beside it, so that each can be
// read on its own: relay_send.go (this server's events to the others),
// relay_join.go (hellos, and what a relay alone kept to itself),
// relay_order.go (notifications heard, placed in the room's order),
// relay_readback.go (batches missed, read back) and relay_wire.go (the
// notifications' form).

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
// notification's round trip of the second one listening. The events a
// relay kept to itself in the moments before that (relayJoinWindow) are
// sent when it joins, late rather than lost: a server just started takes
// payments before it has heard the others, which were listening all
// along, and a gap would have every other page reload for them. Its own
// pages drew them already, so they are not handed back (Echo); those
// beyond maxKeptEvents are owed to the others like any it skipped, so
// their pages reload rather than miss them.
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
	// StillBooked, when set, picks from events made before a reset the
	// room's order has placed (which are dropped) those to keep: the
	// events whose charge the books hold after the reset. A server that
	// stopped holding its payments at the reset's bound (barrier.go) may
	// charge after the tables were emptied with its events stamped with
	// the older generation; the books, which every server shares, say
	// which of those charges stayed, so every server keeps the same ones.
	// It runs on the relay's goroutines, only for such events.
	StillBooked func(entries []live.Entry) []live.Entry
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
	// hello holds a hello to send (capacity 1); hellos counts those sent
	// (only greet uses it).
	hello  chan struct{}
	hellos uint64
	// known holds the ids of the other relays heard (under listenMu).
	known map[string]bool
	// others counts them.
	others atomic.Int64
	// kept is what send kept to itself while alone, within
	// relayJoinWindow, and keptHeld the events it holds on to (only send
	// uses them); keptAll counts every event kept.
	kept     []keptBatch
	keptHeld int
	keptAll  atomic.Uint64
	// realNow is the real clock the join window is measured on (not the
	// demo clock, which a presenter may warp); tests set their own.
	realNow func() time.Time
	// after is how the sending goroutine pauses between batches
	// (time.After; tests take the pauses in hand).
	after func(time.Duration) <-chan time.Time
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
		hello: make(chan struct{}, 1), known: map[string]bool{}, realNow: time.Now, after: time.After,
		readBackSums: map[peers.Part]uint64{}, sumSeed: maphash.MakeSeed()}
	if cfg.Generation != nil {
		r.resetGen.Store(cfg.Generation())
	}
	return r
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
