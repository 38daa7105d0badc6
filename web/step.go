package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
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

// stepView is the step bar as the board draws it.
func stepView(st *step.Stepper) views.StepBar {
	s := st.State()
	v := views.StepBar{On: s.On}
	for _, h := range s.Held {
		if h.Faults == nil {
			// Another server's request: its events tell only where it is.
			h.Faults = step.AimableAt(h.Checkpoint)
		}
		who := views.ScopeLabel(h.Scope)
		if h.Server != "" {
			who += " on " + h.Server
		}
		v.Held = append(v.Held, views.HeldRow{Request: h.Request, RowID: "tl-" + h.Request, Checkpoint: h.Checkpoint, Answer: heldAnswerText(h.Answer), Click: clickText(h.Click),
			CanLose: slices.Contains(h.Faults, "response_lost"), CanCrash: slices.Contains(h.Faults, "crash_midway"),
			OrderID: h.OrderID, Who: who})
	}
	return v
}

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

// stepMode draws step mode's events: a paused request shows where it
// waits, in its own row, until it goes on; the step bar is redrawn.
func (u *update) stepMode() {
	e := u.e
	const S = views.LaneServer
	switch e.Kind {
	case step.KindHeld:
		r := u.rowFor("request")
		u.step(r, views.Step{ID: r.ID + "-held", From: S, To: S, Label: "paused at “" + e.Message + "”",
			Badge: views.Badge{Text: "held", Tone: views.ToneWarn}})
	case step.KindResumed:
		id := "tl-" + e.Request
		for _, r := range u.p.rows {
			if r.ID != id {
				continue
			}
			for i, s := range r.Steps {
				if s.ID == id+"-held" {
					r.Steps = append(r.Steps[:i:i], r.Steps[i+1:]...)
					u.add(views.FrameDelete(s.ID))
					break
				}
			}
			if e.Message != "" {
				u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "released", Tone: views.ToneMute}})
			}
		}
	case step.KindAimed:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "aimed", Tone: views.ToneBad}})
	case watchKind:
		// A "Watch for" item ticked: the step bar's redraw is only there
		// to make a frame, which makes every page ask for its lesson.
	case step.KindHeldList:
		// Another server's held list changed: the bar shows it.
	case step.KindMode:
		r := u.rowFor("Step mode")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "step", Tone: views.ToneInfo}})
	}
	u.drawSteps()
}

// drawSteps redraws what changed in the step bar since the frames last
// drew it, so that what a held event costs each viewer does not grow with
// the requests held: the head when the list empties or fills, and each
// held row added, changed or gone, by its id. The whole bar is redrawn
// when step mode is turned on or off, and the whole list when that is
// shorter than its changes (Play) or when a row must go elsewhere than
// the end (another server's request that was held earlier).
func (u *update) drawSteps() {
	prev, next := u.p.steps, stepView(u.p.s.steps)
	u.p.steps = next
	u.add(stepBarChanges(prev, next)...)
}

// stepBarChanges are the fragments that turn the step bar prev into next.
func stepBarChanges(prev, next views.StepBar) []templ.Component {
	if prev.On != next.On {
		return []templ.Component{views.StepBarView(next, true)}
	}
	var ops []templ.Component
	if (len(prev.Held) == 0) != (len(next.Held) == 0) {
		ops = append(ops, views.StepHead(next, true))
	}
	was := make(map[string]views.HeldRow, len(prev.Held))
	for _, h := range prev.Held {
		was[h.Request] = h
	}
	is := make(map[string]bool, len(next.Held))
	var changed, added []views.HeldRow
	for _, h := range next.Held {
		is[h.Request] = true
		if old, ok := was[h.Request]; !ok {
			added = append(added, h)
		} else if old != h {
			changed = append(changed, h)
		}
	}
	// Rows are only added at the end: the rows of prev still there must
	// lead next's, in the same order.
	var gone []string
	inOrder, i := true, 0
	for _, h := range prev.Held {
		if !is[h.Request] {
			gone = append(gone, h.Request)
			continue
		}
		if next.Held[i].Request != h.Request {
			inOrder = false
		}
		i++
	}
	if !inOrder || len(gone)+len(changed)+len(added) > len(next.Held) {
		return append(ops, views.HeldList(next.Held, true))
	}
	for _, id := range gone {
		ops = append(ops, views.FrameDelete(views.HeldRowID(id)))
	}
	for _, h := range changed {
		ops = append(ops, views.HeldRowView(h, true))
	}
	if len(added) > 0 {
		ops = append(ops, views.FrameHeldRows(added))
	}
	return ops
}

// clickText names a page's click as the step bar writes it: "click 2",
// "click 2, retry 1"; "" for a request no page numbered.
func clickText(click string) string {
	if click == "" {
		return ""
	}
	n, retry, ok := strings.Cut(click, ".")
	if !ok {
		return "click " + n
	}
	return "click " + n + ", retry " + retry
}

// heldAnswerText is an HTTP status as the step bar writes it, "" for none.
func heldAnswerText(status int) string {
	if status == 0 {
		return ""
	}
	return strconv.Itoa(status)
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
