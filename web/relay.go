package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"paytwice/web/live"
	"paytwice/web/room"
)

// The relay joins the hubs of the servers that share one database, so that
// every page on every server shows every request and the room stays one
// room.
//
// It reads this server's hub like any viewer and sends the events that
// happened here to the other servers with NOTIFY, and it publishes the
// events they send into this hub, with their server's name and time. It
// runs on goroutines of its own: a payment publishes into the hub, which
// never waits, and never waits on the database for an event. When the
// relay falls behind the hub's ring it skips what it missed, counts it and
// tells the others, whose pages then reload from the database rather than
// show a silent hole.

// relayChannel is the channel the servers' events travel on.
const relayChannel = "paytwice_events"

// relayPause is how long the relay lets events gather after sending a
// batch: however fast payments come, a server sends at most about 50
// notifications a second (each one a small commit on the database, and a
// wake of every other server, whose cost does not grow with the events
// it carries), and an event still reaches the other servers' pages well
// within the 50 ms the live panels promise.
const relayPause = 20 * time.Millisecond

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

// decodeNotification reads the events of a notification, in either form.
// Its head names the sending relay by a random id: two servers may have
// been given the same name, but never share an id, so a relay recognises
// its own notifications (PostgreSQL sends them to it too) by their first
// bytes.
func decodeNotification(payload string) ([]live.Event, error) {
	if rest, ok := strings.CutPrefix(payload, wireHead); ok {
		_, body, ok := strings.Cut(rest, "\n")
		if !ok {
			return nil, errWire
		}
		return decodeWire(body)
	}
	var b relayBatch
	err := json.Unmarshal([]byte(payload), &b)
	return b.Events, err
}

// notRelayed are the kinds that only concern the server that published
// them: every server derives its own ticks of a lesson's "watch for"
// items from the events it sees, and a gap is about this server's view.
var notRelayed = map[live.Kind]bool{watchKind: true, live.Gap: true}

type relay struct {
	s     *Server
	peers room.Peers
	// head starts every notification this relay sends and holds its
	// random id: its own notifications come back to it and are
	// recognised without being decoded.
	head string
	// maxPayload is the largest notification sent (a test lowers it).
	maxPayload int
	// wire writes the notifications (only send uses it).
	wire *wireWriter

	// skipped counts the events of this server the others never got.
	skipped atomic.Uint64
	// failing is set while notifications fail (only send uses it).
	failing bool
	// listening counts the starts of listening; a start after the first
	// means notifications may have been lost.
	listening atomic.Uint64
}

// relayOff is set in a build with -tags norelay, which never relays:
// bench/relay.sh measures what the relay costs against it.
var relayOff bool

