package web

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/sim/report"
	"paytwice/views"
)

// The thundering-herd simulation: GET /herd (the page), GET /herd/results
// (the part htmx swaps when the form is submitted) and GET /api/herd (JSON).
// The sweep's input and report come from sim/report; this file adds the
// web's limits, the shared cache of results and the pages.

// WebHerdLimits keep one request of the page or the API to about four
// seconds of one core at worst; the AWS post's experiment just fits.
var WebHerdLimits = report.HerdLimits{MaxClients: sim.MaxHerdClients, MaxTrials: sim.MaxHerdTrials, MaxCost: 450_000}

// Sweeps are deterministic, so identical requests share one result: a
// class that opens /herd at once runs the default sweep once. A server's
// herdRunner (in its simRuns) keeps the last few results and makes sure
// simulations never starve payments:
//   - one sweep runs at a time, on every core but one (on one core if that
//     is all there is), so a core is always left for payments;
//   - at most herdQueue more students' requests wait for their turn;
//     beyond that a request gets 429 with Retry-After at once; the
//     presenter's never count and always go first (priorityGate);
//   - with a presenter token set, a sweep costing more than herdOpenCost
//     (about twice the default run) is the presenter's alone.

const (
	// herdTimeout bounds how long one request may wait for and run its
	// sweep.
	herdTimeout = 15 * time.Second
	// herdQueue is how many requests may wait while one sweep runs.
	herdQueue = 4
	// herdRetryAfter is what a request turned away is asked to wait, in
	// seconds.
	herdRetryAfter = 5
	// herdOpenCost is the largest sweep (report.HerdCost) anyone may ask
	// for when a presenter token is set: about a second of one core.
	herdOpenCost = 100_000
)

// errHerdQueueFull turns a request away when herdQueue are already waiting.
var errHerdQueueFull = pay.Errorf(pay.EBUSY, "The server is already running a simulation with %d more waiting. Try again in %d seconds; identical runs are answered from a cache.", herdQueue, herdRetryAfter)

// herdWorkers is how many cores a sweep served over HTTP may use.
func herdWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }

type herdRunner struct {
	sweepQueue // one sweep at a time, the presenter's first
	mu         sync.Mutex
	size       int
	keys       []report.HerdInput // least recently used first
	vals       map[report.HerdInput][]sim.HerdPoint
}

func newHerdRunner(size int) *herdRunner {
	return &herdRunner{size: size, vals: make(map[report.HerdInput][]sim.HerdPoint),
		sweepQueue: sweepQueue{queue: herdQueue, full: errHerdQueueFull}}
}

// get returns a cached result and marks it recently used.
func (h *herdRunner) get(in report.HerdInput) ([]sim.HerdPoint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pts, ok := h.vals[in]
	if ok {
		h.touch(in)
	}
	return pts, ok
}

func (h *herdRunner) put(in report.HerdInput, pts []sim.HerdPoint) {
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

func (h *herdRunner) touch(in report.HerdInput) {
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
	h.keys, h.vals = nil, make(map[report.HerdInput][]sim.HerdPoint)
}

// run returns the sweep's points, from the cache when it can. It waits for
// its turn (errHerdQueueFull when too many already wait) and runs under
// ctx, so a closed connection or the time-out stops the work.
func (h *herdRunner) run(ctx context.Context, in report.HerdInput, presenter bool) (pts []sim.HerdPoint, cached bool, err error) {
	return h.runFor(ctx, in, herdCaller{presenter: presenter})
}

// herdCaller is who asks for a sweep: the presenter, or a student whose
// sweep steps aside for more urgent work (yield) and whose time is counted
// (spent).
type herdCaller struct {
	presenter bool
	yield     func(context.Context) time.Duration
	spent     func(time.Duration)
}

func (h *herdRunner) runFor(ctx context.Context, in report.HerdInput, who herdCaller) (pts []sim.HerdPoint, cached bool, err error) {
	if pts, ok := h.get(in); ok {
		return pts, true, nil
	}
	leave, err := h.enter(ctx, who.presenter)
	if err != nil {
		return nil, false, err
	}
	defer leave()
	if pts, ok := h.get(in); ok { // someone ran it while we waited
		return pts, true, nil
	}
	cfg := in.Config()
	cfg.Workers = herdWorkers()
	var mu sync.Mutex
	var yielded time.Duration
	if who.yield != nil {
		cfg.Yield = func(ctx context.Context) {
			if d := who.yield(ctx); d > 0 {
				mu.Lock()
				yielded += d
				mu.Unlock()
			}
		}
	}
	start := time.Now()
	pts, err = sim.HerdSweep(ctx, cfg)
	if who.spent != nil {
		// The time the sweep had the cores, on each of its workers.
		mu.Lock()
		worked := time.Since(start)*time.Duration(cfg.Workers) - yielded
		mu.Unlock()
		who.spent(max(worked, 0))
	}
	if err != nil {
		return nil, false, err
	}
	h.put(in, pts)
	return pts, false, nil
}

// herdBusy is the message of a sweep turned away or stopped by the
// time-out.
func herdBusy(err error) error {
	var e *pay.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return pay.Errorf(pay.EUNAVAILABLE, "The simulation did not finish within %v (the server may be busy with other runs). Try again, or ask for fewer trials.", herdTimeout)
	}
	return pay.Errorf(pay.EUNAVAILABLE, "The simulation was stopped: %v.", err)
}

