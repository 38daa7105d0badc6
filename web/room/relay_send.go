package room

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"paytwice/web/live"
)

// relay_send.go holds the sending side of the relay: this server's events
// read from its hub, written into notifications that fit, sent in one
// commit, and booked until they come back in the room's order (Echo). It
// runs on the sending goroutine, apart from listening, and alone touches
// the writer and the payloads.

// relayPause is how long the relay lets events gather after sending a
// batch. A batch goes out as one commit on the database, however many
// notifications it fills, and each other server reads it at once: a
// server sends at most 20 batches a second however fast payments come
// (10 while the room is busy: relayBusyPause), and an event reaches the
// other servers' pages about this much later than its own (the previous
// batch's commit and their fan-out aside). A lone event after a quiet
// spell goes out at once.
const relayPause = 50 * time.Millisecond

// relayBusyPause is the relay's pause while the room is busy: while the
// events it reads from its hub, the room's, came at live.BusyEvents a
// second or more. Every board is then in busy mode, drawing totals twice
// a second rather than each request, so no page shows an event sooner
// for a shorter pause; and each batch costs every server about as much
// however few events it carries (its commit and answer on the sending
// server, a wake-up and a read of the notification on each server, the
// sender's own included), so half as many batches cost the servers less
// CPU per payment. The presenter's own requests, which boards draw even
// then, reach the other servers' pages up to this much later.
const relayBusyPause = 100 * time.Millisecond

// pauseAfter is how long the relay lets events gather after a batch,
// given that it read n events of the room (its own and the others') in
// the elapsed time since it last read.
func pauseAfter(n int, elapsed time.Duration) time.Duration {
	if elapsed > 0 && float64(n) >= live.BusyEvents*elapsed.Seconds() {
		return relayBusyPause
	}
	return relayPause
}

// relayNotifyTimeout bounds one NOTIFY: meanwhile the relay falls behind,
// and skips rather than hold anything up.
const relayNotifyTimeout = 5 * time.Second

// echoBook is the events of this server's payloads on their way through
// the database, by payload (the bytes sent, Part header aside), each as
// the entry it comes back as (Entry.Own its number in this hub): the
// echo hands them on as they are, with no copy of its own.
type echoBook struct {
	mu sync.Mutex
	m  map[string][]live.Entry
}

// maxEchoes bounds the payloads on their way: one whose echo was lost
// for good (the pages then reload) would otherwise stay forever.
const maxEchoes = 4096

func (b *echoBook) put(payload string, events []live.Entry) {
	b.mu.Lock()
	if b.m == nil || len(b.m) >= maxEchoes {
		b.m = map[string][]live.Entry{}
	}
	b.m[payload] = events
	b.mu.Unlock()
}

