package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// The presenter's removals: one student (POST /api/workshop/remove with
// {"name": …}, or the page's "remove" beside a row), or every student
// (POST /api/workshop/reset, or the page's "Reset the workshop"). Each
// takes the registrations, gateways and their books away.

// WorkshopRemove is POST /api/workshop/remove's body.
type WorkshopRemove struct {
	Name string `json:"name"`
}

// WorkshopRemoved is the answer to a removal: how many students went.
type WorkshopRemoved struct {
	Removed int `json:"removed"`
}

func (h workshopHandlers) removeStudent(r *http.Request, name string) error {
	found, err := h.ws.Remove(r.Context(), name)
	if !found {
		return pay.Errorf(pay.ENOTFOUND, "No student called %q is registered.", pay.Truncate(name, 40))
	}
	if err != nil {
		h.logf("%v", err)
		return pay.Errorf(pay.EUNAVAILABLE, "%s is removed, but their gateway's books are not deleted yet (the store did not answer, or a charge still on its way to them outlasted this request); they are deleted at the next removal or reset.", pay.Truncate(name, 40))
	}
	return nil
}

func (h workshopHandlers) reset(r *http.Request) (int, error) {
	n, err := h.ws.Reset(r.Context())
	if err != nil {
		h.logf("%v", err)
		return n, pay.Errorf(pay.EUNAVAILABLE, "%d students are removed, but their gateways' books are not deleted yet (the store did not answer, or a charge still on its way to them outlasted this request); they are deleted at the next removal or reset.", n)
	}
	return n, nil
}

func (h workshopHandlers) handleRemoveJSON(c echo.Context) error {
	var req WorkshopRemove
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.Name == "" {
		return pay.Errorf(pay.EINVALID, "name: say which student to remove, as the scoreboard names them.")
	}
	if err := h.removeStudent(c.Request(), req.Name); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, WorkshopRemoved{Removed: 1})
}

func (h workshopHandlers) handleResetJSON(c echo.Context) error {
	n, err := h.reset(c.Request())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, WorkshopRemoved{Removed: n})
}

func (h workshopHandlers) handleRemoveForm(c echo.Context) error {
	if err := h.removeStudent(c.Request(), c.FormValue("name")); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/board")
}

func (h workshopHandlers) handleResetForm(c echo.Context) error {
	if _, err := h.reset(c.Request()); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/board")
}
