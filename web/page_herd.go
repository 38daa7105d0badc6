package web

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/views"
)

// The thundering-herd simulation: GET /herd (the page), GET /herd/results
// (the part htmx swaps when the form is submitted) and GET /api/herd (JSON).

// HerdInput is a herd sweep as the form, the API and the CLI describe it:
// client counts Min, Min+Step, ... up to Max, Trials runs per count and
// strategy, and the seed the trial seeds derive from.
type HerdInput struct {
	Min, Max, Step, Trials int
	Seed                   uint64
}

// DefaultHerdInput is the page's default run: 10 to 200 clients in steps of
// 10, 10 trials, five strategies. The page answers in about 0.2 s on two
// cores and 0.37 s on one (BenchmarkHerdPageDefault). The AWS post's
// experiment (max 190, 100 trials) fits within the page's budget too, and
// takes a few seconds.
func DefaultHerdInput() HerdInput { return HerdInput{Min: 10, Max: 200, Step: 10, Trials: 10, Seed: 1} }

// Config is the sim sweep of the input.
func (in HerdInput) Config() sim.HerdSweepConfig {
	return sim.HerdSweepConfig{MinClients: in.Min, MaxClients: in.Max, Step: in.Step, Trials: in.Trials, Seed: in.Seed}
}

// HerdCost estimates the work of a sweep in "client steps": each trial at N
// clients costs about N + N²/100 of them for the five strategies together
// (the runs without backoff grow with N², the others about with N). One
// core gets through roughly 100,000 a second: the default run is about
// 50,000, the AWS post's experiment (10..190 clients, 100 trials) 437,000.
func HerdCost(in HerdInput) float64 {
	if in.Step < 1 {
		return math.Inf(1)
	}
	cost := 0.0
	for n := in.Min; n <= in.Max; n += in.Step {
		cost += float64(in.Trials) * (float64(n) + float64(n)*float64(n)/100)
	}
	return cost
}

// HerdLimits bound one herd request.
type HerdLimits struct {
	MaxClients int
	MaxTrials  int
	// MaxCost bounds HerdCost; 0 means no bound beyond sim's.
	MaxCost float64
}

// WebHerdLimits keep one request of the page or the API to about four
// seconds of one core at worst; the AWS post's experiment just fits.
var WebHerdLimits = HerdLimits{MaxClients: sim.MaxHerdClients, MaxTrials: sim.MaxHerdTrials, MaxCost: 450_000}

// CLIHerdLimits are sim's own bounds: on the command line the user waits
// for their own run.
var CLIHerdLimits = HerdLimits{MaxClients: sim.MaxHerdClients, MaxTrials: sim.MaxHerdTrials}

// ParseHerdQuery reads min, max, step, trials and seed.
func ParseHerdQuery(q url.Values, lim HerdLimits) (HerdInput, FieldErrors) {
	in := DefaultHerdInput()
	r := paramReader{q: q}
	in.Min = r.integer("min", in.Min, 1, lim.MaxClients)
	in.Max = r.integer("max", in.Max, 1, lim.MaxClients)
	in.Step = r.integer("step", in.Step, 1, lim.MaxClients)
	in.Trials = r.integer("trials", in.Trials, 1, lim.MaxTrials)
	in.Seed = r.seed("seed", in.Seed)
	if !r.errs.has("min") && !r.errs.has("max") && in.Max < in.Min {
		r.fail("max", "must be at least min (%d)", in.Min)
	}
	if len(r.errs) > 0 {
		return in, r.errs
	}
	if lim.MaxCost > 0 {
		if c := HerdCost(in); c > lim.MaxCost {
			r.fail("trials", "this run is about %.1f× what one request may simulate; lower trials or max, or raise step",
				c/lim.MaxCost)
		}
	}
	if len(r.errs) == 0 {
		if err := in.Config().Validate(); err != nil {
			r.errs = append(r.errs, simFieldError(err))
		}
	}
	return in, r.errs.inOrder(herdFields...)
}

// herdFields are the herd parameters in form order.
var herdFields = []string{"min", "max", "step", "trials", "seed"}

// HerdReport is the JSON of GET /api/herd and of paytwice herd -json.
type HerdReport struct {
	Params     HerdParams      `json:"params"`
	Strategies []sim.Strategy  `json:"strategies"`
	Points     []HerdPointJSON `json:"points"`
}

// HerdParams echoes the request and the model's fixed backoff settings.
type HerdParams struct {
	Min         int     `json:"min"`
	Max         int     `json:"max"`
	Step        int     `json:"step"`
	Trials      int     `json:"trials"`
	Seed        uint64  `json:"seed"`
	BaseSeconds float64 `json:"base_seconds"`
	CapSeconds  float64 `json:"cap_seconds"`
}

