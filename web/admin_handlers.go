package web

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/pay/peers"
	"paytwice/web/room"
)

// adminHandlers serve the presenter's endpoints: the fault switches, the
// sweeper on demand, the reset and the clock. Reading the switches is open
// to anyone; changing anything needs the presenter token when one is
// configured. They translate HTTP; what a change does is the demo's.
type adminHandlers struct {
	switches faultControl
	clock    clockControl
	sweeper  sweepControl
	// reset resets the demonstration for the whole room (demoReset.run,
	// admin.go).
	reset func(ctx context.Context, who string) error
}

// clockControl is what the presenter's endpoints read and move of the
// room's clock (roomClock, admin.go).
type clockControl interface {
	clockState() ClockState
	advanceClock(ctx context.Context, d time.Duration, who string) error
}

// faultControl is what the presenter's endpoints read and change of the
// room's fault switches (faultSwitches, faults.go).
type faultControl interface {
	currentFaults() pay.Faults
	applyFaults(ctx context.Context, f pay.Faults, who string) error
	patchFaults(ctx context.Context, body []byte, who string) (pay.Faults, error)
}

// sweepControl is the sweeper on demand (keySweeper, jobs.go).
type sweepControl interface {
	Sweep(ctx context.Context) ([]pay.SweepOutcome, error)
	report(outcomes []pay.SweepOutcome) SweepReport
}

// routes registers the presenter's endpoints.
func (h adminHandlers) routes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/api/faults", h.handleGetFaults)
	e.PUT("/api/faults", h.handlePutFaults, presenterOnly)
	e.PATCH("/api/faults", h.handlePatchFaults, presenterOnly)
	e.POST("/api/sweep", h.handleSweep, presenterOnly)
	e.POST("/api/reset", h.handleReset, presenterOnly)
	e.POST("/api/clock/advance", h.handleClockAdvance, presenterOnly)
	e.GET(peers.PresenterProbePath, handlePresenterProbe, presenterOnly)
}

// handlePresenterProbe is GET /api/presenter: 204 for the presenter, and
// presenterOnly's 403 (or 429 after too many wrong tokens) for anyone
// else, each wrong token counted as every other is. A script checks its
// token with it; paytwice cluster's front door asks it before it keeps a
// connection for a header token no server has recognised yet.
func handlePresenterProbe(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.NoContent(http.StatusNoContent)
}

// handleGetFaults is GET /api/faults: every switch, open to anyone.
func (h adminHandlers) handleGetFaults(c echo.Context) error {
	return c.JSON(http.StatusOK, h.switches.currentFaults())
}

// handlePutFaults is PUT /api/faults: the body replaces every switch; a
// switch it leaves out is turned off.
func (h adminHandlers) handlePutFaults(c echo.Context) error {
	var f pay.Faults
	if err := decodeAdminJSON(c.Request(), &f); err != nil {
		return err
	}
	if err := h.switches.applyFaults(c.Request().Context(), f, changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.switches.currentFaults())
}

// handlePatchFaults is PATCH /api/faults: only the fields the body names
// change, so `{"server":{"delay_ms":800}}` leaves everything else alone.
func (h adminHandlers) handlePatchFaults(c echo.Context) error {
	body, err := readAdminBody(c.Request())
	if err != nil {
		return err
	}
	f, err := h.switches.patchFaults(c.Request().Context(), body, changedBy(c.Request()))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, f)
}

// handleSweep is POST /api/sweep: run the lock-timeout sweep now, rather
// than waiting for the next periodic one, and report what it closed. Keys
// started less than the lock timeout ago are left alone: their request
// may still be running.
func (h adminHandlers) handleSweep(c echo.Context) error {
	outcomes, err := h.sweeper.Sweep(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.sweeper.report(outcomes))
}

// handleReset is POST /api/reset.
func (h adminHandlers) handleReset(c echo.Context) error {
	if err := h.reset(c.Request().Context(), changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"reset": true, "faults": h.switches.currentFaults()})
}

// handleClockAdvance is POST /api/clock/advance with {"seconds": n}.
func (h adminHandlers) handleClockAdvance(c echo.Context) error {
	var req ClockAdvance
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.Seconds <= 0 || req.Seconds > int64(room.MaxClockAdvance/time.Second) {
		return pay.Errorf(pay.EINVALID, "seconds must be between 1 and %d, not %d.", int64(room.MaxClockAdvance/time.Second), req.Seconds)
	}
	if err := h.clock.advanceClock(c.Request().Context(), time.Duration(req.Seconds)*time.Second, changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.clock.clockState())
}
