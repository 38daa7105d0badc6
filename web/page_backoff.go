package web

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"paytwice/sim"
	"paytwice/sim/report"
	"paytwice/views"
)

// The backoff schedule: GET /backoff (the page), GET /backoff/results (the
// part of it that htmx swaps as the user types) and GET /api/backoff (the
// same numbers as JSON). The numbers come from sim/report.

// handleBackoffAPI is GET /api/backoff.
func (simHandlers) handleBackoffAPI(c echo.Context) error {
	in, errs := report.ParseBackoffQuery(c.QueryParams())
	if len(errs) > 0 {
		return fieldProblem(errs)
	}
	rep, err := report.NewBackoff(in)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

// handleBackoffPage is GET /backoff. A wrong parameter gives the page with
// the message next to its field, and status 400.
func (simHandlers) handleBackoffPage(c echo.Context) error {
	v, status, err := backoffView(c.QueryParams())
	if err != nil {
		return err
	}
	return render(c, status, views.BackoffPage(v))
}

// handleBackoffFragment is GET /backoff/results, what the form asks for as
// the user types. It answers 400 for a wrong field too: the pages configure
// htmx to swap a 400 (see views.SimHead), so the message still shows. The
// address bar follows the form through HX-Replace-Url, so the page can be
// reloaded or shared as it is, without filling the history.
func (simHandlers) handleBackoffFragment(c echo.Context) error {
	q := c.QueryParams()
	v, status, err := backoffView(q)
	if err != nil {
		return err
	}
	if c.Request().Header.Get("HX-Request") == "true" {
		if v.Result == nil {
			// Keep the last good results on the page; only the field
			// messages and the note above the results change.
			c.Response().Header().Set("HX-Reswap", "none")
		} else {
			c.Response().Header().Set("HX-Replace-Url", "/backoff?"+pick(q, "base", "cap", "retries", "strategy", "clients", "seed").Encode())
		}
	}
	return render(c, status, views.BackoffFragment(v))
}

// backoffView builds the page's view of a query and its status.
func backoffView(q url.Values) (views.BackoffView, int, error) {
	def := report.DefaultBackoffInput()
	v := views.BackoffView{Form: views.BackoffForm{
		Base:       formValue(q, "base", secondsText(def.Policy.Base)),
		Cap:        formValue(q, "cap", secondsText(def.Policy.Cap)),
		Retries:    formValue(q, "retries", strconv.Itoa(def.Policy.MaxRetries)),
		Strategy:   formValue(q, "strategy", string(def.Policy.Strategy)),
		Clients:    formValue(q, "clients", strconv.Itoa(def.Clients)),
		Seed:       formValue(q, "seed", strconv.FormatUint(def.Seed, 10)),
		Strategies: strategyOptions(),
		MaxRetries: sim.MaxPolicyRetries,
		MaxClients: report.MaxBackoffClients,
	}}
	in, errs := report.ParseBackoffQuery(q)
	if len(errs) > 0 {
		v.Form.Errors = errs.ByField()
		return v, http.StatusBadRequest, nil
	}
	// A valid name in another case ("Full") selects the right option.
	v.Form.Strategy = string(in.Policy.Strategy)
	rep, err := report.NewBackoff(in)
	if err != nil {
		return v, 0, err
	}
	v.Result = backoffResultView(rep)
	return v, http.StatusOK, nil
}

func backoffResultView(rep report.Backoff) *views.BackoffResult {
	r := &views.BackoffResult{
		Strategy: string(rep.Params.Strategy), Base: rep.Params.BaseSeconds, Cap: rep.Params.CapSeconds,
		Retries: rep.Params.Retries, Clients: rep.Params.Clients, Seed: rep.Params.Seed,
		MinTotal: rep.Totals.MinSeconds, WorstTotal: rep.Totals.WorstSeconds, MeanTotal: rep.Totals.MeanSeconds,
		FirstFrom: rep.Spread.FirstRoundFromSeconds, FirstWindow: rep.Spread.FirstRoundWindowSeconds,
		FirstPerMs: rep.Spread.FirstRoundPerMs, FirstPeak: rep.Spread.FirstRoundPeakCount,
		Requests: rep.Spread.Requests, PeakMs: rep.Spread.PeakMs, Peak: rep.Spread.PeakCount, LastMs: rep.Spread.LastMs,
		FirstBins: viewBins(rep.Spread.FirstRoundBins), Bins: viewBins(rep.Spread.Bins),
	}
	for _, row := range rep.Schedule {
		r.Rows = append(r.Rows, views.BackoffRow{Retry: row.Retry, N: row.N, Ceiling: row.CeilingSeconds,
			Min: row.MinSeconds, Max: row.MaxSeconds, Mean: row.MeanSeconds,
			MeanEstimated: row.MeanEstimated, Caps: row.HitsCap})
	}
	for _, c := range rep.Compare {
		r.Compare = append(r.Compare, views.StrategySpread{Strategy: string(c.Strategy), Current: c.Strategy == rep.Params.Strategy,
			FromMs: c.FirstRoundFromSeconds * 1000, WindowMs: c.FirstRoundWindowSeconds * 1000, PerMs: c.FirstRoundPerMs,
			FirstPeak: c.FirstRoundPeakCount, PeakMs: c.PeakMs, Peak: c.PeakCount, LastMs: c.LastMs})
	}
	return r
}

func viewBins(bins []sim.SpreadBin) []views.SpreadBin {
	out := make([]views.SpreadBin, len(bins))
	for i, b := range bins {
		out[i] = views.SpreadBin{StartMs: b.StartMs, WidthMs: b.WidthMs, Count: b.Count, PerMs: b.PerMs}
	}
	return out
}

// pick copies the named parameters of q that are present.
func pick(q url.Values, names ...string) url.Values {
	out := url.Values{}
	for _, n := range names {
		if vs, ok := q[n]; ok {
			out[n] = vs
		}
	}
	return out
}

// simHandlers serve the simulated world's pages: the backoff schedule
// and the thundering herd, and their JSON. Each answer is computed from
// the request's parameters alone (sim/), seeded, so the same question gets
// the same answer on any server; only a large herd sweep asks whether the
// caller is the presenter, and who goes first when runs wait their turn.
type simHandlers struct {
	isPresenter func(*http.Request) bool
	// priority says the presenter's runs go before the students'.
	priority func(*http.Request) bool
	// clientIP names a student's address; work counts the time their
	// sweeps take (student_work.go). nil work counts nothing.
	clientIP func(*http.Request) string
	work     *studentWork
	// runs are the server's simulations at work, one of each kind at a
	// time, and the herd's results.
	runs *simRuns
}

// routes registers the backoff and herd pages and their JSON.
func (h simHandlers) routes(e *echo.Echo) {
	e.GET("/backoff", h.handleBackoffPage, h.countWork)
	e.GET("/backoff/results", h.handleBackoffFragment, h.countWork)
	e.GET("/api/backoff", h.handleBackoffAPI, h.countWork)
	e.GET("/herd", h.handleHerdPage)
	e.GET("/herd/results", h.handleHerdFragment)
	e.GET("/api/herd", h.handleHerdAPI)
}
