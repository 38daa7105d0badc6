package web

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/views"
	"paytwice/web/board"
	"paytwice/web/workshop"
)

// The workshop's pages: a student's (GET /workshop and its two forms),
// the self-refreshing parts, and the presenter's forms on the board.
func (h workshopHandlers) pageRoutes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET("/workshop", h.handlePage)
	e.POST("/workshop", h.handleRegisterForm)
	e.POST("/workshop/run", h.handleRunForm)
	e.GET("/workshop/-/mine", h.handleMine)
	e.GET("/workshop/-/state", h.handleOpenState)
	e.GET("/workshop/-/scores", h.handleScores)
	e.POST("/workshop/-/settings", h.handleSettingsForm, presenterOnly)
	e.POST("/workshop/-/run-all", h.handleRunAllForm, presenterOnly)
	e.POST("/workshop/-/hide", h.handleHideForm, presenterOnly)
	e.POST("/workshop/-/show", h.handleShowForm, presenterOnly)
	e.POST("/workshop/-/remove", h.handleRemoveForm, presenterOnly)
	e.POST("/workshop/-/reset", h.handleResetForm, presenterOnly)
}

func rowView(r workshop.Row) views.WorkshopRow {
	r = shownRow(r)
	return views.WorkshopRow{Name: r.Name, Endpoint: r.Endpoint, State: string(r.Run.State), Place: r.Place,
		Cases: r.Run.Done, Passed: r.Run.Passed, Failed: r.Run.Failed, FirstSafety: r.Run.FirstSafety,
		FirstFail: r.Run.FirstFailure, Message: r.Run.Message, Charges: r.Charges, Pruned: r.Pruned, ChargesUnknown: r.ChargesUnknown}
}

// page is the student's page for r, with the form's values and a
// refusal to show.
func (h workshopHandlers) page(r *http.Request, name, url, message string) views.WorkshopPage {
	v := views.WorkshopPage{On: h.ws.On(), Host: r.Host, Name: name, URL: url, Message: message, Presenter: h.isPresenter(r)}
	if v.Presenter {
		v.Board = h.boardView(r, "")
	}
	h.countBooks(r.Context())
	if m, ok := h.ws.Mine(h.who(r)); ok {
		v.Mine = &views.WorkshopMine{Row: rowView(m.Row), Gateway: gatewayURL(r, m.GatewayPath)}
		if name == "" && url == "" {
			v.Name, v.URL = m.Name, m.Endpoint
		}
	}
	return v
}

func (h workshopHandlers) handlePage(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.WorkshopStudentPage(h.page(c.Request(), "", "", "")))
}

// refusedPage shows the page again with err's sentence, at err's status.
func (h workshopHandlers) refusedPage(c echo.Context, err error, name, url string) error {
	return render(c, problemFor(pay.ErrorCode(err)).Status, views.WorkshopStudentPage(h.page(c.Request(), name, url, pay.ErrorMessage(err))))
}

func (h workshopHandlers) handleRegisterForm(c echo.Context) error {
	name, url := c.FormValue("name"), c.FormValue("url")
	if _, err := h.register(c, WorkshopRegister{Name: name, URL: url}); err != nil {
		return h.refusedPage(c, err, name, url)
	}
	return c.Redirect(http.StatusSeeOther, "/workshop")
}

func (h workshopHandlers) handleRunForm(c echo.Context) error {
	if _, err := h.ask(c.Request()); err != nil {
		return h.refusedPage(c, err, "", "")
	}
	return c.Redirect(http.StatusSeeOther, "/workshop")
}

// handleMine is a student's own result, which their page fetches every
// two seconds; while the workshop is closed, the place it comes back to
// (the books are not counted for it).
func (h workshopHandlers) handleMine(c echo.Context) error {
	open := h.ws.On()
	if open {
		h.countBooks(c.Request().Context())
	}
	m, ok := h.ws.Mine(h.who(c.Request()))
	if !ok {
		return pay.Errorf(pay.ENOTFOUND, "You have not registered an endpoint yet.")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	if !open {
		return render(c, http.StatusOK, views.WorkshopMineClosed())
	}
	return render(c, http.StatusOK, views.WorkshopMineRow(rowView(m.Row)))
}

// handleOpenState is the line of a student's page that says whether the
// workshop is open, which the page fetches every two seconds.
func (h workshopHandlers) handleOpenState(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.WorkshopOpenState(h.ws.On()))
}

// boardView is the board's workshop: address is where students open
// the page.
func (h workshopHandlers) boardView(r *http.Request, address string) views.WorkshopBoard {
	sb := h.scoreboard(r.Context())
	v := views.WorkshopBoard{On: sb.On, Presenter: h.isPresenter(r), Address: address, Queued: sb.Queued, Queue: sb.Queue,
		Faults: views.WorkshopFaults{LatencyMS: sb.Faults.LatencyMS, HoldAnswerMS: sb.Faults.HoldAnswerMS, DropFirstAnswer: sb.Faults.DropFirstAnswer}}
	var nets []string
	for _, p := range sb.Allowed {
		nets = append(nets, p.String())
	}
	v.Allowed = strings.Join(nets, ", ")
	for _, row := range sb.Rows {
		v.Rows = append(v.Rows, rowView(row))
	}
	if v.Presenter {
		for _, name := range sb.Hidden {
			v.Hidden = append(v.Hidden, board.Plain(name, 40))
		}
	}
	return v
}

func (h workshopHandlers) handleScores(c echo.Context) error {
	return render(c, http.StatusOK, views.WorkshopScores(h.boardView(c.Request(), "")))
}

func (h workshopHandlers) handleSettingsForm(c echo.Context) error {
	num := func(field string) (int, error) {
		v := strings.TrimSpace(c.FormValue(field))
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, pay.Errorf(pay.EINVALID, "%s must be a whole number of milliseconds, not %q.", strings.ReplaceAll(field, "_", " "), pay.Truncate(v, 20))
		}
		return n, nil
	}
	latency, err := num("latency_ms")
	if err != nil {
		return err
	}
	hold, err := num("hold_answer_ms")
	if err != nil {
		return err
	}
	on := c.FormValue("on") != ""
	if err := h.apply(WorkshopSettings{On: &on, Faults: sim.GatewayBaseFaults{
		LatencyMS: latency, HoldAnswerMS: hold, DropFirstAnswer: c.FormValue("drop_first_answer") != ""}}); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/board")
}

// handleHideForm is the presenter's one click that takes a row off the
// scoreboard.
func (h workshopHandlers) handleHideForm(c echo.Context) error {
	if !h.ws.Hide(c.FormValue("name")) {
		return pay.Errorf(pay.ENOTFOUND, "The scoreboard shows no student called %q.", pay.Truncate(c.FormValue("name"), 40))
	}
	return c.Redirect(http.StatusSeeOther, "/board")
}

// handleShowForm is the presenter's "show again": a hidden row goes back
// on the scoreboard.
func (h workshopHandlers) handleShowForm(c echo.Context) error {
	if !h.ws.Show(c.FormValue("name")) {
		return pay.Errorf(pay.ENOTFOUND, "No student called %q is hidden from the scoreboard.", pay.Truncate(c.FormValue("name"), 40))
	}
	return c.Redirect(http.StatusSeeOther, "/board")
}

func (h workshopHandlers) handleRunAllForm(c echo.Context) error {
	h.ws.AskAll()
	return c.Redirect(http.StatusSeeOther, "/board")
}
