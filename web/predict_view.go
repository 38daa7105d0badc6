package web

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// view is the vote's panel for the page that asks: the board shows the
// count until the reveal, the split after; the presenter's board has the
// buttons; a phone shows its own answer.
func (h pollHandlers) view(st room.State, r *http.Request, board bool) views.Poll {
	v := views.Poll{Board: board, Presenter: board && h.isPresenter(r), Locked: h.locked}
	if _, ch, ok := h.book.Find(st.Lesson); ok {
		v.Chapter = ch.Title
		for i, q := range ch.Ask {
			v.Asks = append(v.Asks, views.PollAsk{N: i, When: q.When, Text: q.Text})
		}
	}
	if me, ok := st.Player(callerScope(r)); ok && !board {
		v.Me = views.PollPlayer{Nick: me.Nick, Right: me.Right, Graded: me.Graded}
	}
	if board && st.Scores != nil {
		v.ScoresShown = st.Scores.Shown
		if v.ScoresShown || v.Presenter {
			v.Scores, v.Players, v.HiddenPlayers = scoreRows(st.Scores, maxScoreRows)
		}
		if v.Presenter {
			v.Hidden = hiddenRows(st.Scores, maxScoreRows)
		}
	}
	h.puzzleView(&v, st, r)
	if p, q, ok := h.current(st); ok {
		o := &views.PollVote{ID: p.ID, Text: pollText(p, q), When: q.When, Step: p.Request != "", Phase: string(p.Phase), Answered: p.Answered(),
			Revealed: p.Phase == room.PollRevealed, Mine: -1}
		if b, ok := p.Ballots[callerScope(r)]; ok {
			o.Mine = b.Choice
		}
		split := p.Split()
		for i, ch := range q.Choices {
			pc := views.PollChoice{N: i, Text: ch.Text, Mine: i == o.Mine}
			if o.Revealed {
				pc.Count = split[i]
				pc.Right = p.Outcome != nil && p.Outcome.Choice == i
			}
			o.Choices = append(o.Choices, pc)
		}
		if o.Revealed && p.Outcome != nil {
			o.Graded, o.Said, o.Row = true, p.Outcome.Said, p.Outcome.Row
		}
		v.Vote = o
	}
	v.V = pollVersion(v)
	return v
}

// puzzleView adds the scheduler's puzzle to the panel: the puzzle under
// way, with the order's held requests for the student holding the step
// bar; or, on the presenter's board of a chapter that has one, the
// orders to start one on.
func (h pollHandlers) puzzleView(v *views.Poll, st room.State, r *http.Request) {
	_, ch, ok := h.book.Find(st.Lesson)
	if !ok || ch.Puzzle == "" {
		return
	}
	p, on := st.CurrentPuzzle()
	if !on {
		if v.Presenter {
			v.Starts, v.Follow = puzzleStarts(h.held()), true
		}
		return
	}
	z := &views.PollPuzzle{ID: p.ID, Goal: ch.Puzzle, Subject: p.Subject, Steps: p.Steps, Solved: p.Solved,
		Books: p.Books(), Unknown: p.Unknown, SolvedSteps: p.SolvedSteps, Released: p.Released, GiveBar: v.Presenter && !p.Over()}
	now := h.now()
	if _, bar, ok := st.BarHolder(now); ok {
		z.Holder = bar.Nick
	}
	if !v.Board {
		_, z.Mine = st.MayStep(callerScope(r), now)
	}
	if z.Mine {
		// Every other page follows the puzzle by the room's changes (a
		// step counted, the bar given, the puzzle solved); only the
		// holder's list changes with each held request.
		v.Follow = true
		for _, held := range h.held().Held {
			if held.Scope == p.Scope && held.OrderID == p.OrderID {
				z.Held = append(z.Held, views.PuzzleHeld{Request: held.Request, Checkpoint: held.Checkpoint,
					Click: clickLabel(held.Click), Server: printable(held.Server, 32)})
			}
		}
	}
	v.Puzzle = z
}

// clickLabel names a page's click as the phone writes it.
func clickLabel(click string) string {
	if click == "" {
		return ""
	}
	n, retry, ok := strings.Cut(printable(click, 8), ".")
	if !ok {
		return "click " + n
	}
	return "click " + n + ", retry " + retry
}

// puzzleStarts are the orders step mode holds two requests of or more,
// by their oldest held request, oldest first.
func puzzleStarts(st step.State) []views.PuzzleStart {
	var out []views.PuzzleStart
	at := map[string]int{}
	for _, h := range st.Held {
		if h.OrderID == "" {
			continue
		}
		k := h.Scope + "\x00" + h.OrderID
		if i, ok := at[k]; ok {
			out[i].Held++
			continue
		}
		at[k] = len(out)
		out = append(out, views.PuzzleStart{Request: h.Request, Subject: "order " + printable(h.OrderID, 32), Held: 1})
	}
	return slices.DeleteFunc(out, func(s views.PuzzleStart) bool { return s.Held < 2 })
}

