package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

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
