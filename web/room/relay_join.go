package room

import (
	"context"
	"strconv"
	"strings"
	"time"

	"paytwice/web/live"
)

// relay_join.go holds how relays learn of each other: hellos, the relays
// heard, and the events a relay alone kept to itself, owed to one it then
// hears. It is apart from sending because it decides whether the relay
// sends at all, which a lone server must not pay for.

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

// keptBatch is what a relay alone did not send of one batch of its
// hub's events, at real time at: events, copies kept to be sent once
// another relay is heard, and over more that did not fit under
// maxKeptEvents, which are only counted.
type keptBatch struct {
	at     time.Time
	events []live.Event
	over   uint64
}

// maxKeptEvents bounds the events a relay alone holds on to within
// relayJoinWindow, to send when it hears another relay: those beyond are
// owed as a gap. Events come one request at a time until a relay has
// heard the others (a server just started), so a few hundred hold every
// one but a flood's.
const maxKeptEvents = 512

// keep holds on to the events of entries that a relay alone did not send,
// and forgets what is older than relayJoinWindow.
func (r *Relay) keep(entries []*live.Entry) {
	now := r.realNow()
	i := 0
	for i < len(r.kept) && now.Sub(r.kept[i].at) > relayJoinWindow {
		r.keptHeld -= len(r.kept[i].events)
		i++
	}
	clear(r.kept[:i]) // their events are not held on to through the array
	k := keptBatch{at: now}
	for _, e := range entries {
		switch {
		case !r.sends(e):
		case r.keptHeld < maxKeptEvents:
			k.events = append(k.events, e.Event)
			r.keptHeld++
		default:
			k.over++
		}
	}
	r.keptAll.Add(uint64(len(k.events)) + k.over)
	r.kept = append(r.kept[i:], k)
}

// keptRecently is what the relay kept within relayJoinWindow before it
// joined the others (or after: send may keep a batch as the join
// happens), oldest first: the events it held on to, and how many more it
// only counted. It is counted back from the join, not from now: send
// sends them at its next event, which may come long after.
func (r *Relay) keptRecently() (events []live.Event, over uint64) {
	joined := r.realNow()
	if at := r.joinedAt.Load(); at != nil {
		joined = *at
	}
	for _, k := range r.kept {
		if joined.Sub(k.at) <= relayJoinWindow {
			events = append(events, k.events...)
			over += k.over
		}
	}
	return events, over
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
		r.hellos++
		_, err := r.cfg.Peers.NotifyNumbered(nctx, RelayChannel, r.helloPayload(r.hellos))
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

// helloPayload is this relay's k-th hello: its head, with no generation
// (0) and then k. Every hello is its own: a relay that reads back from
// its own hello, after a crash of the database numbered batches again,
// tells the one it heard from a later one given the same number (whose
// bytes would be the same without k), and sees the order went back.
func (r *Relay) helloPayload(k uint64) string {
	return r.self + " 0 " + strconv.FormatUint(k, 10) + "\n"
}

// isHello reports whether payload is a hello: a head and no events.
func isHello(payload string) bool {
	return strings.IndexByte(payload, '\n') == len(payload)-1
}

// sayHello has greet send a hello, unless one is due already.
func (r *Relay) sayHello() {
	select {
	case r.hello <- struct{}{}:
	default:
	}
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