// herdAllowed refuses a sweep above herdOpenCost to anyone but the
// presenter.
func (h simHandlers) herdAllowed(r *http.Request, in report.HerdInput) error {
	if report.HerdCost(in) <= herdOpenCost || h.isPresenter(r) {
		return nil
	}
	return pay.Errorf(pay.EFORBIDDEN, "A simulation this large (about %.0f client steps) is for the presenter only; anyone may run up to %d, such as the default run. Ask for fewer trials or a smaller range.", report.HerdCost(in), herdOpenCost)
}

// runHerd runs (or finds) a sweep for a request, setting Retry-After when
// it is turned away.
func (h simHandlers) runHerd(c echo.Context, in report.HerdInput) ([]sim.HerdPoint, bool, error) {
	if err := h.herdAllowed(c.Request(), in); err != nil {
		return nil, false, err
	}
	r := c.Request()
	who := herdCaller{presenter: h.priority(r)}
	if !who.presenter && h.work != nil {
		// A student's sweep: within the time kept for the class's and
		// its address's simulations, and out of the presenter's way.
		ip := h.clientIP(r)
		leave, wait, err := h.work.admit(r.Context(), ip)
		if err != nil {
			if _, ok := h.runs.herd.get(in); !ok {
				c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(wait)))
				return nil, false, err
			}
		} else {
			defer leave() // after runFor has counted the time
		}
		who.yield = h.work.sweepYield()
		who.spent = func(d time.Duration) { h.work.spent(ip, d) }
	}
	ctx, cancel := context.WithTimeout(r.Context(), herdTimeout)
	defer cancel()
	pts, cached, err := h.runs.herd.runFor(ctx, in, who)
	if err != nil {
		if pay.ErrorCode(err) == pay.EBUSY {
			c.Response().Header().Set("Retry-After", strconv.Itoa(herdRetryAfter))
		}
		return nil, false, herdBusy(err)
	}
	return pts, cached, nil
}

// handleHerdAPI is GET /api/herd.
func (h simHandlers) handleHerdAPI(c echo.Context) error {
	in, errs := report.ParseHerdQuery(c.QueryParams(), WebHerdLimits)
	if len(errs) > 0 {
		return fieldProblem(errs)
	}
	start := time.Now()
	pts, cached, err := h.runHerd(c, in)
	if err != nil {
		return err
	}
	setSimTiming(c, time.Since(start), cached)
	return c.JSON(http.StatusOK, report.NewHerd(in, pts))
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
func (h simHandlers) handleHerdPage(c echo.Context) error {
	v, status := h.herdView(c)
	return render(c, status, views.HerdPage(v))
}

// handleHerdFragment is GET /herd/results, what the form asks for. Like
// the backoff fragment, a wrong field is a 400 that the page still shows.
func (h simHandlers) handleHerdFragment(c echo.Context) error {
	v, status := h.herdView(c)
	if c.Request().Header.Get("HX-Request") == "true" {
		c.Response().Header().Set("HX-Replace-Url", "/herd?"+pick(c.QueryParams(), "min", "max", "step", "trials", "seed", "scale").Encode())
	}
	return render(c, status, views.HerdFragment(v))
}

func (h simHandlers) herdView(c echo.Context) (views.HerdView, int) {
	q := c.QueryParams()
	def := report.DefaultHerdInput()
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
	in, errs := report.ParseHerdQuery(q, WebHerdLimits)
	if v.Form.Scale != "log" && v.Form.Scale != "linear" {
		errs = append(errs, report.FieldError{Field: "scale", Msg: "choose log or linear"})
	}
	if len(errs) > 0 {
		v.Form.Errors = errs.ByField()
		return v, http.StatusBadRequest
	}
	start := time.Now()
	pts, cached, err := h.runHerd(c, in)
	elapsed := time.Since(start)
	if err != nil {
		v.Problem = pay.ErrorMessage(err)
		return v, problemFor(pay.ErrorCode(err)).Status
	}
	setSimTiming(c, elapsed, cached)
	v.Result = herdResultView(in, pts, v.Form.Scale == "log", elapsed, cached)
	return v, http.StatusOK
}

func herdResultView(in report.HerdInput, pts []sim.HerdPoint, logScale bool, elapsed time.Duration, cached bool) *views.HerdResult {
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