// HerdPointJSON is one strategy at one client count, averaged over the
// trials: mean_work is the mean number of writes the server received, and
// mean_completion_seconds the mean time until the last client's write
// succeeded.
type HerdPointJSON struct {
	Clients               int          `json:"clients"`
	Strategy              sim.Strategy `json:"strategy"`
	Trials                int          `json:"trials"`
	MeanWork              float64      `json:"mean_work"`
	MeanCompletionSeconds float64      `json:"mean_completion_seconds"`
	Truncated             int          `json:"truncated"`
}

// NewHerdReport shapes sweep points as JSON.
func NewHerdReport(in HerdInput, pts []sim.HerdPoint) HerdReport {
	rep := HerdReport{
		Params: HerdParams{Min: in.Min, Max: in.Max, Step: in.Step, Trials: in.Trials, Seed: in.Seed,
			BaseSeconds: sim.HerdBase.Seconds(), CapSeconds: sim.HerdCap.Seconds()},
		Strategies: sim.Strategies(),
		Points:     make([]HerdPointJSON, len(pts)),
	}
	for i, p := range pts {
		rep.Points[i] = HerdPointJSON{Clients: p.Clients, Strategy: p.Strategy, Trials: p.Trials,
			MeanWork: p.MeanWork, MeanCompletionSeconds: p.MeanCompletion.Seconds(), Truncated: p.Truncated}
	}
	return rep
}

// HerdReportFor parses a query, runs the sweep under ctx and returns its
// report; the error is a FieldErrors for a wrong parameter. The CLI uses it
// with CLIHerdLimits.
func HerdReportFor(ctx context.Context, q url.Values, lim HerdLimits) (HerdReport, error) {
	in, errs := ParseHerdQuery(q, lim)
	if len(errs) > 0 {
		return HerdReport{}, errs
	}
	pts, err := sim.HerdSweep(ctx, in.Config())
	if err != nil {
		return HerdReport{}, err
	}
	return NewHerdReport(in, pts), nil
}

// Sweeps are deterministic, so identical requests share one result: a
// class that opens /herd at once runs the default sweep once. herdRuns runs
// one sweep at a time (a sweep already uses every core) and keeps the last
// few results.
var herdRuns = newHerdRunner(16)

// herdTimeout bounds how long one request may wait for and run its sweep.
const herdTimeout = 15 * time.Second

type herdRunner struct {
	gate chan struct{} // one sweep at a time
	mu   sync.Mutex
	size int
	keys []HerdInput // least recently used first
	vals map[HerdInput][]sim.HerdPoint
}

func newHerdRunner(size int) *herdRunner {
	return &herdRunner{gate: make(chan struct{}, 1), size: size, vals: make(map[HerdInput][]sim.HerdPoint)}
}

// get returns a cached result and marks it recently used.
func (h *herdRunner) get(in HerdInput) ([]sim.HerdPoint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pts, ok := h.vals[in]
	if ok {
		h.touch(in)
	}
	return pts, ok
}

func (h *herdRunner) put(in HerdInput, pts []sim.HerdPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vals[in]; ok {
		h.touch(in)
		return
	}
	if len(h.keys) >= h.size {
		delete(h.vals, h.keys[0])
		h.keys = h.keys[1:]
	}
	h.keys = append(h.keys, in)
	h.vals[in] = pts
}

func (h *herdRunner) touch(in HerdInput) {
	for i, k := range h.keys {
		if k == in {
			h.keys = append(append(h.keys[:i:i], h.keys[i+1:]...), in)
			return
		}
	}
}

func (h *herdRunner) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys, h.vals = nil, make(map[HerdInput][]sim.HerdPoint)
}

// run returns the sweep's points, from the cache when it can. It waits for
// its turn and runs under ctx, so a closed connection or the time-out stops
// the work.
func (h *herdRunner) run(ctx context.Context, in HerdInput) (pts []sim.HerdPoint, cached bool, err error) {
	if pts, ok := h.get(in); ok {
		return pts, true, nil
	}
	select {
	case h.gate <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	defer func() { <-h.gate }()
	if pts, ok := h.get(in); ok { // someone ran it while we waited
		return pts, true, nil
	}
	pts, err = sim.HerdSweep(ctx, in.Config())
	if err != nil {
		return nil, false, err
	}
	h.put(in, pts)
	return pts, false, nil
}

// herdBusy is the message of a sweep stopped by the time-out.
func herdBusy(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return store.Errorf(store.EUNAVAILABLE, "The simulation did not finish within %v (the server may be busy with other runs). Try again, or ask for fewer trials.", herdTimeout)
	}
	return store.Errorf(store.EUNAVAILABLE, "The simulation was stopped: %v.", err)
}

