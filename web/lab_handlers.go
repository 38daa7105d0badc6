package web

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/lab"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
)

// labHandlers serve the common-mistakes lab and the guided lessons: the
// lab's switches, its numbers, its prune, its checker, the parts of the
// page that changed, and the chapter the class is on. They
// translate HTTP; what a switch or a prune does, and what the lab
// measured, are the lab's (web/lab's table, and mistakesLab's counts).
type labHandlers struct {
	lab   *mistakesLab
	panel labPanel
	// room is what the pages ask for after each event: the room's
	// versions and the demo clock.
	room    roomVersions
	lessons lessonControl
	faults  func() pay.Faults // the room's fault switches (faults.go)
	// isPresenter says r comes from the presenter (presenter.go).
	isPresenter func(*http.Request) bool
	// check runs paytwice check from the page (lab_check.go).
	check func(ctx context.Context, base string) views.LabCheck
}

// lessonControl is what the lab's endpoints use of the guided lessons
// (guidedLessons, lessons.go).
type lessonControl interface {
	current() string
	version() uint64
	view(shown string, presenter, board bool) views.Lesson
	book() lesson.Book
	start(ctx context.Context, slug, who string) error
}

// routes registers the lab's endpoints. Which handler POST /v1/payments
// runs is decided in handleCreatePayment.
func (h labHandlers) routes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/api/lab", h.handleGetLab)
	e.PUT("/api/lab", h.handlePutLab, presenterOnly)
	e.PATCH("/api/lab", h.handlePatchLab, presenterOnly)
	e.GET("/api/lab/outcomes", h.handleLabOutcomes)
	e.POST("/api/lab/prune", h.handleLabPrune, presenterOnly)
	e.POST("/lab/check", h.handleLabCheck, presenterOnly)
	e.GET("/lab/live", h.handleLabLive)
	e.GET("/api/lessons", h.handleGetLessons)
	e.PUT("/api/lessons/current", h.handlePutLesson, presenterOnly)
}

// handleGetLab is GET /api/lab: the lab's switches, open to anyone.
func (h labHandlers) handleGetLab(c echo.Context) error {
	return c.JSON(http.StatusOK, h.lab.Settings())
}

// handlePutLab is PUT /api/lab: the body replaces every lab switch; what
// it leaves out is off (and check_gap_ms 0).
func (h labHandlers) handlePutLab(c echo.Context) error {
	var next room.LabSettings
	if err := decodeAdminJSON(c.Request(), &next); err != nil {
		return err
	}
	if err := h.lab.switches.apply(c.Request().Context(), next, changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.lab.Settings())
}

