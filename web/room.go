package web

import (
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// The room is what the presenter sets for the whole class: the fault
// switches, the lab's settings, the current lesson and the demo clock.
// Server.room (a room.Room of roomState) holds it: every change goes
// through its Change, which has one source of truth, the room of the
// server's peers (web/room): memory when the server is on its own, one row
// of the database when several servers share it (PostgreSQL), so that a
// switch flipped on one server is flipped on all of them. Each server
// applies the room's state to the structures its requests read (the fault
// plan, the gateway's switches, the lab, the clock: applyRoom); only the
// server where a change was made publishes the event that describes it.

// roomState is the room, as stored. Its JSON is the database's copy.
type roomState struct {
	Faults pay.Faults  `json:"faults"`
	Lab    LabSettings `json:"lab"`
	// Lesson is the chapter the class is on, "" for none.
	Lesson      string        `json:"lesson"`
	ClockOffset time.Duration `json:"clock_offset_ns"`
	// StepMode is whether payments stop at step mode's checkpoints: a
	// presenter behind a load balancer turns it on through one server,
	// and every server holds its own requests (step.go).
	StepMode bool `json:"step_mode,omitempty"`

	// FaultWrites counts the writes of the fault switches: each one
	// restarts the random mode's sequence from its seed, on every server,
	// even when it sets the same seed again.
	FaultWrites uint64 `json:"fault_writes"`
	// LessonRuns counts the lessons started and left: each one restarts
	// the narration on every server, even for the same chapter again.
	LessonRuns uint64 `json:"lesson_runs"`

	// Resets counts the resets done: a page keeps an order only while it
	// stays the same, as a reset clears every key and charge.
	Resets uint64 `json:"resets,omitempty"`
	// ResetGen counts the resets asked for; Barrier is the one under way,
	// nil when none is (barrier.go).
	ResetGen uint64        `json:"reset_gen"`
	Barrier  *resetBarrier `json:"barrier,omitempty"`
}

// defaultRoom is every switch off, the lab's defaults, no lesson, the
// real time.
func defaultRoom() roomState { return roomState{Lab: DefaultLabSettings()} }

// setFaults makes f the fault switches.
func (r *roomState) setFaults(f pay.Faults) {
	r.Faults = f
	r.FaultWrites++
}

// setLesson makes slug the current chapter.
func (r *roomState) setLesson(slug string) {
	r.Lesson = slug
	r.LessonRuns++
}

// reset is what the presenter's reset leaves: the defaults, the sequence
// and the narration restarted. The reset under way is the caller's to
// end (resetDemo).
func (r *roomState) reset() {
	next := defaultRoom()
	next.FaultWrites, next.LessonRuns = r.FaultWrites, r.LessonRuns
	next.ResetGen, next.Barrier = r.ResetGen, r.Barrier
	next.Resets = r.Resets + 1
	next.setFaults(pay.Faults{})
	next.setLesson("")
	*r = next
}

// newRoom is the server's room, at the defaults, which every structure
// the room drives starts with too, until it is loaded.
func newRoom(s *Server) *room.Room[roomState] {
	return room.New(s.peers, pay.NewID("")[:16], s.cfg.Name, defaultRoom, s.applyRoom, s.logf)
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
func (s *Server) applyRoom(old, next roomState) {
	if b := next.Barrier; b != nil && b.By != s.room.ID() && b.Gen > s.joinedReset {
		s.joinedReset = b.Gen
		go s.joinReset(*b)
	}
	s.faults.Store(next.Faults.Server)
	s.gateway.SetSwitches(next.Faults.Gateway)
	if next.Faults.Random != old.Faults.Random || next.FaultWrites != old.FaultWrites {
		s.faults.SetRandom(next.Faults.Random)
	}
	if next.Lab != old.Lab {
		s.lab.settingsSeq.Add(1)
	}
	if next.Lesson != old.Lesson || next.LessonRuns != old.LessonRuns {
		_, ch, _ := s.chapter(next.Lesson)
		s.narration.begin(next.Lesson, ch.Watch)
		s.lab.lessonSeq.Add(1)
	}
	s.clock.SetOffset(next.ClockOffset)
	if next.StepMode != old.StepMode {
		s.steps.set(next.StepMode)
	}
}
