package room

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"strconv"
	"strings"

	"paytwice/pay/peers"
	"paytwice/web/live"
)

// relay_order.go holds the receiving side of the relay: the notifications
// heard, decoded, and placed in the room's order by batch and part, this
// server's own included, with those made before a placed reset dropped.
// Most of it runs under listenMu, apart from sending, and every server
// runs it alike: the room stays one only if every server places and drops
// the same batches.

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

// stillBooked keeps, of events made before a placed reset, those whose
// charge the books hold after it (RelayConfig.StillBooked); without a
// way to ask the books, none.
func (r *Relay) stillBooked(entries []live.Entry) []live.Entry {
	if r.cfg.StillBooked == nil {
		return nil
	}
	return r.cfg.StillBooked(entries)
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

// Ordered reports whether the relay decides where this server's pages
// draw e, one of its own events: it comes back through Echo, at its place
// in the room's order or at once. Without Echo, none.
func (r *Relay) Ordered(e *live.Entry) bool {
	return r != nil && r.cfg.Echo != nil && e.Seq > r.start && r.sends(e)
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

// take hands one notification's events to the sink, unless this relay
// sent it, and places them in the room's order when it is numbered (part
// is zero when not), this relay's own included. A notification from a
// relay not heard before is answered with a hello; one with no events is
// a hello.
func (r *Relay) take(part peers.Part, payload string) {
	if gen, own := r.ownHead(payload); own {
		if !isHello(payload) {
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
		// Made before a reset placed before it: on no server's pages, but
		// for the charges the books hold after it.
		if events = r.stillBooked(events); len(events) == 0 {
			return
		}
	}
	r.placedResets(gen, events)
	if part.N != 0 && len(events) > 0 {
		r.cfg.Hub.Place(part.G, part.N, part.I, events)
		for j := range events {
			events[j].Place = live.Place{G: part.G, N: part.N, I: part.I, J: uint64(j) + 1}
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
	if part.N == 0 {
		return
	}
	var entries []live.Entry
	if ok {
		entries = booked // this relay's alone once taken off the book
	} else {
		decoded, _, err := decodeNotification(payload)
		if err != nil {
			return
		}
		entries = decoded
	}
	if r.stale(gen) {
		if entries = r.stillBooked(entries); len(entries) == 0 {
			return
		}
	}
	r.placedResets(gen, entries)
	r.cfg.Hub.Place(part.G, part.N, part.I, entries)
	if !ok || r.cfg.Echo == nil {
		return
	}
	echoed := entries[:0]
	for j := range entries {
		if entries[j].Kind == live.Gap {
			continue // told to the others; this server's pages had no hole
		}
		entries[j].Place = live.Place{G: part.G, N: part.N, I: part.I, J: uint64(j) + 1}
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
