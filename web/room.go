package web

import (
	"slices"

	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// The room is what the presenter sets for the whole class: the fault
// switches, the lab's settings, the current lesson and the demo clock.
// Server.room (a room.Room of room.State) holds it: every change goes
// through its Change, which has one source of truth, the room of the
// server's peers (web/room): memory when the server is on its own, one row
// of the database when several servers share it (PostgreSQL), so that a
// switch flipped on one server is flipped on all of them. Nothing keeps a
// copy: a request reads the switches, the lab and the lesson from the
// room's snapshot, the clock reads its offset there, and the narration
// which chapter it follows. Only what must happen when the room changes
// happens in applyRoom; only the server where a change was made publishes
// the event that describes it.

// newRoom is the server's room, at the defaults until it is loaded, and
// its side of the reset barrier.
func newRoom(s *Server) (*room.Room[room.State], *room.Barriers) {
	// The room id is the hub's epoch: the members the room lists are then
	// the epochs of the servers that run, and a page that comes from
	// another server's stream is told whether that server still runs
	// (streamOrigin).
	r := room.New(s.servers.peers, s.hub.Epoch(), s.cfg.Name, room.Defaults, s.applyRoom, s.logf)
	return r, &room.Barriers{Room: r, Name: s.cfg.Name, AckWait: s.cfg.GatewayTimeout + room.ResetAckMargin, Logf: s.logf, Now: s.cfg.BarrierClock,
		Quiesce: func(by string) func() {
			// Held requests hold the in-flight lock: let them go first.
			s.payments.steps.Turn(false, by)
			s.payments.inflight.Lock()
			return s.payments.inflight.Unlock
		}}
}

// changesRoom reports whether e tells of a change of the room: switches,
// clock, reset, lesson, step mode, or the lab's settings (the lab's notes on a
// request name its key).
func changesRoom(e live.Event) bool {
	switch e.Kind {
	case live.Switched, live.Reset, lessonKind, step.KindMode, pollKind:
		return true
	case labKind:
		return e.Key == ""
	}
	return false
}

// applyRoom does what a new snapshot of the room asks of this server: to
// join another server's reset, to start narrating at the first lesson, to
// hold or let go step mode's requests. The room's lock is held.
func (s *Server) applyRoom(old, next room.State) {
	s.servers.barriers.Applied(s.life.base, next)
	if next.Lesson != "" || next.Poll != nil {
		s.teaching.narration.Start(s.life.base)
	}
	if next.Puzzle != nil && s.teaching.judge != nil {
		s.teaching.judge.Start(s.life.base)
	}
	if next.Step != old.Step {
		s.payments.steps.Set(next.Step)
	}
	s.publishPollChange(old, next)
	if next.Watched != nil && !slices.Equal(old.Watched, next.Watched) {
		// A "Watch for" item ticked, by this server's narration or
		// another's: the pages ask for the lesson panel again.
		s.hub.Publish(live.Event{Kind: watchKind})
	}
}
