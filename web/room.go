package web

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// The room is what the presenter sets for the whole class: the fault
// switches, the lab's settings, the current lesson and the demo clock.
// Every change goes through changeRoom, which has one source of truth, the
// room of the server's peers (web/room): memory when the server is on its
// own, one row of the database when several servers share it
// (PostgreSQL), so that a switch flipped on one server is flipped on all
// of them. Each server applies the
// room's state to the structures its requests read (the fault plan, the
// gateway's switches, the lab, the clock); only the server where a change
// was made publishes the event that describes it.

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

// decodeRoom reads the database's copy. A field it lacks keeps its
// default ("{}" is the room no one has changed yet), and a field it does
// not know is ignored: a newer server may have written it.
func decodeRoom(b []byte) (roomState, error) {
	r := defaultRoom()
	if err := json.Unmarshal(b, &r); err != nil {
		return roomState{}, fmt.Errorf("room state %.60q: %w", b, err)
	}
	return r, nil
}

// roomCopy is this server's copy of the room state.
type roomCopy struct {
	s     *Server
	peers room.Peers

	// mu orders the applications of new states.
	mu      sync.Mutex
	state   roomState
	version int64 // of state; a state of an older version is not applied

	followed chan struct{} // closed when the follower stops

	// id names this server to the others in a reset's barrier: a random
	// id, as two servers may have been given the same name.
	id string
	// changed is closed, and replaced, at each new state applied: a wait
	// for the barrier to move wakes on it (barrier.go).
	changed chan struct{}
	// joined is the last barrier this server took part in.
	joined uint64
}

// newRoom starts from the defaults, which every structure the room
// drives starts with too.
func newRoom(s *Server) *roomCopy {
	return &roomCopy{s: s, peers: s.peers, state: defaultRoom(), id: pay.NewID("")[:16], changed: make(chan struct{})}
}

// roomLoadTimeout bounds how long a starting server waits for the room's
// state before serving with the defaults; the follower catches up later.
const roomLoadTimeout = 10 * time.Second

// start adopts the room's current state, so that a server that joins a
// class late shows the class's switches from its first request, and
// follows the room's changes until ctx ends.
func (r *roomCopy) start(ctx context.Context) {
	loadCtx, cancel := context.WithTimeout(ctx, roomLoadTimeout)
	r.reload(loadCtx)
	cancel()
	r.followed = make(chan struct{})
	go func() {
		defer close(r.followed)
		_ = r.peers.ListenRoom(ctx, r.member(), func() { r.reload(ctx) }, func(payload string) {
			// A version this server has already applied (its own change,
			// or one a reload found) needs no reload.
			if v, err := strconv.ParseInt(payload, 10, 64); err == nil && v <= r.appliedVersion() {
				return
			}
			r.reload(ctx)
		})
	}()
}

// wait returns once the follower has stopped (after ctx ended).
func (r *roomCopy) wait() { <-r.followed }

func (r *roomCopy) appliedVersion() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// reload reads the room from the database and applies it if it is newer.
// After a reconnection it is how a server catches up on the changes it
// was not told about.
func (r *roomCopy) reload(ctx context.Context) {
	b, v, err := r.peers.LoadRoom(ctx)
	if err == nil {
		var next roomState
		if next, err = decodeRoom(b); err == nil {
			r.apply(next, v)
			return
		}
	}
	if ctx.Err() == nil {
		r.s.logf("room: %v", err)
	}
}

// catchUp reloads the room before this server draws an event in which
// another server tells of a change of the room (web/relay.go): that
// server changed the room before it published the event, so the reload
// finds the change even when the room's own notification is still on its
// way, and the pages redrawn for the event show the room after it.
func (r *roomCopy) catchUp(ctx context.Context) { r.reload(ctx) }

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

// apply makes next this server's room unless it already holds a newer
// one.
func (r *roomCopy) apply(next roomState, version int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyLocked(next, version)
}

// applyLocked sets the structures requests read from next; r.mu is held.
// Requests already running keep the switches they drew.
func (r *roomCopy) applyLocked(next roomState, version int64) {
	if version <= r.version {
		return
	}
	s, old := r.s, r.state
	r.state, r.version = next, version
	close(r.changed)
	r.changed = make(chan struct{})
	if b := next.Barrier; b != nil && b.By != r.id && b.Gen > r.joined {
		r.joined = b.Gen
		go s.joinReset(*b)
	}
	s.faults.Store(next.Faults.Server)
	s.gateway.SetSwitches(next.Faults.Gateway)
	if next.Faults.Random != old.Faults.Random || next.FaultWrites != old.FaultWrites {
		s.faults.SetRandom(next.Faults.Random)
	}
	if next.Lab != old.Lab {
		lab := next.Lab
		s.lab.settings.Store(&lab)
		s.lab.settingsSeq.Add(1)
	}
	if next.Lesson != old.Lesson || next.LessonRuns != old.LessonRuns {
		_, ch, _ := s.chapter(next.Lesson)
		s.narration.begin(next.Lesson, len(ch.Watch))
		lesson := next.Lesson
		s.lab.lesson.Store(&lesson)
		s.lab.lessonSeq.Add(1)
	}
	s.clock.SetOffset(next.ClockOffset)
	if next.StepMode != old.StepMode {
		s.steps.set(next.StepMode)
	}
}

// changeRoom applies edit to the room's current state, atomically for
// every server on the database, applies the result here, and returns the
// state before and after: the caller publishes the event that describes
// the change. An error from edit changes nothing and is returned as it is.
func (s *Server) changeRoom(ctx context.Context, edit func(*roomState) error) (old, next roomState, err error) {
	if err := ctx.Err(); err != nil {
		return old, next, err
	}
	r := s.room
	_, version, err := r.peers.UpdateRoom(ctx, func(b []byte) ([]byte, error) {
		var err error
		if old, err = decodeRoom(b); err != nil {
			return nil, err
		}
		next = old
		if err := edit(&next); err != nil {
			return nil, err
		}
		return json.Marshal(next)
	})
	if err != nil {
		return old, next, err
	}
	r.apply(next, version)
	return old, next, nil
}
