package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// Predict, then observe: the presenter opens a vote on one of the
// chapter's questions (lesson.Question), every phone answers once and
// may change its answer until the vote closes, the board counts the
// answers without their split until the presenter reveals it, and the
// narration grades the vote from the first event after the close that
// shows one of the choices. The vote is room state (room.Poll): every
// server of a class shows the same one, and a restarted server on the
// class's database finds it again.

// pollKind is the event that the room's vote changed. Every server
// publishes its own when it applies the change (applyRoom), so it is not
// relayed; it carries the room mark, so the pages ask for the vote again.
const pollKind = lesson.PollKind

// pollHandlers are the vote's endpoints; each holds only what it uses.
type pollHandlers struct {
	room        *room.Room[room.State]
	book        lesson.Book
	isPresenter func(*http.Request) bool
	clientIP    func(*http.Request) string
	locked      bool
	limits      room.PollLimits
	// held is step mode's held requests, on every server of the class,
	// which step mode's questions ask about.
	held func() step.State
	// now is real time, which the step bar's bound is kept in.
	now func() time.Time
}

func (s *Server) pollHandlers() pollHandlers {
	return pollHandlers{room: s.room, book: s.lessons, isPresenter: s.isPresenter, clientIP: s.clientIP,
		locked: s.cfg.PresenterToken != "", limits: room.DefaultPollLimits, held: s.steps.State, now: time.Now}
}

func (h pollHandlers) routes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/api/poll", h.handleGet)
	e.GET("/poll/live", h.handleLive)
	e.POST("/api/poll/answer", h.handleAnswer)
	e.POST("/api/poll/open", h.handleOpen, presenterOnly)
	e.POST("/api/poll/step", h.handleStep, presenterOnly)
	e.POST("/api/poll/nickname", h.handleNickname)
	e.POST("/api/poll/scores", h.handleScores, presenterOnly)
	e.POST("/api/poll/hide", h.handleHidePlayer, presenterOnly)
	e.POST("/api/poll/scores/clear", h.handleClearScores, presenterOnly)
	e.POST("/api/poll/close", h.handleClose, presenterOnly)
	e.POST("/api/poll/reveal", h.handleReveal, presenterOnly)
}

// PollOpen is the body of POST /api/poll/open: the question to ask, by
// its index (from 0) in the current chapter's "ask" list.
type PollOpen struct {
	Question int `json:"question"`
}

// PollStep is the body of POST /api/poll/step: the held request whose
// next step the class predicts.
type PollStep struct {
	Request string `json:"request"`
}

// PollNickname is the body of POST /api/poll/nickname: the nickname this
// browser's student goes by on the scores, "" for none.
type PollNickname struct {
	Nickname string `json:"nickname"`
}

// PollScores is the body of POST /api/poll/scores: whether the board
// shows the scores.
type PollScores struct {
	Shown bool `json:"shown"`
}

// PollHide is the body of POST /api/poll/hide: a player, by the id the
// board gives it, taken off the board (or put back).
type PollHide struct {
	Player string `json:"player"`
	Hidden bool   `json:"hidden"`
}

// PollRef is the body of POST /api/poll/close and /api/poll/reveal: the
// vote, by its id.
type PollRef struct {
	ID uint64 `json:"id"`
}

// PollAnswer is the body of POST /api/poll/answer: the vote, and the
// choice (from 0).
type PollAnswer struct {
	ID     uint64 `json:"id"`
	Choice int    `json:"choice"`
}

// PollState is GET /api/poll: the vote as the asker may see it. Split
// and Outcome are absent until the presenter reveals.
type PollState struct {
	ID       uint64 `json:"id"`
	Lesson   string `json:"lesson"`
	Question int    `json:"question"`
	// Request and At name, for step mode's question, the held request and
	// its checkpoint.
	Request  string   `json:"request,omitempty"`
	At       string   `json:"at,omitempty"`
	Text     string   `json:"text"`
	Choices  []string `json:"choices"`
	Phase    string   `json:"phase"`
	Answered int      `json:"answered"`
	// Mine is this browser's answer, -1 for none.
	Mine    int               `json:"mine"`
	Split   []int             `json:"split,omitempty"`
	Outcome *room.PollOutcome `json:"outcome,omitempty"`
	// Nickname is this browser's nickname, "" for none; Right and Scored
	// its running score: the votes graded right, of those graded.
	Nickname string `json:"nickname,omitempty"`
	Right    int    `json:"right"`
	Scored   int    `json:"scored"`
	// Graded says, once revealed, whether the server has shown the outcome
	// yet.
	Graded bool `json:"graded"`
}

