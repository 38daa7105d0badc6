package web

import (
	"bytes"
	"context"
	"fmt"

	"github.com/a-h/templ"

	"paytwice/views"
	"paytwice/web/board"
)

// live returns the server's board, starting it on first use: a server
// that only serves the API never renders a fragment.
func (s *Server) live() *board.Board {
	s.liveOnce.Do(func() {
		s.proj = board.Start(board.Config{
			Store: s.db, Hub: s.hub, Clock: s.clock, Steps: s.steps, Ctx: s.baseCtx, Logf: s.logf,
			Switches: func() views.FaultSwitches {
				return views.FaultSwitches{Faults: s.currentFaults(), ClockOffset: s.clock.Offset()}
			},
			RoomChanged: changesRoom,
			Lab:         boardLab{s},
			ResyncNote: func(restarted bool) templ.Component {
				return views.StreamNote(s.resyncNote(restarted), true)
			},
		})
		s.liveStarted.Store(true)
	})
	return s.proj
}

// boardLab is the lab's numbers as the board draws them after events.
type boardLab struct{ s *Server }

func (l boardLab) Fresh() bool { return l.s.lab.tally.fresh() }

func (l boardLab) Outcomes(ctx context.Context) []byte {
	v := l.s.labView(ctx, false)
	if v.Outcomes == nil {
		return nil // not measured: labView said why
	}
	var buf bytes.Buffer
	if err := views.LabOutcomesSwap(v).Render(ctx, &buf); err != nil {
		return nil
	}
	return buf.Bytes()
}

// boardHandlers is the board's handler group, holding what it uses.
func (s *Server) boardHandlers() boardHandlers {
	return boardHandlers{board: s.live, steps: s.steps, closeVote: s.closeStepVote, admission: s.streams, clientIP: s.clientIP,
		presenter: s.hasPriority, maxStreams: s.cfg.Limits.MaxStreams, streamsEnded: &s.streamsEnded}
}

// resyncNote is what a page drawn again from the server says: that the
// server restarted (or the page fell behind), and where the class is now.
func (s *Server) resyncNote(restarted bool) string {
	head := "This page fell behind and was drawn again."
	if restarted {
		head = "The server restarted; this page is back with the class."
	}
	st := s.room.Load()
	where := " No chapter is running."
	if i, ch, ok := s.lessons.Find(st.Lesson); ok && st.Lesson != "" {
		where = fmt.Sprintf(" The class is in chapter %d: %s.", i+1, ch.Title)
	}
	if st.Step {
		where += " Step mode is on: payments wait for the presenter."
	}
	return head + where
}
