package room

import (
	"slices"
	"time"

	"paytwice/pay"
)

// State is the room: what the presenter sets for the whole class. A Room
// holds one State at a time, immutable once applied: every change goes
// through Change, and whatever a request needs of the room (the fault
// switches, the lab, the lesson, the demo clock's offset, step mode) it
// reads from the snapshot Load returns. Its JSON is the stored copy.
type State struct {
	Faults pay.Faults  `json:"faults"`
	Lab    LabSettings `json:"lab"`
	// Lesson is the chapter the class is on, "" for none.
	Lesson      string        `json:"lesson"`
	ClockOffset time.Duration `json:"clock_offset_ns"`
	// Step is whether payments stop at step mode's checkpoints: a
	// presenter behind a load balancer turns it on through one server,
	// and every server holds its own requests.
	Step bool `json:"step_mode,omitempty"`
	// Poll is the class's vote on a lesson question, nil when none was
	// opened since the last reset or lesson (poll.go).
	Poll *Poll `json:"poll,omitempty"`
	// Scores are the nicknames students picked and their running scores
	// on the votes (scores.go); nil until somebody picks one. They run across chapters and resets.
	Scores *Scores `json:"scores,omitempty"`
	// Puzzle is the class's "be the scheduler" puzzle, nil when none is
	// under way (puzzle.go).
	Puzzle *Puzzle `json:"puzzle,omitempty"`

	// FaultWrites counts the writes of the fault switches: each one
	// restarts the random mode's sequence from its seed, on every server,
	// even when it sets the same seed again.
	FaultWrites uint64 `json:"fault_writes"`
	// LessonRuns counts the lessons started and left: each one restarts
	// the narration on every server, even for the same chapter again.
	LessonRuns uint64 `json:"lesson_runs"`
	// Watched is the running chapter's "Watch for" items as the narration
	// of any server ticked them (web/room/lesson), nil until one ticks:
	// kept with the room, so that a restarted server, or another server
	// of a cluster that did not see the event, shows the same ticks.
	// WatchedRuns is the LessonRuns they are of.
	Watched     []Tick `json:"watched,omitempty"`
	WatchedRuns uint64 `json:"watched_runs,omitempty"`

	// Books names the books (the database) this room keeps: a random
	// number below 2^53, set once by the first server that finds none
	// (EnsureBooks). A page whose order was made under other books (the
	// class moved from a SQLite file to a cluster's PostgreSQL) knows the
	// order is not in these, which no reset of this room explains.
	Books uint64 `json:"books,omitempty"`

	// Resets counts the resets done: a page keeps an order only while it
	// stays the same, as a reset clears every key and charge.
	Resets uint64 `json:"resets,omitempty"`
	// Swept counts the keys any sweep closed (the charge found, or the key
	// released) in this room since its last reset, on every server: kept
	// with the room, so that a restarted server or one that joins late
	// reports the same count (POST /api/sweep's closed_in_room).
	Swept uint64 `json:"swept,omitempty"`
	// ResetGen counts the resets asked for; Barrier is the one under way,
	// nil when none is.
	ResetGen uint64   `json:"reset_gen"`
	Barrier  *Barrier `json:"barrier,omitempty"`
}

// Barrier is a reset under way, as the room holds it: with several
// servers on one database, the resetting server waits until every other
// one holds its payments before it empties the tables.
type Barrier struct {
	Gen uint64 `json:"gen"`
	// By is the resetting server's room id, ByName its name.
	By     string `json:"by"`
	ByName string `json:"by_name,omitempty"`
	// Until is when the other servers stop holding their payments for it
	// whatever happened (real time).
	Until time.Time `json:"until"`
	// Acks are the room ids of the servers that hold their payments for
	// it, their payments in flight finished.
	Acks []string `json:"acks,omitempty"`
}

// Defaults is every switch off, the lab's defaults, no lesson, the real
// time.
func Defaults() State { return State{Lab: DefaultLabSettings()} }

// SetFaults makes f the fault switches.
func (s *State) SetFaults(f pay.Faults) {
	s.Faults = f
	s.FaultWrites++
}

// SetLesson makes slug the current chapter.
func (s *State) SetLesson(slug string) {
	s.Lesson = slug
	s.LessonRuns++
	s.Poll = nil
	s.Puzzle = nil
	s.Watched, s.WatchedRuns = nil, 0
}

// Tick is one "Watch for" item's state.
type Tick struct {
	Seen bool `json:"seen"`
	// Row is the timeline row (DOM id) that made the point, "" when the
	// event that did was not a request's.
	Row string `json:"row,omitempty"`
}

// WatchedOf returns the ticks of the lesson run runs, nil when the room
// holds none of it.
func (s State) WatchedOf(runs uint64) []Tick {
	if s.WatchedRuns != runs || runs != s.LessonRuns {
		return nil
	}
	return s.Watched
}

// TickWatch marks item i of the n items of the lesson run runs as seen,
// made by row, and reports whether that changed the room: not when the
// room has moved on to another run, nor when the item was seen already
// (the first server to tick it names its row).
func (s *State) TickWatch(runs uint64, n, i int, row string) bool {
	if runs != s.LessonRuns || i < 0 || i >= n {
		return false
	}
	if s.WatchedRuns != runs || len(s.Watched) != n {
		s.Watched, s.WatchedRuns = make([]Tick, n), runs
	} else if s.Watched[i].Seen {
		return false
	} else {
		s.Watched = slices.Clone(s.Watched)
	}
	s.Watched[i] = Tick{Seen: true, Row: row}
	return true
}

// Reset is what the presenter's reset leaves: the defaults, the random
// sequence and the narration restarted. The reset under way (Barrier) is
// the caller's to end.
func (s *State) Reset() {
	next := Defaults()
	next.FaultWrites, next.LessonRuns = s.FaultWrites, s.LessonRuns
	next.ResetGen, next.Barrier = s.ResetGen, s.Barrier
	next.Resets = s.Resets + 1
	next.Books = s.Books
	// The class's nicknames and scores are the class's, not the
	// demonstration's: they run on across resets and chapters.
	next.Scores = s.Scores
	next.SetFaults(pay.Faults{})
	next.SetLesson("")
	*s = next
}

// FaultsRestarted reports whether next wrote the fault switches since s:
// the random mode's sequence starts again from its seed.
func (s State) FaultsRestarted(next State) bool {
	return next.Faults.Random != s.Faults.Random || next.FaultWrites != s.FaultWrites
}

// LessonRestarted reports whether a lesson was started or left between s
// and next: its narration starts again.
func (s State) LessonRestarted(next State) bool {
	return next.Lesson != s.Lesson || next.LessonRuns != s.LessonRuns
}

// MaxClockAdvance bounds one step of the demo clock: enough to age keys
// past a day's retention, and the longest retention the lab offers.
const MaxClockAdvance = 7 * 24 * time.Hour
