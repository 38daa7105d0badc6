// Package lesson is the classroom's guided lessons: short chapters, one
// for each way the article says a request can fail and one for each
// common mistake, each with the switches it sets and the "Watch for"
// items that tick off as the class makes its points (Narrator). The room
// (web/room) says which chapter runs; the pages draw what this package
// says.
package lesson

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"paytwice/pay"
	"paytwice/web/room"
)

// Chapter is one lesson: its text, and the switches it sets up.
type Chapter struct {
	Slug  string `json:"slug"`
	Title string `json:"title"`
	Part  string `json:"part"`
	// The setup: every fault switch and lab switch, and whether each
	// browser should retry automatically.
	Faults pay.Faults       `json:"faults"`
	Lab    room.LabSettings `json:"lab"`
	Retry  bool             `json:"retry"`
	// Race marks a chapter about requests racing each other: the board
	// offers step mode to walk the race through.
	Race bool `json:"race"`

	SwitchOn []string `json:"-"`
	Do       []string `json:"-"`
	// StudentDo is Do as a student reads it, when Do has steps only the
	// presenter can take: what to do on their own card meanwhile.
	StudentDo []string `json:"-"`
	// Watch are the things to watch for, each ticked by the event that
	// makes its point (narration.go).
	Watch   []watchFor `json:"-"`
	Why     string     `json:"-"`
	Actions []Action   `json:"-"`
	// Ask are the questions the class answers before the chapter's key
	// moments (questions.go).
	Ask []Question `json:"ask"`
	// Puzzle is the chapter's "be the scheduler" puzzle, as the board
	// sets it; "" where ordering the held requests cannot show the
	// chapter's mistake.
	Puzzle string `json:"puzzle,omitempty"`
}

// Action is a button of a chapter's.
type Action struct {
	ID    string // what lab.js does: see its actions table
	Arg   string // the action's argument, if it takes one
	Label string
	// Presenter is true when the action changes switches, so only the
	// presenter may use it.
	Presenter bool
}

const (
	partFailures = "How a request fails"
	partMistakes = "Common mistakes"
)

// labWith is the lab with every mistake off but the ones change sets.
func labWith(change func(*room.LabSettings)) room.LabSettings {
	l := room.DefaultLabSettings()
	if change != nil {
		change(&l)
	}
	return l
}

// labPatchArg is the body of a lesson button that changes one lab switch.
func labPatchArg(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// LockGapMS is the lock chapter's pause between the look-up and the
// insert: longer than the time between the two clicks of a double-click,
// so that on several servers both clicks look the key up before either
// inserts it.
const LockGapMS = 1000

// Build writes the lessons for a server whose keys may stay started for
// lockTimeout: it decides how far the sweep lessons warp the clock (the
// argument of their "warp-sweep" buttons).
func Build(lockTimeout time.Duration) Book {
	warpSweep := strconv.Itoa(int((lockTimeout + time.Second) / time.Second))
	book := slices.Clone(chapters)
	for i := range book {
		book[i].Actions = slices.Clone(book[i].Actions)
		book[i].Ask = questions[book[i].Slug]
		for j, a := range book[i].Actions {
			if a.ID == warpSweepAction {
				book[i].Actions[j].Arg = warpSweep
			}
		}
	}
	return book
}

// warpSweepAction is the button that warps the clock past the lock
// timeout and sweeps: Build gives it its argument.
const warpSweepAction = "warp-sweep"

// Book is the lessons, in their order.
type Book []Chapter

// Find finds a lesson by its slug: its index, and whether there is one.
func (b Book) Find(slug string) (int, Chapter, bool) {
	for i, c := range b {
		if c.Slug == slug {
			return i, c, true
		}
	}
	return -1, Chapter{}, false
}

// Unknown is the error for a lesson slug that names none.
func (b Book) Unknown(slug string) error {
	slugs := make([]string, len(b))
	for i, c := range b {
		slugs[i] = c.Slug
	}
	if len(slug) > 60 {
		slug = slug[:60] + "…"
	}
	return pay.Errorf(pay.ENOTFOUND, "There is no lesson called %q. The lessons are: %s.", slug, strings.Join(slugs, ", "))
}

// WatchTexts are the chapter's "Watch for" items, as the pages show them.
func (c Chapter) WatchTexts() []string {
	out := make([]string, len(c.Watch))
	for i, it := range c.Watch {
		out[i] = it.Text
	}
	return out
}