// handlePatchLab is PATCH /api/lab: only the fields the body names
// change.
func (h labHandlers) handlePatchLab(c echo.Context) error {
	body, err := readAdminBody(c.Request())
	if err != nil {
		return err
	}
	l, err := h.lab.switches.patch(c.Request().Context(), body, changedBy(c.Request()))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

// handleLabOutcomes is GET /api/lab/outcomes.
func (h labHandlers) handleLabOutcomes(c echo.Context) error {
	o, err := h.lab.outcomes(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

// handleLabPrune is POST /api/lab/prune: prune done keys now, with the
// lab's retention if one is set.
func (h labHandlers) handleLabPrune(c echo.Context) error {
	rep, err := h.lab.prune(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

// handleLabCheck is POST /lab/check, the lab's "Run the checker": paytwice
// check against this server's own POST /v1/payments, reached on the
// address the request came in on, with the lab's mistake of the moment,
// and the table of its verdicts for the page. One run at a time: its
// fifty-odd payments show on the class's timeline under two callers of
// their own.
func (h labHandlers) handleLabCheck(c echo.Context) error {
	r := c.Request()
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return render(c, http.StatusOK, views.LabCheckReport(views.LabCheck{Message: "This server cannot tell its own address, so the checker has nowhere to send its requests."}))
	}
	return render(c, http.StatusOK, views.LabCheckReport(h.check(r.Context(), "http://"+addr.String())))
}

// handleLabLive is GET /lab/live?s=…&o=…&l=…&r=…&c=…[&all=1]: lab.js asks after each
// frame of the event stream, with the versions of the settings, the
// outcomes and the lesson it shows (only those it has on the page). The
// answer is 204 when nothing changed, else the parts to replace. So the
// lab needs no event stream of its own: the page's one connection is
// enough, and between events nothing is sent.
func (h labHandlers) handleLabLive(c echo.Context) error {
	r := c.Request()
	ctx := r.Context()
	c.Response().Header().Set("Cache-Control", "no-store")
	version := func(name string) (uint64, bool) {
		v := c.QueryParam(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	}
	// all=1 asks for every part whatever versions the page holds: a page
	// back from another life of the server holds versions of that life.
	all := c.QueryParam("all") == "1"
	presenter := h.isPresenter(r)
	out := LabLive{V: map[string]uint64{}, HTML: map[string]string{}}
	add := func(id string, comp templ.Component) error {
		var buf bytes.Buffer
		if err := comp.Render(ctx, &buf); err != nil {
			return err
		}
		out.HTML[id] = buf.String()
		return nil
	}

	var panel *views.Lab
	getLab := func() views.Lab {
		if panel == nil {
			v := h.panel.view(ctx, presenter)
			panel = &v
		}
		return *panel
	}
	if sv, ok := version("s"); ok {
		l := getLab()
		out.V["s"] = l.SettingsV
		if all || sv != l.SettingsV {
			for _, m := range lab.Mistakes {
				if err := add(views.LabControlID(m), views.LabControls(m, l)); err != nil {
					return err
				}
			}
			if err := add("lab-summary", views.LabSummary(l)); err != nil {
				return err
			}
		}
	}
	if ov, ok := version("o"); ok {
		l := getLab()
		out.V["o"] = l.OutcomesV
		if (all || ov != l.OutcomesV) && l.Outcomes != nil {
			for _, m := range lab.Mistakes {
				if err := add(views.LabOutcomeID(m), views.LabOutcomeView(m, l.Outcomes[m.Name])); err != nil {
					return err
				}
			}
			if err := add("lab-summary", views.LabSummary(l)); err != nil {
				return err
			}
		}
	}
	if lv, ok := version("l"); ok {
		cur := h.lessons.version()
		out.V["l"] = cur
		if all || lv != cur {
			lv := h.lessons.view(h.lessons.current(), presenter, c.QueryParam("board") == "1")
			if err := add("lesson", views.LessonPanel(lv)); err != nil {
				return err
			}
		}
	}
	// The checkout card asks for the room's resets (r) and changes (c):
	// after a reset it starts a new order, after any change it checks its
	// card against the server (static/pay.js).
	// Every live page asks for the room's changes (c): a change may have
	// moved the demo clock, so the answer carries the clock (now), which
	// keeps the pages' key ages true.
	moved := false
	epoch, books, changes := h.room.roomEpoch()
	if c.QueryParam("c") != "" {
		cv, ok := version("c")
		out.V["c"] = changes
		moved = !ok || cv != changes
	}
	if rv, ok := version("r"); ok {
		out.V["r"] = epoch
		moved = moved || rv != epoch
	}
	if bv, ok := version("b"); ok {
		out.V["b"] = books
		moved = moved || bv != books
	}
	if moved || all {
		out.Now = h.room.now().UnixMilli()
	}
	if len(out.HTML) == 0 && !moved && !all {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, out)
}

// handleGetLessons is GET /api/lessons: the chapters and the one the
// class is on.
func (h labHandlers) handleGetLessons(c echo.Context) error {
	return c.JSON(http.StatusOK, LessonsState{Current: h.lessons.current(), Chapters: h.lessons.book()})
}

// handlePutLesson is PUT /api/lessons/current: start a chapter for the
// whole class, or leave the lessons.
func (h labHandlers) handlePutLesson(c echo.Context) error {
	var req LessonChange
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if err := h.lessons.start(c.Request().Context(), req.Slug, changedBy(c.Request())); err != nil {
		return err
	}
	book := h.lessons.book()
	out := LessonStarted{Current: h.lessons.current(), Of: len(book), Faults: h.faults(), Lab: h.lab.Settings()}
	if i, ch, ok := book.Find(out.Current); ok {
		out.Chapter, out.Retry = i+1, ch.Retry
	}
	return c.JSON(http.StatusOK, out)
}
