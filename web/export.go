package web

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/views"
	"paytwice/web/live"
)

// The timeline export: what the class did, as the hub keeps it since the
// last reset (each address's payments, its notes and the room's events in
// shares of their own, web/live/kept.go), for a teacher to keep. Both formats carry the same fields, oldest event first.

// TimelineExport is the body of GET /api/timeline.json.
type TimelineExport struct {
	ExportedAt time.Time    `json:"exported_at"`
	Events     []live.Event `json:"events"`
}

// exportHandlers serve the timeline's download. They hold only what
// they read: the events the hub keeps, who the presenter is, and the
// server's clock, which names the file.
type exportHandlers struct {
	events      keptEvents
	isPresenter func(*http.Request) bool
	now         func() time.Time
}

// keptEvents is the part of the hub (web/live) the export reads.
type keptEvents interface {
	Kept() []live.Event
}

// routes registers the two downloads.
func (h exportHandlers) routes(e *echo.Echo) {
	e.GET("/api/timeline.json", h.handleTimelineJSON)
	e.GET("/api/timeline.csv", h.handleTimelineCSV)
}

// exportEvents lists the retained events r may read. The whole file
// names every caller's keys, orders, attempts and charges: it is the
// presenter's (everybody's on a server without a presenter token). Anyone
// else gets the rows of their own scope only.
func (h exportHandlers) exportEvents(r *http.Request) []live.Event {
	out := h.events.Kept()
	if !h.isPresenter(r) {
		mine := callerScope(r)
		out = slices.DeleteFunc(out, func(e live.Event) bool { return e.Scope != mine })
	}
	for i := range out {
		ev := &out[i]
		if ev.Scope != "" {
			// Like the pages, the file names a caller by a short label,
			// not by the whole hash of its token.
			ev.Scope = views.ScopeLabel(ev.Scope)
		}
	}
	return out
}

// attachment names the download after the server's clock.
func (h exportHandlers) attachment(c echo.Context, ext string) {
	name := "paytwice-timeline-" + h.now().UTC().Format("20060102-150405") + "." + ext
	header := c.Response().Header()
	header.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	header.Set("Cache-Control", "no-store")
}

// handleTimelineJSON is GET /api/timeline.json.
func (h exportHandlers) handleTimelineJSON(c echo.Context) error {
	h.attachment(c, "json")
	return c.JSON(http.StatusOK, TimelineExport{ExportedAt: h.now().UTC(), Events: h.exportEvents(c.Request())})
}

// TimelineCSVHeader is the first row of GET /api/timeline.csv. When the
// events name their servers (several servers share one database), a last
// column, "server", says which server handled each.
var TimelineCSVHeader = []string{"seq", "time", "kind", "request", "scope", "key", "order_id", "amount_satang", "status", "message"}

// handleTimelineCSV is GET /api/timeline.csv: one row per event, times in
// RFC 3339 UTC, empty cells for what an event does not have.
func (h exportHandlers) handleTimelineCSV(c echo.Context) error {
	events := h.exportEvents(c.Request())
	named := slices.ContainsFunc(events, func(e live.Event) bool { return e.Server != "" })
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	header := TimelineCSVHeader
	if named {
		header = append(slices.Clip(header), "server")
	}
	_ = w.Write(header)
	num := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	for _, e := range events {
		row := []string{strconv.FormatUint(e.Seq, 10), e.Time.UTC().Format(time.RFC3339Nano), string(e.Kind),
			e.Request, cell(e.Scope), cell(e.Key), cell(e.OrderID), num(e.Amount), num(int64(e.Status)), cell(e.Message)}
		if named {
			row = append(row, cell(e.Server))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	h.attachment(c, "csv")
	return c.Blob(http.StatusOK, "text/csv; charset=utf-8", buf.Bytes())
}

// cell keeps a spreadsheet from running a value as a formula: keys and
// order ids are whatever a client sent, and "=HYPERLINK(…)" is visible
// ASCII too. A spreadsheet reads a cell as a formula when it starts with
// = + - @ (or a tab or carriage return before one), and it guesses the
// delimiter: a file opened with ";" (or tab) as the delimiter splits the
// line at every ";" inside a value too, and the piece after it starts a
// new cell. So an apostrophe goes in front of the value and after every
// ",", ";" or tab that the next formula character follows (past any
// spaces and quotes, which a spreadsheet skips), whichever delimiter it
// guesses; the rest of the value is left as it was.
func cell(v string) string {
	if v == "" {
		return v
	}
	var b strings.Builder
	if startsFormula(v) {
		b.WriteByte('\'')
	}
	for i := 0; i < len(v); i++ {
		b.WriteByte(v[i])
		if strings.IndexByte(",;\t", v[i]) >= 0 && startsFormula(v[i+1:]) {
			b.WriteByte('\'')
		}
	}
	return b.String()
}

// startsFormula reports whether a cell that starts with s would be read
// as a formula: after any spaces and double quotes, one of = + - @, or a
// tab or carriage return.
func startsFormula(s string) bool {
	s = strings.TrimLeft(s, " \"")
	return s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0
}
