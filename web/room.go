package web

import (
	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// The room is what the presenter sets for the whole class: the fault
// switches, the lab's settings, the current lesson and the demo clock.
// Server.room (a room.Room of room.State) holds it: every change goes
// through its Change, which has one source of truth, the room of the
// server's peers (web/room): memory when the server is on its own, one row
// of the database when several servers share it (PostgreSQL), so that a
// switch flipped on one server is flipped on all of them. Each server
// applies the room's state to the structures its requests read (the fault
// plan, the gateway's switches, the lab, the clock: applyRoom); only the
// server where a change was made publishes the event that describes it.

// newRoom is the server's room, at the defaults, which every structure
// the room drives starts with too, until it is loaded, and its side of the
// reset barrier.
func newRoom(s *Server) (*room.Room[room.State], *room.Barriers) {
	r := room.New(s.peers, pay.NewID("")[:16], s.cfg.Name, room.Defaults, s.applyRoom, s.logf)
	return r, &room.Barriers{Room: r, Name: s.cfg.Name, AckWait: s.cfg.GatewayTimeout + room.ResetAckMargin, Logf: s.logf,
		Quiesce: func(by string) func() {
			// Held requests hold the in-flight lock: let them go first.
			s.steps.turn(false, by)
			s.inflight.Lock()
			return s.inflight.Unlock
		}}
}

// changesRoom reports whether e tells of a change of the room: switches,
// clock, reset, lesson, step mode, or the lab's settings (the lab's notes on a
// request name its key).
func changesRoom(e live.Event) bool {
	switch e.Kind {
	case live.Switched, live.Reset, lessonKind, stepKind:
		return true
	case labKind:
		return e.Key == ""
	}
	return false
}

// applyRoom sets the structures requests read from next, the room's new
// snapshot; the room's lock is held. Requests already running keep the
// switches they drew.
func (s *Server) applyRoom(old, next room.State) {
	s.barriers.Applied(s.baseCtx, next)
	s.faults.Store(next.Faults.Server)
	s.gateway.SetSwitches(next.Faults.Gateway)
	if old.FaultsRestarted(next) {
		s.faults.SetRandom(next.Faults.Random)
	}
	if next.Lab != old.Lab {
		s.lab.settingsSeq.Add(1)
	}
	if next.Lesson != "" {
		s.narration.Start(s.baseCtx)
	}
	s.clock.SetOffset(next.ClockOffset)
	if next.Step != old.Step {
		s.steps.set(next.Step)
	}
}
