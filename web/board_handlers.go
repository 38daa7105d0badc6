package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/pay/addrlimit"
	"paytwice/web/board"
	"paytwice/web/room/step"
)

// DefaultMaxStreams is how many event streams a server keeps open at
// once unless configured otherwise: a classroom with a tab or two each.
const DefaultMaxStreams = 500

// boardHandlers serve what the board's pages read and the presenter's
// step bar drives: the event stream and step mode's JSON API. What the
// board shows and says is web/board's; these translate HTTP to it.
type boardHandlers struct {
	// board is the server's board, started on first use.
	board func() *board.Board
	steps stepControl
	// closeVote closes step mode's open question before the presenter
	// steps the race on (closeStepVote).
	closeVote func(context.Context)
	// admission keeps each address's and session's share of the streams
	// and the presenter's slots (stream_admission.go), by the address
	// clientIP names; presenter recognises the presenter.
	admission  *streamAdmission
	clientIP   func(*http.Request) string
	presenter  func(*http.Request) bool
	maxStreams int
	// streamsEnded is set once the server ends its streams for shutdown.
	streamsEnded *atomic.Bool
	// stepper lets the presenter, and the student holding the step bar
	// of a puzzle, step held requests (stepperOnly); puzzle counts the
	// steps taken on the puzzle's order (puzzle_steps.go).
	stepper echo.MiddlewareFunc
	puzzle  puzzleSteps
}

// stepControl is what the step API uses of step mode (web/room/step).
type stepControl interface {
	State() step.State
	Turn(on bool, who string) error
	Release(ctx context.Context, id string, toEnd bool, only *step.Only) (string, error)
	PlayAll(ctx context.Context) int
	AimAny(ctx context.Context, id, fault string) error
}

// routes registers the event stream and step mode's API.
func (h boardHandlers) routes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/events", h.handleEvents)
	e.POST("/api/board/hide", h.handleHide, presenterOnly)
	h.stepRoutes(e, presenterOnly)
}

// handleEvents is GET /events: the live panels' Server-Sent Events
// stream (board.Stream). A student's stream beyond the class's share of
// the server gets 503 and Retry-After, one beyond its address's or its
// session's share, or opened faster than pages reconnect, 429
// (streamAdmission); the presenter's only beyond every stream the server
// keeps.
func (h boardHandlers) handleEvents(c echo.Context) error {
	r := c.Request()
	if h.streamsEnded.Load() {
		c.Response().Header().Set("Retry-After", strconv.Itoa(addrlimit.StreamRetryAfter))
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is shutting down."))
	}
	leave, no := h.admission.admit(h.clientIP(r), sessionOf(r), h.presenter(r))
	if no != nil {
		c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(no.wait)))
		code := pay.EBUSY
		if no.full {
			code = pay.EUNAVAILABLE
		}
		return writeProblem(c, pay.Errorf(code, "%s", no.why))
	}
	defer leave()
	err := h.board().Stream(c.Response(), r, h.maxStreams)
	switch {
	case errors.Is(err, board.ErrClosed):
		c.Response().Header().Set("Retry-After", strconv.Itoa(addrlimit.StreamRetryAfter))
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is shutting down."))
	case errors.Is(err, board.ErrFull):
		c.Response().Header().Set("Retry-After", strconv.Itoa(addrlimit.StreamRetryAfter))
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "This server already has %d live views open, its limit (-max-streams). The page works without its live panels; it reconnects by itself.", h.maxStreams))
	}
	return err
}

// stepRoutes registers step mode's JSON API: reading it is open to all,
// changing it is the presenter's, like the fault switches; Next and
// Finish are also the student's who holds a puzzle's step bar.
func (h boardHandlers) stepRoutes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/api/step", h.handleGetStep)
	e.PUT("/api/step", h.handlePutStep, presenterOnly)
	e.POST("/api/step/next", h.handleStepNext, h.stepper)
	e.POST("/api/step/finish", h.handleStepFinish, h.stepper)
	e.POST("/api/step/play", h.handleStepPlay, presenterOnly)
	e.POST("/api/step/aim", h.handleStepAim, presenterOnly)
}

// StepChange is the body of PUT /api/step.
type StepChange struct {
	On *bool `json:"on"`
}

// StepTarget is the body of POST /api/step/next and /finish: the request
// to let go ("" or no body: the oldest held).
type StepTarget struct {
	Request string `json:"request"`
}

func (h boardHandlers) handleGetStep(c echo.Context) error {
	return c.JSON(http.StatusOK, h.steps.State())
}

func (h boardHandlers) handlePutStep(c echo.Context) error {
	var req StepChange
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.On == nil {
		return pay.Errorf(pay.EINVALID, `Say whether step mode is on: {"on": true} or {"on": false}.`)
	}
	if !*req.On {
		h.closeVote(c.Request().Context())
		// The held requests go on by themselves once step mode is off:
		// the puzzle under way ends unsolved before they charge, or the
		// board would say the class solved what nobody scheduled.
		if err := h.puzzle.releasedByStepOff(c.Request().Context()); err != nil {
			return err
		}
	}
	if err := h.steps.Turn(*req.On, changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.steps.State())
}

func (h boardHandlers) stepTarget(c echo.Context) (string, error) {
	var t StepTarget
	if c.Request().ContentLength == 0 {
		return "", nil
	}
	if err := decodeAdminJSON(c.Request(), &t); err != nil {
		return "", err
	}
	return t.Request, nil
}

func (h boardHandlers) handleStepNext(c echo.Context) error   { return h.stepRelease(c, false) }
func (h boardHandlers) handleStepFinish(c echo.Context) error { return h.stepRelease(c, true) }

func (h boardHandlers) stepRelease(c echo.Context, toEnd bool) error {
	id, err := h.stepTarget(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id, only, err := h.puzzle.target(c.Request(), id)
	if err != nil {
		return err
	}
	h.closeVote(ctx)
	// The server that holds the request counts the puzzle's step
	// (countHeldStep) and checks a student's bound: this one may not list
	// it yet.
	released, err := h.steps.Release(ctx, id, toEnd, only)
	if err != nil {
		return err
	}
	out := h.steps.State()
	out.Released = released
	return c.JSON(http.StatusOK, out)
}

func (h boardHandlers) handleStepPlay(c echo.Context) error {
	ctx := c.Request().Context()
	h.closeVote(ctx)
	// Each server that holds the puzzle's requests counts the Play
	// (countHeldPlay): this one may not list them yet.
	n := h.steps.PlayAll(ctx)
	out := h.steps.State()
	out.Released = fmt.Sprintf("%d", n)
	return c.JSON(http.StatusOK, out)
}

// StepAim is the body of POST /api/step/aim.
type StepAim struct {
	Request string `json:"request"`
	Fault   string `json:"fault"`
}

func (h boardHandlers) handleStepAim(c echo.Context) error {
	var a StepAim
	if err := decodeAdminJSON(c.Request(), &a); err != nil {
		return err
	}
	if err := h.steps.AimAny(c.Request().Context(), a.Request, a.Fault); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.steps.State())
}