func (h pollHandlers) handleOpen(c echo.Context) error {
	var req PollOpen
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	_, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		_, ch, ok := h.book.Find(s.Lesson)
		if !ok {
			return pay.Errorf(pay.EINVALID, "Start a chapter first: questions belong to the chapters.")
		}
		if req.Question < 0 || req.Question >= len(ch.Ask) {
			return pay.Errorf(pay.EINVALID, "The chapter %q has %d question(s); there is no question %d.", ch.Slug, len(ch.Ask), req.Question)
		}
		s.OpenPoll(req.Question, len(ch.Ask[req.Question].Choices))
		return nil
	})
	if err != nil {
		return err
	}
	return h.handleGet(c)
}

// handleStep opens step mode's question on a held request: what will its
// next step do? The question is the one for the checkpoint the request is
// held at; the request's own next event grades it.
func (h pollHandlers) handleStep(c echo.Context) error {
	var req PollStep
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	held, ok := h.heldRequest(req.Request)
	if !ok {
		return pay.Errorf(pay.ENOTFOUND, "The request %q is not held at a checkpoint now: ask while step mode holds it.", pay.Truncate(req.Request, 40))
	}
	q, ok := lesson.StepQuestion(held.Checkpoint)
	if !ok {
		return pay.Errorf(pay.EINVALID, "The request %s is held at %q: the step bar already says what it will answer, so there is nothing to predict.", held.Request, held.Checkpoint)
	}
	subject := heldSubject(held)
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		s.OpenStepPoll(held.Request, held.Checkpoint, subject, len(q.Choices))
		return nil
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

// heldRequest is the request step mode holds with the id, on any server.
func (h pollHandlers) heldRequest(id string) (step.HeldRequest, bool) {
	if id == "" {
		return step.HeldRequest{}, false
	}
	for _, r := range h.held().Held {
		if r.Request == id {
			return r, true
		}
	}
	return step.HeldRequest{}, false
}

// heldSubject is how the question names the held request: its order and
// which click of its page it is, short and printable, as the step bar
// names it.
func heldSubject(r step.HeldRequest) string {
	out := "order " + printable(r.OrderID, 32)
	if r.OrderID == "" {
		out = "request " + printable(r.Request, 32)
	}
	if r.Click != "" {
		out += ", click " + printable(r.Click, 8)
	}
	return out
}

// printable keeps at most n runes of s, each a printable one: a name a
// student chose is drawn as text, never as markup or control codes.
func printable(s string, n int) string {
	out := make([]rune, 0, min(len(s), n))
	for _, r := range s {
		if len(out) == n {
			break
		}
		if unicode.IsPrint(r) {
			out = append(out, r)
		}
	}
	return string(out)
}

// closeStepVote closes step mode's open question, if there is one: the
// presenter is stepping the race on, so the class has predicted.
func (s *Server) closeStepVote(ctx context.Context) {
	if p := s.room.Load().Poll; p == nil || p.Request == "" || p.Phase != room.PollOpen {
		return
	}
	_, _, _ = s.room.Change(ctx, func(st *room.State) error {
		if !st.CloseStepPoll() {
			return errNoStepVote
		}
		return nil
	})
}

// errNoStepVote is a room edit that found no step mode question open: it
// writes nothing.
var errNoStepVote = errors.New("no step mode question is open")

// handleNickname is a student's nickname for the scores: set, changed or
// taken away ("").
func (h pollHandlers) handleNickname(c echo.Context) error {
	var req PollNickname
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	nick, err := room.CleanNick(req.Nickname)
	if err != nil {
		return err
	}
	r := c.Request()
	if !hasSession(r) {
		ensureSession(c.Response(), r)
	}
	who, from := callerScope(r), addressHash(h.clientIP(r))
	if _, _, err := h.room.Change(r.Context(), func(s *room.State) error {
		return s.SetNick(who, from, nick, h.limits)
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

func (h pollHandlers) handleScores(c echo.Context) error {
	var req PollScores
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		s.ShowScores(req.Shown)
		return nil
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

// handleClearScores sets every student's score back to nothing; the
// nicknames stay, and so does which of them the board hides.
func (h pollHandlers) handleClearScores(c echo.Context) error {
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		s.ClearScores()
		return nil
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

func (h pollHandlers) handleHidePlayer(c echo.Context) error {
	var req PollHide
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error {
		if !s.HidePlayer(req.Player, req.Hidden) {
			return pay.Errorf(pay.ENOTFOUND, "No student goes by the player id %q.", pay.Truncate(req.Player, 20))
		}
		return nil
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

func (h pollHandlers) handleClose(c echo.Context) error {
	return h.change(c, (*room.State).ClosePoll)
}

func (h pollHandlers) handleReveal(c echo.Context) error {
	return h.change(c, (*room.State).RevealPoll)
}

func (h pollHandlers) change(c echo.Context, edit func(*room.State, uint64) error) error {
	var req PollRef
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if _, _, err := h.room.Change(c.Request().Context(), func(s *room.State) error { return edit(s, req.ID) }); err != nil {
		return err
	}
	return h.handleGet(c)
}

func (h pollHandlers) handleAnswer(c echo.Context) error {
	var req PollAnswer
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	r := c.Request()
	if !hasSession(r) {
		ensureSession(c.Response(), r)
	}
	voter, from := callerScope(r), addressHash(h.clientIP(r))
	if _, _, err := h.room.Change(r.Context(), func(s *room.State) error {
		return s.Answer(req.ID, voter, from, req.Choice, h.limits)
	}); err != nil {
		return err
	}
	return h.handleGet(c)
}

// addressHash keeps an address out of the stored room: the limit per
// address only needs to tell addresses apart.
func addressHash(ip string) string {
	sum := sha256.Sum256([]byte("poll-address\x00" + ip))
	return hex.EncodeToString(sum[:8])
}

func (h pollHandlers) handleGet(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	st := h.room.Load()
	me, _ := st.Player(callerScope(c.Request()))
	p, q, ok := h.current(st)
	if !ok {
		return c.JSON(http.StatusOK, PollState{Mine: -1, Lesson: st.Lesson, Nickname: me.Nick, Right: me.Right, Scored: me.Graded})
	}
	out := PollState{ID: p.ID, Lesson: p.Lesson, Question: p.Question, Request: p.Request, At: p.At,
		Text: pollText(p, q), Phase: string(p.Phase), Answered: p.Answered(), Mine: -1,
		Nickname: me.Nick, Right: me.Right, Scored: me.Graded}
	for _, ch := range q.Choices {
		out.Choices = append(out.Choices, ch.Text)
	}
	if b, ok := p.Ballots[callerScope(c.Request())]; ok {
		out.Mine = b.Choice
	}
	if p.Phase == room.PollRevealed {
		out.Split, out.Outcome, out.Graded = p.Split(), p.Outcome, p.Outcome != nil
	}
	return c.JSON(http.StatusOK, out)
}

// current is the room's vote and its question, if the vote belongs to the
// chapter the class is on.
func (h pollHandlers) current(st room.State) (*room.Poll, lesson.Question, bool) {
	p := st.Poll
	if p == nil || p.Lesson != st.Lesson || p.Runs != st.LessonRuns {
		return nil, lesson.Question{}, false
	}
	if p.Request != "" {
		q, ok := lesson.StepQuestion(p.At)
		return p, q, ok
	}
	_, ch, ok := h.book.Find(p.Lesson)
	if !ok || p.Question < 0 || p.Question >= len(ch.Ask) {
		return nil, lesson.Question{}, false
	}
	return p, ch.Ask[p.Question], true
}

// PollLive is the body of GET /poll/live: the panel's version and, when
// it changed, its HTML.
type PollLive struct {
	V    uint64 `json:"v"`
	HTML string `json:"html,omitempty"`
}

// handleLive is GET /poll/live?v=…[&board=1]: predict.js asks after each
// frame that changed the room, with the version of the panel it shows;
// 204 when it is still the one to show.
func (h pollHandlers) handleLive(c echo.Context) error {
	r := c.Request()
	c.Response().Header().Set("Cache-Control", "no-store")
	view := h.view(h.room.Load(), r, c.QueryParam("board") == "1")
	if v, err := strconv.ParseUint(c.QueryParam("v"), 10, 64); err == nil && v == view.V {
		return c.NoContent(http.StatusNoContent)
	}
	var buf bytes.Buffer
	if err := views.PollPanel(view).Render(r.Context(), &buf); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, PollLive{V: view.V, HTML: buf.String()})
}

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
		Books: p.Books(), Unknown: p.Unknown, SolvedSteps: p.SolvedSteps, GiveBar: v.Presenter && !p.Solved}
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
