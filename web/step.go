package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// Step mode (web/room/step) holds payments at checkpoints; this file is
// its HTTP side: the JSON API, the step bar the pages draw, and what a
// payment tells the stepper of itself (step.Request).

// StepState and HeldRequest are the bodies of the step API.
type (
	StepState   = step.State
	HeldRequest = step.HeldRequest
)

// ID is the payment's id on the timeline.
func (p *payment) ID() string { return p.id }

// Step is the payment's passage through step mode.
func (p *payment) Step() *step.Progress { return &p.step }

// Describe is the payment as the step bar lists it.
func (p *payment) Describe() step.HeldRequest {
	return step.HeldRequest{Request: p.id, Click: pageClick(p.c.Request()), Key: p.key, OrderID: p.req.OrderID, Scope: p.scope, Amount: p.req.AmountSatang}
}

// Done is closed when the payment's client went away.
func (p *payment) Done() <-chan struct{} { return p.c.Request().Context().Done() }

// Publish publishes one of step mode's events for the payment.
func (p *payment) Publish(kind live.Kind, msg string) {
	p.publishEvent(live.Event{Kind: kind, Message: msg})
}

// PauseWork stops the deadline of p's claimed work, if it has one, until
// resume.
func (p *payment) PauseWork() (resume func()) {
	if p.run == nil {
		return func() {}
	}
	return p.run.PauseWork()
}

// RenewWork tells every sweeper that p's claimed work, if it has one, is
// alive for lease from now.
func (p *payment) RenewWork(lease time.Duration) {
	if p.run == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.s.baseCtx), pay.MaxClaimWait)
	defer cancel()
	if err := p.run.RenewWork(ctx, lease); err != nil {
		p.s.logf("step mode: renewing the work lease of %s: %v", p.id, err)
	}
}

// LetHeldGo is for shutdown: every request step mode holds on this server
// runs to its end at once (step.Stepper's LetHeldGo); it returns how many.
func (s *Server) LetHeldGo() int { return s.steps.LetHeldGo() }

// stepRoutes registers step mode's JSON API: reading it is open to all,
// changing it is the presenter's, like the fault switches.
func (s *Server) stepRoutes(e *echo.Echo) {
	e.GET("/api/step", s.handleGetStep)
	e.PUT("/api/step", s.handlePutStep, s.presenterOnly)
	e.POST("/api/step/next", s.handleStepNext, s.presenterOnly)
	e.POST("/api/step/finish", s.handleStepFinish, s.presenterOnly)
	e.POST("/api/step/play", s.handleStepPlay, s.presenterOnly)
	e.POST("/api/step/aim", s.handleStepAim, s.presenterOnly)
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

func (s *Server) handleGetStep(c echo.Context) error {
	return c.JSON(http.StatusOK, s.steps.State())
}

func (s *Server) handlePutStep(c echo.Context) error {
	var req StepChange
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.On == nil {
		return pay.Errorf(pay.EINVALID, `Say whether step mode is on: {"on": true} or {"on": false}.`)
	}
	if err := s.steps.Turn(*req.On, changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.steps.State())
}

func (s *Server) stepTarget(c echo.Context) (string, error) {
	var t StepTarget
	if c.Request().ContentLength == 0 {
		return "", nil
	}
	if err := decodeAdminJSON(c.Request(), &t); err != nil {
		return "", err
	}
	return t.Request, nil
}

func (s *Server) handleStepNext(c echo.Context) error   { return s.stepRelease(c, false) }
func (s *Server) handleStepFinish(c echo.Context) error { return s.stepRelease(c, true) }

func (s *Server) stepRelease(c echo.Context, toEnd bool) error {
	id, err := s.stepTarget(c)
	if err != nil {
		return err
	}
	released, err := s.steps.Release(c.Request().Context(), id, toEnd)
	if err != nil {
		return err
	}
	out := s.steps.State()
	out.Released = released
	return c.JSON(http.StatusOK, out)
}

func (s *Server) handleStepPlay(c echo.Context) error {
	n := s.steps.PlayAll(c.Request().Context())
	out := s.steps.State()
	out.Released = fmt.Sprintf("%d", n)
	return c.JSON(http.StatusOK, out)
}

// aimedAt applies the faults aimed at p: into the protocol's faults
// (while it runs), and into p's own (the lost response, which the HTTP
// side plays).
func (p *payment) aimedAt(f *pay.ServerFaults) {
	lost, crash := p.step.Aimed()
	if f != nil && crash {
		f.CrashMidway = true
	}
	if lost {
		p.faults.ResponseLost = true
	}
}

// StepAim is the body of POST /api/step/aim.
type StepAim struct {
	Request string `json:"request"`
	Fault   string `json:"fault"`
}

func (s *Server) handleStepAim(c echo.Context) error {
	var a StepAim
	if err := decodeAdminJSON(c.Request(), &a); err != nil {
		return err
	}
	if err := s.steps.AimAny(c.Request().Context(), a.Request, a.Fault); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.steps.State())
}
