package views

import (
	"encoding/json"
	"strconv"

	"paytwice/web/lab"
)

// This file holds the plain data the common-mistakes lab and the guided
// lessons draw (lab.templ). The web package fills it from the lab's
// settings and from what it measured in the database.

// LabSwitches are the lab's settings as the panel shows them.
type LabSwitches struct {
	// Mode is how the server handles POST /v1/payments.
	Mode string
	// Retentions are the key retentions the panel offers, in seconds; 0
	// is the server's own.
	Retentions []int64
	// CheckGapMS is the pause between the check and the insert.
	CheckGapMS int
	// Servers is how many servers the lock in memory runs in this
	// process (0 reads as one).
	Servers int
	// RetentionSeconds is the lab's key retention; 0 means the server's.
	RetentionSeconds int64
	// DefaultRetention is the server's configured retention, in words.
	DefaultRetention string
	// Client are the browsers' switches, by their names in the API
	// ("new_key_per_retry"): on, every browser in the room makes the
	// mistake.
	Client map[string]bool
	// On names the mistakes switched on, for the panel's summary.
	On []string
}

// LabOutcome is what the lab measured for one mistake: a headline number
// with its unit, and a few lines of detail.
type LabOutcome struct {
	N     int
	Unit  string
	Tone  Tone // ToneBad when money went wrong, ToneOK when it was saved
	Lines []string
}

// Lab is the lab panel.
type Lab struct {
	Switches LabSwitches
	// BurstSize is how many requests the check-then-insert burst sends;
	// WarpSeconds how far the prune mistake's time warp jumps.
	BurstSize, WarpSeconds int
	// Outcomes are the mistakes' measured outcomes, by the mistake's
	// name; nil when they could not be measured.
	Outcomes map[string]LabOutcome
	// ExtraCharges is every charge the mistakes made beyond the first of
	// their order (or key).
	ExtraCharges int
	Presenter    bool
	Locked       bool
	// Board draws the panel folded inside the board's details, with the
	// summary in the fold's heading.
	Board bool
	// Versions let the page ask only for what changed.
	SettingsV, OutcomesV uint64
}

// outcome returns the measured outcome of mistake m.
func (l Lab) outcome(m lab.Mistake) LabOutcome {
	if o, ok := l.Outcomes[m.Name]; ok {
		return o
	}
	return LabOutcome{Unit: "not measured yet", Tone: ToneMute}
}

// LabControlID and LabOutcomeID name the parts of mistake m's card that
// the page replaces when the settings or the measurements change.
func LabControlID(m lab.Mistake) string { return "lab-ctl-" + strconv.Itoa(m.N) }

// LabOutcomeID is the id of mistake m's measured outcome.
func LabOutcomeID(m lab.Mistake) string { return "lab-out-" + strconv.Itoa(m.N) }

// selectedOption says whether o is the choice a Select shows: the value
// of its field, or its first option when none of them is (another
// control's mode is on).
// value is what a select of the field shows as chosen.
func (s LabSwitches) value(field string) string {
	if field == "server.servers" {
		if s.Servers < 2 {
			return "0"
		}
		return strconv.Itoa(s.Servers)
	}
	return s.Mode
}

func selectedOption(c lab.Control, o lab.Option, mode string) bool {
	for _, x := range c.Options {
		if x.Value == mode {
			return o.Value == mode
		}
	}
	return o.Value == c.Options[0].Value
}

// gapChoices are the pauses the check-then-insert and lock selects offer, with the
// current one included even if the JSON API set another.
func gapChoices(current int) []int {
	out := []int{0, 50, 200, 1000}
	for _, v := range out {
		if v == current {
			return out
		}
	}
	return append(out, current)
}

// retentionChoices are the retentions the panel offers, with the current
// one included even if the JSON API set another.
func retentionChoices(offered []int64, current int64) []int64 {
	for _, v := range offered {
		if v == current {
			return offered
		}
	}
	return append(offered[:len(offered):len(offered)], current)
}

func gapText(ms int) string {
	if ms == 0 {
		return "no pause"
	}
	return strconv.Itoa(ms) + " ms"
}

// LessonAction is a button a chapter offers beside the Pay button.
type LessonAction struct {
	ID    string // what lab.js does: see its actions table
	Arg   string // the action's argument, if it takes one
	Label string
	// Presenter is true when the action changes switches, so only the
	// presenter may use it.
	Presenter bool
}

