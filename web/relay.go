package web

import (
	"context"
	"slices"
	"time"

	"paytwice/web/board"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
	"paytwice/web/workshop"
)

// The relay (web/room) carries live events between the servers that share
// one database. This file is this server's side of it: what it sends
// (every event but the ones that concern it alone), what its listening
// connection carries besides (step mode's commands, the workshop's new
// settings), and what becomes of the other servers' events here
// (remoteEvents).

// startRelay starts relaying when the server has peers to relay to.
func (s *Server) startRelay() {
	steps := s.payments.steps
	booked := newBookedCharges(s.db.ChargesByOrder)
	s.servers.relay = room.StartRelay(s.life.base, room.RelayConfig{
		Peers: s.servers.peers, Hub: s.hub, Sink: remoteEvents{s}, Name: s.cfg.Name, Now: s.clock.Now, Logf: s.logf,
		// Every server derives its own ticks of a lesson's "watch for"
		// items from the events it sees, and tells its own pages that the
		// class's vote changed when it applies the room (predict_view.go).
		// A change of the workshop's scoreboard is relayed once saved
		// (board.WorkshopSavedKind), when the others can read it.
		Local: func(k live.Kind) bool { return k == watchKind || k == pollKind || k == board.WorkshopKind },
		Also: []room.Listener{
			{Channel: step.Channel, OnListen: steps.CommandsListened, OnNotify: steps.Command},
			{Channel: workshop.SettingsChannel, OnListen: s.endpoints.workshop.SettingsListened, OnNotify: s.endpoints.workshop.SettingsNotified},
		},
		// This server's pages draw its own events where the room's order
		// puts them, as every other server's pages do (web/board's
		// Config.Ordered): a page can then go on from its last event on
		// any server of the room.
		Echo: s.hub.PublishEchoes,
		// The generation the hub stamps on this server's events.
		Generation:  s.resetGeneration,
		StillBooked: func(entries []live.Entry) []live.Entry { return s.stillBooked(booked, entries) },
	})
}

// bookedLookupTimeout bounds the look-ups of stillBooked: the relay
// waits for them before it takes the next notification.
const bookedLookupTimeout = 5 * time.Second

// stillBooked keeps, of events made before a reset that the room's order
// placed, those of the requests whose charge the books hold after it (a
// payment a server admitted once its hold for the reset reached its
// bound, charged after the tables were emptied): a charge the books hold
// is on the pages. The others are dropped, as their charges were emptied
// with the tables. A look-up that fails keeps nothing, and says so. Each
// charge is looked up once per reset generation (bookedCharges).
func (s *Server) stillBooked(booked *bookedCharges, entries []live.Entry) []live.Entry {
	ctx, cancel := context.WithTimeout(s.life.base, bookedLookupTimeout)
	defer cancel()
	gen := s.resetGeneration()
	requests := map[string]bool{} // the requests whose charge the books hold
	charges := map[string]bool{}  // those charges
	for _, e := range entries {
		if e.Charge == "" || e.OrderID == "" || charges[e.Charge] {
			continue
		}
		held, err := booked.holds(ctx, gen, e.Scope, e.OrderID, e.Charge)
		if err != nil {
			s.logf("live relay: looking up charge %s, made before a reset: %v; its events are not drawn", e.Charge, err)
			continue
		}
		if held {
			charges[e.Charge] = true
			if e.Request != "" {
				requests[e.Request] = true
			}
		}
	}
	return slices.DeleteFunc(entries, func(e live.Entry) bool {
		return !charges[e.Charge] && (e.Request == "" || !requests[e.Request])
	})
}

// resetGeneration is the room's reset generation as this server knows it
// now: one more than the resets the room has done (0 stays "unknown" on
// the relay's events). An event is stamped with it as it is published,
// and the relay never draws it after a reset of a later generation
// (web/room/relay.go).
func (s *Server) resetGeneration() uint64 { return s.room.Load().Resets + 1 }

// ordered reports this server's own events that its board draws when the
// relay hands them back in the room's order.
func (s *Server) ordered(e *live.Entry) bool { return s.servers.relay.Ordered(e) }

// remoteEvents publishes the other servers' events into this server's hub,
// having first brought up to date what the pages draw them with.
type remoteEvents struct{ s *Server }

// changesLabCounts reports the kinds of another server's events after
// which this server's lab counts are rebuilt from the tables
// (lab_tally.go): what records a charge, saves a response, removes keys,
// or says events were missed. Rebuilding, rather than counting the event,
// is right whatever the event leaves out (the table and key a lab charge
// went to, the response a key saved) and however late it arrives.
func changesLabCounts(k live.Kind) bool {
	switch k {
	case live.Charged, live.Completed, live.Swept, live.Pruned, live.Reset, live.Gap, live.Claimed, labKind:
		return true
	}
	return false
}

// Heard publishes one notification's events of another server, all at
// once but for a reset, which empties what this server holds in memory
// between the events before it and the reset itself.
func (r remoteEvents) Heard(entries []live.Entry) {
	s := r.s
	if slices.ContainsFunc(entries, func(e live.Entry) bool { return changesRoom(e.Event) }) {
		s.room.Reload(s.life.base)
	}
	for len(entries) > 0 {
		n := 1 + slices.IndexFunc(entries[1:], func(e live.Entry) bool { return e.Kind == live.Reset })
		if n == 0 {
			n = len(entries)
		}
		batch := entries[:n]
		entries = entries[n:]
		if batch[0].Kind == live.Reset {
			// The other server emptied the shared tables; empty what this
			// one holds in memory, the timeline first, so that the reset
			// is the first thing drawn after it.
			s.demoReset().here.reset()
		}
		labChanged := false
		for i := range batch {
			labChanged = labChanged || changesLabCounts(batch[i].Kind)
			// Step mode lists the other servers' held requests before the
			// pages draw the event.
			s.payments.steps.Heard(batch[i].Event)
		}
		if labChanged {
			s.lab.otherServersWrote(batch)
		}
		s.hub.PublishRemoteAll(batch)
	}
}

// Missed says on the pages that other servers' events were lost, and has
// them reload from the database instead of showing a silent hole.
func (r remoteEvents) Missed() {
	r.s.lab.tablesChanged() // other servers' writes in between went unheard
	r.s.hub.Publish(live.Event{Kind: live.Gap,
		Message: "the connection to the other servers was lost and restored: their requests in between are not drawn; the tables are reloaded from the database"})
}