// hiddenRows are the players the presenter hid, by nickname, at most
// limit.
func hiddenRows(sc *room.Scores, limit int) []views.PollScore {
	var out []views.PollScore
	for _, p := range sc.Players {
		if p.Hidden {
			out = append(out, views.PollScore{ID: p.ID, Nick: p.Nick, Right: p.Right, Graded: p.Graded})
		}
	}
	slices.SortFunc(out, func(a, b views.PollScore) int { return strings.Compare(a.Nick, b.Nick) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// maxScoreRows is how many players the board lists: the leaders, as many
// as the corner of a projected screen holds.
const maxScoreRows = 8

// scoreRows are the players the board lists, best first: the most votes
// right, then the fewest graded, then by nickname; the hidden are left
// out and counted, as are all players.
func scoreRows(sc *room.Scores, limit int) (rows []views.PollScore, players, hidden int) {
	for _, p := range sc.Players {
		players++
		if p.Hidden {
			hidden++
			continue
		}
		rows = append(rows, views.PollScore{ID: p.ID, Nick: p.Nick, Right: p.Right, Graded: p.Graded})
	}
	slices.SortFunc(rows, func(a, b views.PollScore) int {
		if a.Right != b.Right {
			return b.Right - a.Right
		}
		if a.Graded != b.Graded {
			return a.Graded - b.Graded
		}
		return strings.Compare(a.Nick, b.Nick)
	})
	if len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, players, hidden
}

// pollText is the vote's question; step mode's names the request it is
// about.
func pollText(p *room.Poll, q lesson.Question) string {
	if p.Request == "" {
		return q.Text
	}
	return "Step mode, " + p.Subject + ": " + q.Text
}

// pollVersion is a hash of what the panel shows, so that two servers
// give the same version for the same panel; never 0, which a page with no
// panel yet sends, and below 2^53 for JavaScript's numbers.
func pollVersion(v views.Poll) uint64 {
	h := fnv.New64a()
	vote, puzzle := v.Vote, v.Puzzle
	v.Vote, v.Puzzle, v.V = nil, nil, 0
	fmt.Fprintf(h, "%+v", v)
	if vote != nil {
		fmt.Fprintf(h, " %+v", *vote)
	}
	if puzzle != nil {
		fmt.Fprintf(h, " %+v", *puzzle)
	}
	if n := h.Sum64() & (1<<53 - 1); n != 0 {
		return n
	}
	return 1
}

// publishPollChange tells this server's pages that the vote, or the
// nicknames and scores, changed.
func (s *Server) publishPollChange(old, next room.State) {
	if !pollSame(old.Poll, next.Poll) {
		s.hub.Publish(live.Event{Kind: pollKind, Message: pollSummary(next.Poll)})
	}
	if !reflect.DeepEqual(old.Puzzle, next.Puzzle) {
		s.hub.Publish(live.Event{Kind: pollKind, Message: puzzleSummary(next.Puzzle)})
	}
	if !reflect.DeepEqual(old.Scores, next.Scores) && !(old.Scores == nil && next.Scores != nil && len(next.Scores.Players) == 0 && !next.Scores.Shown) {
		s.hub.Publish(live.Event{Kind: pollKind, Message: scoresSummary(next.Scores)})
	}
}

// scoresSummary is what the scores stand at, for the timeline's export:
// how many students have a nickname, and whether the board shows them.
// No nickname is written in it: they are the board's, not the books'.
func scoresSummary(sc *room.Scores) string {
	if sc == nil {
		return "scores: no nicknames"
	}
	shown := "hidden from the board"
	if sc.Shown {
		shown = "shown on the board"
	}
	return fmt.Sprintf("scores: %d nickname(s), %s", len(sc.Players), shown)
}

// pollSummary is what the vote stands at, for the timeline's export: the
// question, the phase, the count, and once revealed the split and the
// server's outcome. No ballot says whose it is.
func pollSummary(p *room.Poll) string {
	if p == nil {
		return "no vote"
	}
	msg := fmt.Sprintf("vote %d on %s question %d: %s, %d answered", p.ID, p.Lesson, p.Question+1, p.Phase, p.Answered())
	if p.Request != "" {
		msg = fmt.Sprintf("vote %d on the next step of %s (held at %s): %s, %d answered", p.ID, p.Subject, p.At, p.Phase, p.Answered())
	}
	if p.Phase == room.PollRevealed {
		msg += fmt.Sprintf("; split %v", p.Split())
	}
	if p.Outcome != nil {
		msg += fmt.Sprintf("; the server showed choice %d: %s", p.Outcome.Choice+1, p.Outcome.Said)
	}
	return msg
}

// pollSame reports whether two snapshots hold the same vote in the same
// state: the answers, the phase and the grade.
func pollSame(a, b *room.Poll) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.ID != b.ID || a.Phase != b.Phase || (a.Outcome == nil) != (b.Outcome == nil) || len(a.Ballots) != len(b.Ballots) {
		return false
	}
	for k, v := range a.Ballots {
		if w, ok := b.Ballots[k]; !ok || w.Choice != v.Choice {
			return false
		}
	}
	return true
}
