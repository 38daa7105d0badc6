package web

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
)

// The guided lessons' HTTP side: the lessons' JSON API and the lessons
// panel of the pages. The chapters and their narration are web/room/lesson's;
// starting a chapter resets the demonstration and sets the chapter's
// switches in the room, and the change is an event on the timeline, so
// every open page follows the presenter.

// watchKind is the narration's event that an item ticked.
const watchKind = lesson.WatchKind

// LessonsState is the body of GET /api/lessons.
type LessonsState struct {
	// Current is the chapter the class is on, "" when no lesson runs.
	Current  string      `json:"current"`
	Chapters lesson.Book `json:"chapters"`
}

// LessonChange is the body of PUT /api/lessons/current: the chapter to
// start, or "" to leave the lessons.
type LessonChange struct {
	Slug string `json:"slug"`
}

// LessonStarted is the answer to PUT /api/lessons/current.
type LessonStarted struct {
	Current string           `json:"current"`
	Chapter int              `json:"chapter"` // 1-based; 0 when the lessons were left
	Of      int              `json:"of"`
	Faults  pay.Faults       `json:"faults"`
	Lab     room.LabSettings `json:"lab"`
	Retry   bool             `json:"retry"`
}

// guidedLessons is the lessons' group: the book, the narration that
// ticks the running chapter's items, the room whose chapter it is, and
// what starting a chapter does besides setting it: the reset and the
// switches' events. The lessons' endpoints (labHandlers) and the pages'
// lesson panel (pageSource) use it.
type guidedLessons struct {
	lessons   lesson.Book
	narration *lesson.Narrator
	room      *room.Room[room.State]
	timeline  timeline
	// reset is the demonstration's reset (demoReset.run), which every
	// chapter starts with.
	reset func(ctx context.Context, who string) error
	// faults and lab tell the timeline what a chapter's switches changed.
	faults faultSwitches
	lab    labSwitches
	// locked says the class has a presenter token: the panel's buttons
	// are the presenter's alone.
	locked      bool
	isPresenter func(*http.Request) bool
}

// guidedLessons is the server's lessons' group.
func (s *Server) guidedLessons() guidedLessons {
	return guidedLessons{lessons: s.teaching.lessons, narration: s.teaching.narration, room: s.room, timeline: s.hub,
		reset: s.demoReset().run, faults: s.faultSwitches(), lab: s.lab.switches,
		locked: s.cfg.PresenterToken != "", isPresenter: s.admission.presenter.isPresenter}
}

// current is the chapter the class is on, "" when none: the room's.
func (g guidedLessons) current() string { return g.room.Load().Lesson }

// version names the lesson panel's state: it changes when an item is
// ticked or the chapter changes.
func (g guidedLessons) version() uint64 { return g.narration.Version() }

// book is the lessons, in their order.
func (g guidedLessons) book() lesson.Book { return g.lessons }

// start sets up a chapter for the whole class: it resets the
// demonstration (keys, charges, gateway, timeline, clock, every switch),
// sets the chapter's fault and lab switches and makes it the room's
// lesson, and publishes the change so that every open page shows the
// chapter. "" leaves the lessons, with a reset too.
func (g guidedLessons) start(ctx context.Context, slug, who string) error {
	i, ch, ok := g.lessons.Find(slug)
	if slug != "" && !ok {
		return g.lessons.Unknown(slug)
	}
	if err := g.reset(ctx, who); err != nil {
		return err
	}
	msg := "lessons left; everything reset"
	if slug != "" {
		old, next, err := g.room.Change(ctx, func(r *room.State) error {
			r.SetFaults(ch.Faults)
			r.Lab = ch.Lab.Normalize()
			r.SetLesson(slug)
			return nil
		})
		if err != nil {
			return err
		}
		g.faults.publishFaultChanges(old.Faults, next.Faults, "lesson")
		g.lab.publishChanges(old.Lab, next.Lab, "lesson")
		msg = fmt.Sprintf("chapter %d of %d: %s", i+1, len(g.lessons), ch.Title)
	}
	g.timeline.Publish(live.Event{Kind: lessonKind, Message: who + ": " + msg})
	return nil
}

// view is the lessons panel showing chapter shown ("" for the index).
func (g guidedLessons) view(shown string, presenter, board bool) views.Lesson {
	v := views.Lesson{Current: g.current(), Presenter: presenter, Locked: g.locked,
		Board: board, V: g.narration.Version()}
	for i, c := range g.lessons {
		v.Chapters = append(v.Chapters, views.ChapterLink{Slug: c.Slug, Title: c.Title, Part: c.Part, N: i + 1})
	}
	if i, c, ok := g.lessons.Find(shown); ok {
		v.Shown = g.chapterView(i, c)
	}
	return v
}

// chapterView is chapter i as the panel shows it: its text, whether the
// room's switches are still the chapter's, its neighbours and the items
// ticked so far.
func (g guidedLessons) chapterView(i int, c lesson.Chapter) *views.Chapter {
	ch := &views.Chapter{Slug: c.Slug, Title: c.Title, Part: c.Part, N: i + 1, Of: len(g.lessons),
		SwitchOn: c.SwitchOn, Do: c.Do, StudentDo: c.StudentDo, Watch: c.WatchTexts(), Why: c.Why, Actions: lessonActions(c.Actions), Retry: c.Retry, Race: c.Race}
	if st := g.room.Load(); st.Lesson == c.Slug {
		ch.Switches = views.SwitchesChanged
		if st.Faults == c.Faults && st.Lab == c.Lab.Normalize() {
			ch.Switches = views.SwitchesAsSet
		}
	}
	if i > 0 {
		ch.Prev = g.lessons[i-1].Slug
	}
	if i+1 < len(g.lessons) {
		ch.Next = g.lessons[i+1].Slug
	}
	for _, t := range g.narration.Ticked(c.Slug) {
		ch.Seen, ch.SeenRows = append(ch.Seen, t.Seen), append(ch.SeenRows, t.Row)
	}
	return ch
}

// page is what a page's lesson panel starts with: the chapter named by
// ?lesson=, else the one the class is on. An unknown name is a 404.
func (g guidedLessons) page(c echo.Context, board bool) (views.Lesson, error) {
	shown := g.current()
	if q := c.QueryParam("lesson"); q != "" {
		if _, _, ok := g.lessons.Find(q); !ok {
			return views.Lesson{}, g.lessons.Unknown(q)
		}
		shown = q
	}
	return g.view(shown, g.isPresenter(c.Request()), board), nil
}

// lessonActions are a chapter's buttons, as the pages draw them.
func lessonActions(actions []lesson.Action) []views.LessonAction {
	out := make([]views.LessonAction, len(actions))
	for i, a := range actions {
		out[i] = views.LessonAction{ID: a.ID, Arg: a.Arg, Label: a.Label, Presenter: a.Presenter}
	}
	return out
}