// startRelay starts relaying when the server has peers to relay to; a
// server on its own has no others.
func (s *Server) startRelay() {
	if !s.peers.Shared() || relayOff {
		return
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	r := newRelay(s, s.peers, hex.EncodeToString(b))
	s.relay = r
	// Subscribe now, not on the goroutine: every event published from here
	// on is relayed.
	start := s.hub.LastSeq()
	go r.send(s.hub.Subscribe(start), start)
	go r.listen()
}

func newRelay(s *Server, peers room.Peers, id string) *relay {
	head := wireHead + id + "\n"
	return &relay{s: s, peers: peers, head: head, wire: newWireWriter(head), maxPayload: room.MaxPayload}
}

// send forwards this server's events after seen until the server stops.
func (r *relay) send(sub *live.Subscription, seen uint64) {
	ctx := r.s.baseCtx
	var owed uint64 // events the others missed, not yet told
	for {
		entries, err := sub.Next(ctx)
		switch {
		case errors.Is(err, live.ErrTooSlow):
			// The ring moved past the relay: go on from the newest event.
			// What was skipped may include other servers' events, which
			// would not have been sent anyway; count it all, it is rare.
			start := r.s.hub.LastSeq()
			owed += start - seen
			r.skipped.Add(start - seen)
			seen = start
			sub = r.s.hub.Subscribe(start)
			if _, ok := r.notify(ctx, []live.Event{r.gapEvent(owed)}); ok {
				owed = 0
			}
			continue
		case err != nil:
			return
		}
		seen = entries[len(entries)-1].Seq
		events := make([]live.Event, 0, len(entries)+1)
		if owed > 0 {
			events = append(events, r.gapEvent(owed))
		}
		for _, e := range entries {
			if !e.Remote && !notRelayed[e.Kind] {
				events = append(events, e.Event)
			}
		}
		failed, ok := r.notify(ctx, events)
		if ok {
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

// gapEvent tells the other servers that n events of this one never
// reached them.
func (r *relay) gapEvent(n uint64) live.Event {
	return live.Event{Kind: live.Gap, Server: r.s.cfg.Name, Time: r.s.clock.Now(),
		Message: strconv.FormatUint(n, 10) + " events of this server could not be relayed to the others; the tables are reloaded from the database"}
}

// notify sends events in as few notifications as fit, in order, and
// returns how many of this server's events (gaps aside) were not sent and
// whether every notification went out.
func (r *relay) notify(ctx context.Context, events []live.Event) (failed uint64, ok bool) {
	ok = true
	events = slices.Clone(events) // the records point into it, and shortening changes it
	w := r.wire
	w.reset(r.head)
	steps := uint64(0) // events in w that are not gaps
	flush := func() {
		if w.events == 0 {
			return
		}
		nctx, cancel := context.WithTimeout(ctx, relayNotifyTimeout)
		err := r.peers.Notify(nctx, relayChannel, string(w.buf))
		cancel()
		switch {
		case err != nil:
			failed, ok = failed+steps, false
			// Say so once, not for every batch while the database is away.
			if !r.failing && ctx.Err() == nil {
				r.s.logf("live relay: events not sent to the other servers until the database answers again: %v", err)
			}
			r.failing = true
		case r.failing:
			r.failing = false
			r.s.logf("live relay: sending events to the other servers again")
		}
		w.reset(r.head)
		steps = 0
	}
	var rec []byte
	for i := range events {
		e := &events[i]
		e.Seq = 0 // the receiving hub numbers it
		rec = w.record(rec[:0], e)
		if w.events > 0 && len(w.buf)+len(rec) > r.maxPayload {
			flush()
			rec = w.record(rec[:0], e)
		}
		if len(w.buf)+len(rec) > r.maxPayload {
			var fits bool
			if rec, fits = r.shorten(e, rec); !fits {
				r.s.logf("live relay: a %s event does not fit in a notification; not sent", e.Kind)
				failed, ok = failed+1, false
				continue
			}
		}
		w.add(rec, e)
		if e.Kind != live.Gap {
			steps++
		}
	}
	flush()
	return failed, ok
}

// shorten cuts e's Message (prose for people) until its record, rec, fits
// in a notification of its own: an event is worth more than the end of
// its sentence. The relay's writer is empty.
func (r *relay) shorten(e *live.Event, rec []byte) ([]byte, bool) {
	for range 4 {
		over := len(r.head) + len(rec) - r.maxPayload
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
	return rec, len(r.head)+len(rec) <= r.maxPayload
}

// listen publishes the other servers' events here until the server stops.
// Its connection carries step mode's commands too (step_shared.go), so
// that a server holds no more connections for them.
func (r *relay) listen() {
	steps := r.s.steps
	// The relay's channel last: pg_stat_activity shows the connection's
	// last statement, "LISTEN paytwice_events", as for a relay alone.
	_ = r.peers.ListenEach(r.s.baseCtx, []string{stepChannel, relayChannel}, func() {
		r.relistened()
		steps.commands.listening.Store(true)
	}, func(channel, payload string) {
		if channel == stepChannel {
			steps.command(payload)
			return
		}
		r.receive(payload)
	})
}

// relistened runs each time the relay (re)starts listening. Notifications
// sent while it was not are lost for good: after a reconnection, the pages
// say so and reload from the database instead of showing a silent hole.
func (r *relay) relistened() {
	if r.listening.Add(1) == 1 {
		return // the first start: there was nothing to miss yet
	}
	r.s.labTablesChanged() // other servers' writes in between went unheard
	r.s.hub.Publish(live.Event{Kind: live.Gap,
		Message: "the connection to the other servers was lost and restored: their requests in between are not drawn; the tables are reloaded from the database"})
}

// changesLabCounts are the kinds of another server's events after which
// this server's lab counts are rebuilt from the tables (lab_tally.go):
// what records a charge, saves a response, removes keys, or says events
// were missed. Rebuilding, rather than counting the event, is right
// whatever the event leaves out (the table and key a lab charge went to,
// the response a key saved) and however late it arrives.
var changesLabCounts = map[live.Kind]bool{live.Charged: true, live.Completed: true, live.Swept: true,
	live.Pruned: true, live.Reset: true, live.Gap: true, live.Claimed: true, labKind: true}

// receive publishes one notification's events, unless this relay sent it.
func (r *relay) receive(payload string) {
	if strings.HasPrefix(payload, r.head) {
		return
	}
	events, err := decodeNotification(payload)
	if err != nil {
		r.s.logf("live relay: ignoring a notification that is not a batch of events: %v", err)
		return
	}
	if slices.ContainsFunc(events, changesRoom) {
		r.s.room.Reload(r.s.baseCtx)
	}
	for _, e := range events {
		if e.Kind == live.Reset {
			// The other server emptied the shared tables; empty what this
			// one holds in memory, the timeline first, so that the reset
			// is the first thing drawn after it.
			r.s.resetHere()
		}
		if changesLabCounts[e.Kind] {
			r.s.labTablesChanged()
		}
		// Step mode lists the other servers' held requests before the
		// pages draw the event.
		r.s.steps.heard(e)
		r.s.hub.PublishRemote(e)
	}
}
