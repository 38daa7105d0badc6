package web

import (
	"context"
	"fmt"

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

// currentLesson is the chapter the class is on, "" when none: the room's.
func (s *Server) currentLesson() string { return s.room.Load().Lesson }

// lessonVersion names the lesson panel's state: it changes when an item
// is ticked or the chapter changes.
func (s *Server) lessonVersion() uint64 { return s.teaching.narration.Version() }

// lessonBook is the lessons, in their order.
func (s *Server) lessonBook() lesson.Book { return s.teaching.lessons }

// startLesson sets up a chapter for the whole class: it resets the
// demonstration (keys, charges, gateway, timeline, clock, every switch),
// sets the chapter's fault and lab switches and makes it the room's
// lesson, and publishes the change so that every open page shows the
// chapter. "" leaves the lessons, with a reset too.
func (s *Server) startLesson(ctx context.Context, slug, who string) error {
	i, ch, ok := s.teaching.lessons.Find(slug)
	if slug != "" && !ok {
		return s.teaching.lessons.Unknown(slug)
	}
	if err := s.demoReset().run(ctx, who); err != nil {
		return err
	}
	msg := "lessons left; everything reset"
	if slug != "" {
		old, next, err := s.room.Change(ctx, func(r *room.State) error {
			r.SetFaults(ch.Faults)
			r.Lab = ch.Lab.Normalize()
			r.SetLesson(slug)
			return nil
		})
		if err != nil {
			return err
		}
		s.faultSwitches().publishFaultChanges(old.Faults, next.Faults, "lesson")
		s.lab.switches.publishChanges(old.Lab, next.Lab, "lesson")
		msg = fmt.Sprintf("chapter %d of %d: %s", i+1, len(s.teaching.lessons), ch.Title)
	}
	s.hub.Publish(live.Event{Kind: lessonKind, Message: who + ": " + msg})
	return nil
}

// lessonView is the lessons panel showing chapter shown ("" for the
// index).
func (s *Server) lessonView(shown string, presenter, board bool) views.Lesson {
	v := views.Lesson{Current: s.currentLesson(), Presenter: presenter, Locked: s.cfg.PresenterToken != "",
		Board: board, V: s.teaching.narration.Version()}
	for i, c := range s.teaching.lessons {
		v.Chapters = append(v.Chapters, views.ChapterLink{Slug: c.Slug, Title: c.Title, Part: c.Part, N: i + 1})
	}
	if i, c, ok := s.teaching.lessons.Find(shown); ok {
		ch := &views.Chapter{Slug: c.Slug, Title: c.Title, Part: c.Part, N: i + 1, Of: len(s.teaching.lessons),
			SwitchOn: c.SwitchOn, Do: c.Do, StudentDo: c.StudentDo, Watch: c.WatchTexts(), Why: c.Why, Actions: lessonActions(c.Actions), Retry: c.Retry, Race: c.Race}
		if st := s.room.Load(); st.Lesson == c.Slug {
			ch.Switches = views.SwitchesChanged
			if st.Faults == c.Faults && st.Lab == c.Lab.Normalize() {
				ch.Switches = views.SwitchesAsSet
			}
		}
		if i > 0 {
			ch.Prev = s.teaching.lessons[i-1].Slug
		}
		if i+1 < len(s.teaching.lessons) {
			ch.Next = s.teaching.lessons[i+1].Slug
		}
		for _, t := range s.teaching.narration.Ticked(c.Slug) {
			ch.Seen, ch.SeenRows = append(ch.Seen, t.Seen), append(ch.SeenRows, t.Row)
		}
		v.Shown = ch
	}
	return v
}

// pageLesson is what a page's lesson panel starts with: the chapter named
// by ?lesson=, else the one the class is on. An unknown name is a 404.
func (s *Server) pageLesson(c echo.Context, board bool) (views.Lesson, error) {
	shown := s.currentLesson()
	if q := c.QueryParam("lesson"); q != "" {
		if _, _, ok := s.teaching.lessons.Find(q); !ok {
			return views.Lesson{}, s.teaching.lessons.Unknown(q)
		}
		shown = q
	}
	return s.lessonView(shown, s.admission.presenter.isPresenter(c.Request()), board), nil
}

// lessonActions are a chapter's buttons, as the pages draw them.
func lessonActions(actions []lesson.Action) []views.LessonAction {
	out := make([]views.LessonAction, len(actions))
	for i, a := range actions {
		out[i] = views.LessonAction{ID: a.ID, Arg: a.Arg, Label: a.Label, Presenter: a.Presenter}
	}
	return out
}
