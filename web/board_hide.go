package web

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/board"
)

// BoardHide is the body of POST /api/board/hide: the row to take off the
// board (its DOM id), and whether every row of its student goes with it.
type BoardHide struct {
	Row     string `json:"row"`
	Student bool   `json:"student"`
}

// BoardHidden is its answer: how many rows went.
type BoardHidden struct {
	Hidden int `json:"hidden"`
}

// handleHide is POST /api/board/hide, the presenter's: a row, or a
// student, off every page's timeline until the room is reset.
func (h boardHandlers) handleHide(c echo.Context) error {
	var req BoardHide
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.Row == "" {
		return pay.Errorf(pay.EINVALID, `Say which row to hide: {"row": "tl-…"}, with "student": true to hide every row of its student.`)
	}
	n, err := h.board().Hide(req.Row, req.Student)
	if errors.Is(err, board.ErrNoSuchRow) {
		return pay.Errorf(pay.ENOTFOUND, "The board shows no row %q (it may have scrolled off).", req.Row)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, BoardHidden{Hidden: n})
}