// handleHerdAPI is GET /api/herd.
func (s *Server) handleHerdAPI(c echo.Context) error {
	in, errs := ParseHerdQuery(c.QueryParams(), WebHerdLimits)
	if len(errs) > 0 {
		return errs.Problem()
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), herdTimeout)
	defer cancel()
	start := time.Now()
	pts, cached, err := herdRuns.run(ctx, in)
	if err != nil {
		return herdBusy(err)
	}
	setSimTiming(c, time.Since(start), cached)
	return c.JSON(http.StatusOK, NewHerdReport(in, pts))
}

// setSimTiming reports how long the sweep took (Server-Timing, visible in
// the browser's network panel and to curl -i).
func setSimTiming(c echo.Context, d time.Duration, cached bool) {
	desc := "run"
	if cached {
		desc = "cached"
	}
	c.Response().Header().Set("Server-Timing", "sim;desc=\""+desc+"\";dur="+strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64))
}

// handleHerdPage is GET /herd: the default run (or the query's) with its
// charts and tables.
func (s *Server) handleHerdPage(c echo.Context) error {
	v, status := s.herdView(c)
	return render(c, status, views.HerdPage(v))
}

// handleHerdFragment is GET /herd/results, what the form asks for. Like
// the backoff fragment, a wrong field is a 400 that the page still shows.
func (s *Server) handleHerdFragment(c echo.Context) error {
	v, status := s.herdView(c)
	if c.Request().Header.Get("HX-Request") == "true" {
		c.Response().Header().Set("HX-Replace-Url", "/herd?"+pick(c.QueryParams(), "min", "max", "step", "trials", "seed", "scale").Encode())
	}
	return render(c, status, views.HerdFragment(v))
}

func (s *Server) herdView(c echo.Context) (views.HerdView, int) {
	q := c.QueryParams()
	def := DefaultHerdInput()
	v := views.HerdView{Form: views.HerdForm{
		Min:        formValue(q, "min", strconv.Itoa(def.Min)),
		Max:        formValue(q, "max", strconv.Itoa(def.Max)),
		Step:       formValue(q, "step", strconv.Itoa(def.Step)),
		Trials:     formValue(q, "trials", strconv.Itoa(def.Trials)),
		Seed:       formValue(q, "seed", strconv.FormatUint(def.Seed, 10)),
		Scale:      formValue(q, "scale", "log"),
		MaxClients: WebHerdLimits.MaxClients,
		MaxTrials:  WebHerdLimits.MaxTrials,
	}}
	in, errs := ParseHerdQuery(q, WebHerdLimits)
	if v.Form.Scale != "log" && v.Form.Scale != "linear" {
		errs = append(errs, FieldError{Field: "scale", Msg: "choose log or linear"})
	}
	if len(errs) > 0 {
		v.Form.Errors = errs.byField()
		return v, http.StatusBadRequest
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), herdTimeout)
	defer cancel()
	start := time.Now()
	pts, cached, err := herdRuns.run(ctx, in)
	elapsed := time.Since(start)
	if err != nil {
		v.Problem = store.ErrorMessage(herdBusy(err))
		return v, http.StatusServiceUnavailable
	}
	setSimTiming(c, elapsed, cached)
	v.Result = herdResultView(in, pts, v.Form.Scale == "log", elapsed, cached)
	return v, http.StatusOK
}

func herdResultView(in HerdInput, pts []sim.HerdPoint, logScale bool, elapsed time.Duration, cached bool) *views.HerdResult {
	strats := sim.Strategies()
	r := &views.HerdResult{Trials: in.Trials, Seed: in.Seed, LogScale: logScale, Elapsed: elapsed.Seconds(), Cached: cached}
	col := map[sim.Strategy]int{}
	for i, st := range strats {
		r.Strategies = append(r.Strategies, string(st))
		col[st] = i
	}
	rowOf := map[int]int{}
	for _, p := range pts {
		i, ok := rowOf[p.Clients]
		if !ok {
			i = len(r.Rows)
			rowOf[p.Clients] = i
			r.Rows = append(r.Rows, views.HerdRow{Clients: p.Clients,
				Work: make([]float64, len(strats)), Completion: make([]float64, len(strats))})
		}
		j := col[p.Strategy]
		r.Rows[i].Work[j] = p.MeanWork
		r.Rows[i].Completion[j] = p.MeanCompletion.Seconds()
		r.Truncated += p.Truncated
	}
	return r
}
