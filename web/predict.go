package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
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
	return pollHandlers{room: s.room, book: s.teaching.lessons, isPresenter: s.admission.presenter.isPresenter, clientIP: s.admission.presenter.clientIP,
		locked: s.cfg.PresenterToken != "", limits: room.DefaultPollLimits, held: s.payments.steps.State, now: time.Now}
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