// Chapter is one guided lesson.
type Chapter struct {
	Slug  string
	Title string
	Part  string
	N, Of int
	// What to switch on (the chapter sets it up), what to do, what to
	// watch for, and why it happens.
	SwitchOn []string
	// Switches says how the room's switches stand to SwitchOn now: the
	// list's heading states only that (SwitchesHeading).
	Switches SwitchState
	Do       []string
	// StudentDo replaces Do for a student when some steps are the
	// presenter's.
	StudentDo []string
	Watch     []string
	Why       string
	Actions   []LessonAction
	// Retry is whether the chapter wants each browser's automatic retries
	// on; the page sets its checkbox when the chapter starts.
	Retry      bool
	Prev, Next string
	// Race marks a chapter about requests racing each other: the board
	// offers step mode to walk it through.
	Race bool
	// Seen says which "Watch for" items the server has seen happen, and
	// SeenRows the timeline row (DOM id) that made each point.
	Seen     []bool
	SeenRows []string
}

// SwitchState is how the room's switches stand to a chapter's.
type SwitchState int

// The states.
const (
	// SwitchesNotRunning: the class is not on this chapter; its list is
	// what the chapter would switch on.
	SwitchesNotRunning SwitchState = iota
	// SwitchesAsSet: the class is on this chapter, with the switches as it
	// set them.
	SwitchesAsSet
	// SwitchesChanged: the class is on this chapter, and the switches were
	// changed since it set them.
	SwitchesChanged
)

// SwitchesHeading is the heading of the chapter's list of switches: it
// says "Switched on" only while the room's switches are the chapter's.
func (c *Chapter) SwitchesHeading() string {
	switch c.Switches {
	case SwitchesAsSet:
		return "Switched on"
	case SwitchesChanged:
		return "Switched on at the start; the switches were changed since"
	}
	return "This chapter switches on"
}

// WatchSeen reports whether the server has seen "Watch for" item i.
func (c *Chapter) WatchSeen(i int) bool { return i < len(c.Seen) && c.Seen[i] }

// WatchCount says how many "Watch for" items have been seen, for the fold
// that holds them on a phone: "2 of 4 seen".
func (c *Chapter) WatchCount() string {
	n := 0
	for i := range c.Watch {
		if c.WatchSeen(i) {
			n++
		}
	}
	return strconv.Itoa(n) + " of " + strconv.Itoa(len(c.Watch)) + " seen"
}

// WatchRow is the timeline row that made item i's point, or "".
func (c *Chapter) WatchRow(i int) string {
	if i < len(c.SeenRows) {
		return c.SeenRows[i]
	}
	return ""
}

func watchClass(c *Chapter, i int) string {
	if c.WatchSeen(i) {
		return "seen"
	}
	return ""
}

// ChapterLink is a chapter in the lesson index.
type ChapterLink struct {
	Slug, Title, Part string
	N                 int
}

// Lesson is the guided-lessons panel.
type Lesson struct {
	Chapters []ChapterLink
	// Shown is the chapter this page shows; nil shows the index.
	Shown *Chapter
	// Current is the chapter the class is on ("" when no lesson runs).
	Current   string
	Presenter bool
	Locked    bool
	Board     bool
	V         uint64
}

// boardLab is the lab as the board's fold draws it.
func boardLab(l Lab) Lab {
	l.Board = true
	return l
}

// Running reports whether the chapter shown is the one the class is on.
func (l Lesson) Running() bool { return l.Shown != nil && l.Shown.Slug == l.Current }

func (l Lesson) currentTitle() string {
	for _, c := range l.Chapters {
		if c.Slug == l.Current {
			return c.Title
		}
	}
	return ""
}

func lessonRetry(l Lesson) string {
	if l.Running() && l.Shown.Retry {
		return "on"
	}
	if l.Running() {
		return "off"
	}
	return ""
}

func lessonClass(l Lesson) string {
	c := "card lesson"
	if l.Board {
		c += " lesson-board"
	}
	if l.Shown != nil {
		c += " lesson-open"
	}
	return c
}

func lessonHref(slug string) string { return "/?lesson=" + slug }

func u64(n uint64) string { return strconv.FormatUint(n, 10) }

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// labMoreMistakes is how many mistakes the lab has, in words.
func labMoreMistakes() string {
	words := []string{"No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"}
	if n := len(lab.Mistakes); n < len(words) {
		return words[n]
	}
	return itoa(len(lab.Mistakes))
}

// labStorms is what a checkout card says, per server mode, when one key
// was charged more than once, as JSON: static/pay.js reads it from the
// lab's list of mistakes.
func labStorms() string {
	b, _ := json.Marshal(lab.Storms())
	return string(b)
}