// take returns and forgets the events sent in payload; ok is false for a
// payload not on its way.
func (b *echoBook) take(payload string) (events []live.Entry, ok bool) {
	b.mu.Lock()
	events, ok = b.m[payload]
	delete(b.m, payload)
	b.mu.Unlock()
	return events, ok
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

// release hands back through Echo, unplaced, this server's events that
// the relay did not send (each with Own, its number in this hub): its
// pages draw them at once.
func (r *Relay) release(events []live.Entry) {
	if r.cfg.Echo == nil || len(events) == 0 {
		return
	}
	entries := make([]live.Entry, 0, len(events))
	var stale []live.Entry
	for _, e := range events {
		// Not an event made before a reset the room's order holds
		// already: the pages would draw it after the reset, unless the
		// books hold its charge after it.
		switch {
		case e.Kind == live.Gap:
		case r.stale(e.Gen):
			stale = append(stale, live.Entry{Event: e.Event, Own: e.Own})
		default:
			entries = append(entries, live.Entry{Event: e.Event, Own: e.Own})
		}
	}
	if len(stale) > 0 {
		entries = append(entries, r.stillBooked(stale)...)
		slices.SortStableFunc(entries, func(a, b live.Entry) int { return cmp.Compare(a.Own, b.Own) })
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
	var alone []live.Entry  // reused: release copies what it hands on
	var lastRead time.Time  // when the relay last read its hub (realNow)
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
			if _, gapLost := r.notify(ctx, []live.Event{r.gapEvent(owed)}, false); !gapLost {
				owed = 0
			}
			continue
		case err != nil:
			return
		}
		now := r.realNow()
		pause := relayPause
		if !lastRead.IsZero() {
			pause = pauseAfter(len(entries), now.Sub(lastRead))
		}
		lastRead = now
		seen = entries[len(entries)-1].OwnUpTo()
		events = events[:0]
		if !r.joined.Load() {
			r.keep(entries)
			if r.cfg.Echo != nil {
				alone = alone[:0]
				for _, e := range entries {
					if r.sends(e) {
						alone = append(alone, live.Entry{Event: e.Event, Own: e.Seq})
					}
				}
				r.release(alone)
			}
			select {
			case <-r.after(relayPause):
			case <-ctx.Done():
				return
			}
			continue
		}
		if r.kept != nil {
			// Another relay was heard: what this one kept to itself just
			// before was missed there. It goes now, in a batch of its
			// own that is not handed back: this server's pages drew it
			// when it was kept (release). What did not fit, or did not
			// go, is owed.
			kept, over := r.keptRecently()
			failed, _ := r.notify(ctx, kept, true)
			owed += over + failed
			r.skipped.Add(over + failed)
			r.kept, r.keptHeld = nil, 0
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
		failed, gapLost := r.notify(ctx, events, false)
		if !gapLost {
			owed = 0
		}
		owed += failed
		r.skipped.Add(failed)
		select {
		case <-r.after(pause):
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

// gapEvent tells the other servers that n events of this one never
// reached them.
func (r *Relay) gapEvent(n uint64) live.Event {
	return live.Event{Kind: live.Gap, Server: r.cfg.Name, Time: r.cfg.Now(),
		Message: strconv.FormatUint(n, 10) + " events of this server could not be relayed to the others; the tables are reloaded from the database"}
}

// notify sends events in as few notifications as fit, in order, all in
// one call of the peers (one commit on the database), and returns how
// many of this server's events (gaps aside) were not sent and whether a
// gap among events was not sent either. With Echo, events are handed
// back when they come back in the room's order, or at once if they are
// not sent, unless drawn says this server's pages drew them already. It
// may change events (a message too long is shortened), and the writer's
// records point into them until the next notify.
func (r *Relay) notify(ctx context.Context, events []live.Event, drawn bool) (failed uint64, gapLost bool) {
	w := r.wire
	w.reset(r.head)
	payloads := r.payloads[:0]
	steps := uint64(0) // events written that are not gaps
	gaps := false      // whether a gap was written
	echo := r.cfg.Echo != nil && !drawn
	var sent [][]live.Entry // with Echo: this server's events of each payload
	var cur []live.Entry
	if echo {
		// One array for the whole batch's booked events, each payload's a
		// part of it: grown one payload at a time they cost the sending
		// server more than writing the notifications did. They are booked
		// as the entries the echo hands on (takeOwn), which then need no
		// array of their own.
		cur = make([]live.Entry, 0, len(events))
	}
	gen := uint64(0) // the generation of the notification being written
	end := func() {  // ends the notification being written, starts one of gen
		if w.events > 0 {
			payloads = append(payloads, string(w.buf))
			if echo {
				// Capped where it ends, so the next payload's events,
				// further along the same array, never write into it.
				sent = append(sent, cur[:len(cur):len(cur)])
				cur = cur[len(cur):]
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
					if echo {
						unsent := live.Entry{Event: *e, Own: seq}
						unsent.Seq = seq
						r.release([]live.Entry{unsent})
					}
				}
				continue
			}
		}
		w.add(rec, e)
		if echo {
			cur = append(cur, live.Entry{Event: *e, Own: seq}) // Own: this hub's number
			cur[len(cur)-1].Seq = seq
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
