package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/board"
)

// lazyBoard is the server's board, started on first use: a server that
// only serves the API never renders a fragment.
type lazyBoard struct {
	once sync.Once
	b    *board.Board
	// started says b was started; ended that the server ended the live
	// streams for its shutdown (EndStreams).
	started, ended atomic.Bool
}

// get returns the board, started by start the first time.
func (l *lazyBoard) get(start func() *board.Board) *board.Board {
	l.once.Do(func() {
		l.b = start()
		l.started.Store(true)
	})
	return l.b
}

// endStreams ends every live page's stream, if the board was ever
// started, and marks the streams ended so no new one begins.
func (l *lazyBoard) endStreams() {
	l.ended.Store(true)
	if l.started.Load() {
		l.b.Close()
	}
}

// live returns the server's board, starting it on first use.
func (s *Server) live() *board.Board {
	return s.pages.board.get(func() *board.Board {
		return board.Start(board.Config{
			Store: s.db, Hub: s.hub, Clock: s.clock, Steps: s.payments.steps, Ctx: s.life.base, Logf: s.logf, Wall: s.cfg.BoardClock,
			Switches: func() views.FaultSwitches {
				return views.FaultSwitches{Faults: s.faultSwitches().currentFaults(), ClockOffset: s.clock.Offset()}
			},
			RoomChanged: changesRoom,
			Lab:         boardLab{s.labPanel()},
			ResyncNote: func(why board.Why) templ.Component {
				text, lesson := s.resyncNote(why)
				return views.ResyncNote(text, lesson)
			},
			Origin: s.streamOrigin,
			// With no page open the board rests (web/board/rest.go): a
			// server of several, whose board takes every server's events,
			// then draws none of them for nobody.
			RestAfter: boardRestAfter,
			Kept:      s.pages.answers.kept,
			Ordered:   s.ordered,
			// A student's live view waits, briefly, for the presenter's
			// payments at work (student_work.go).
			BeforeWrite: func(r *http.Request) {
				if !s.admission.hasPriority(r) {
					s.admission.work.presenter.waitAtMost(r.Context(), studentStreamWait)
				}
			},
			// A student's live view is written at most every
			// studentStreamGap, what came meanwhile in one write: four
			// hundred views open then cost the server a few writes a
			// second each, not one per fan-out. The presenter's has no gap.
			// The projector's page (the board's stream names itself) and
			// the presenter's pages show every event as it happens; a
			// phone its own payments and the room's changes as they
			// happen, and the rest of the class's payments in rounds:
			// hundreds of phones then cost a few writes a second each.
			Viewer: func(r *http.Request) (string, bool) {
				return callerScope(r), r.URL.Query().Get("view") == views.BoardStreamView || s.admission.hasPriority(r)
			},
			WriteGap: func(r *http.Request) time.Duration {
				if s.cfg.PresenterToken == "" || s.admission.hasPriority(r) {
					return 0
				}
				return studentStreamGap
			},
		})
	})
}

// boardRestAfter is how long the board goes on drawing after its last
// page closed (or was drawn without opening its stream): long enough
// for a page to open its stream, or to come back after a reload, on a
// loaded machine.
const boardRestAfter = 30 * time.Second

// boardLab is the lab's numbers as the board draws them after events.
type boardLab struct{ panel labPanel }

func (l boardLab) Fresh() bool { return l.panel.lab.tally.fresh() }

func (l boardLab) Outcomes(ctx context.Context) []byte {
	v := l.panel.view(ctx, false)
	if v.Outcomes == nil {
		return nil // not measured: the view said why
	}
	var buf bytes.Buffer
	if err := views.LabOutcomesSwap(v).Render(ctx, &buf); err != nil {
		return nil
	}
	return buf.Bytes()
}

// boardHandlers is the board's handler group, holding what it uses.
func (s *Server) boardHandlers() boardHandlers {
	puzzle := puzzleSteps{room: s.room, held: s.payments.steps.State, presenterAuth: s.admission.presenter.presenterAuth}
	return boardHandlers{board: s.live, steps: s.payments.steps, closeVote: s.closeStepVote, admission: s.admission.streams, clientIP: s.admission.presenter.clientIP,
		presenter: s.admission.hasPriority, maxStreams: s.cfg.Limits.MaxStreams, streamsEnded: &s.pages.board.ended,
		stepper: puzzle.stepperOnly, puzzle: puzzle}
}

// streamOrigin says where the events of a page came from whose event ids
// carry epoch, not this server's: the room's members are listed by their
// room id, which is their hub's epoch (newRoom). On a server of its own
// any other epoch is an earlier life of this server.
func (s *Server) streamOrigin(ctx context.Context, epoch string) board.Why {
	if !s.servers.peers.Shared() {
		return board.Restarted
	}
	members, err := s.room.Members(ctx)
	if err != nil {
		return board.Reconnected
	}
	for _, m := range members {
		if id, _, _ := strings.Cut(m, " "); id == epoch {
			return board.Moved
		}
	}
	return board.Restarted
}

// resyncNote is what a page drawn again from the server says: why (the
// server restarted, the page came from another server of the room, or it
// fell behind), and where the class is now. It claims no more than the
// server knows: with several servers, a page whose server is gone is told
// so, not which of a stop or a restart it was. lesson is the chapter it
// says the class is in, "" for none.
func (s *Server) resyncNote(why board.Why) (text, lesson string) {
	head := "This page fell behind and was drawn again."
	switch {
	case why == board.Moved && s.cfg.Name != "":
		head = fmt.Sprintf("This page now follows server %s of the class, which drew it again; the room is the same.", s.cfg.Name)
	case why == board.Moved:
		head = "This page now follows another server of the class, which drew it again; the room is the same."
	case why == board.Reconnected:
		head = "This page reconnected to another server of the class, which drew it again."
	case why == board.Restarted && s.servers.peers.Shared():
		head = "The server this page followed stopped or restarted; a server of the class drew it again."
	case why == board.Restarted:
		head = "The server restarted; this page is back with the class."
	}
	st := s.room.Load()
	where := " No chapter is running."
	if i, ch, ok := s.teaching.lessons.Find(st.Lesson); ok && st.Lesson != "" {
		where = fmt.Sprintf(" The class is in chapter %d: %s.", i+1, ch.Title)
	}
	if st.Step {
		where += " Step mode is on: payments wait for the presenter."
	}
	return head + where, st.Lesson
}
