package workshop

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"paytwice/pay"
	"paytwice/pay/check"
	"paytwice/sim"
)

// Run is what the board shows of a student's latest run.
type Run struct {
	State State
	// Done, Passed and Failed count the cases decided so far, those that
	// passed and those that failed.
	Done, Passed, Failed int
	// FirstSafety is the first failure that can cost money or leak, with
	// its one-line reason; FirstFailure the first failure of any kind.
	FirstSafety, FirstFailure string
	// Message says why the checker could not test the endpoint (NotRun).
	Message string
	// Faults are the gateway's faults for everyone during the run.
	Faults            sim.GatewayBaseFaults
	Started, Finished time.Time

	// early is the case whose safety failure the checker told before its
	// verdict (noticeSafety), 0 for none; earlySafety and earlyFailure
	// say FirstSafety and FirstFailure are that notice's, which the
	// case's verdict replaces. Not kept: a run stopped halfway keeps the
	// notice as it was shown.
	early                     int
	earlySafety, earlyFailure bool
}

// Ask queues a run of who's endpoint: one run per student at a time, in
// a queue of bounded length.
// first puts it at the front of the queue, behind other front runs: the
// presenter's, who never waits behind the class.
func (w *Workshop) Ask(who string, first bool) (Mine, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.students[who]
	switch {
	case !ok || who == "":
		return Mine{}, pay.Errorf(pay.EINVALID, "Register your endpoint's address first: the room runs the checker against it.")
	case !w.on:
		return Mine{}, errClosed
	}
	if err := w.enqueueLocked(st, first); err != nil {
		return Mine{}, err
	}
	return w.mineLocked(st), nil
}

// AskAll queues a run of every student who has none queued or running,
// as long as the queue has room: the presenter's re-run after flipping
// the faults, queued ahead of the runs students asked for. It returns
// how many were queued and how many found no room.
func (w *Workshop) AskAll() (queued, left int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.order {
		switch err := w.enqueueLocked(st, true); {
		case err == nil:
			queued++
		case pay.ErrorCode(err) == pay.EBUSY:
			left++
		}
	}
	return queued, left
}

func (w *Workshop) enqueueLocked(st *student, first bool) error {
	switch st.run.State {
	case Queued:
		return pay.Errorf(pay.ECONFLICT, "Your run is already waiting in the queue (%s): it starts on its own.", ordinal(w.placeLocked(st)))
	case Running:
		return pay.Errorf(pay.ECONFLICT, "Your run is under way: its cases appear on the scoreboard as they finish.")
	}
	if len(w.queue) >= w.cfg.Queue {
		return pay.Errorf(pay.EBUSY, "%d runs are waiting already, the most the room queues: ask again in a minute.", len(w.queue))
	}
	if !first {
		// One address, a class behind one router among them, holds at most
		// PerAddress places: one student per place.
		n := 0
		for _, q := range w.queue {
			if q.addr == st.addr {
				n++
			}
		}
		if n >= w.cfg.PerAddress {
			return pay.Errorf(pay.EBUSY, "%d runs from your computer's address are waiting already: ask again when one has started.", n)
		}
	}
	if first {
		at := 0
		for at < len(w.queue) && w.queue[at].first {
			at++
		}
		w.queue = append(w.queue[:at], append([]*student{st}, w.queue[at:]...)...)
	} else {
		w.queue = append(w.queue, st)
	}
	st.first = first
	st.run = Run{State: Queued}
	w.changedLocked()
	w.ready <- struct{}{} // never blocks: one token per queued run, at most Queue
	return nil
}

func (w *Workshop) placeLocked(st *student) int {
	for i, q := range w.queue {
		if q == st {
			return i + 1
		}
	}
	return 0
}

// work runs queued runs, one at a time, until ctx ends.
func (w *Workshop) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.ready:
		}
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			continue
		}
		st := w.queue[0]
		w.queue = w.queue[1:]
		st.run = Run{State: Running, Faults: w.faults, Started: w.cfg.Now()}
		w.changedLocked()
		cfg := w.checkConfigLocked(st)
		w.mu.Unlock()
		w.runOne(ctx, st, cfg)
	}
}

// checkConfigLocked is the checker's configuration for st's run: the
// student's gateway as the oracle, reached in process; the endpoint
// reached only through the guard, redirects not followed; the checker's
// own bounds on headers and bodies, and a time-out on every request.
func (w *Workshop) checkConfigLocked(st *student) check.Config {
	cfg := check.Config{
		URL:              st.endpoint.String(),
		Gateway:          gatewayHost,
		GatewayTransport: handlerTransport{st.gw},
		Dial:             w.cfg.Guard.DialContext,
		NoRedirects:      true,
		Header:           http.Header{"Authorization": {"Bearer ws-" + hex.EncodeToString(randomBytes(12))}},
		OtherAuth:        "Bearer ws-" + hex.EncodeToString(randomBytes(12)),
		Seed:             binary.LittleEndian.Uint64(randomBytes(8)),
		Unguessable:      true,
		Timeout:          w.cfg.RequestTimeout,
		Patience:         15 * time.Second,
		VerifyTimeout:    10 * time.Second,
	}
	if w.cfg.Tune != nil {
		w.cfg.Tune(&cfg)
	}
	return cfg
}

func (w *Workshop) runOne(ctx context.Context, st *student, cfg check.Config) {
	server := ctx // ends when the server stops
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	limit := w.cfg.After(w.cfg.RunLimit)
	go func() { // the run's limit: past it the run ends, its cases so far kept
		select {
		case <-limit:
			cancel()
		case <-ctx.Done():
		}
	}()
	cfg.OnResult = func(res check.Result) {
		w.mu.Lock()
		defer w.mu.Unlock()
		st.run.note(res)
		w.changedLocked()
	}
	cfg.OnSafety = func(res check.Result) {
		w.mu.Lock()
		defer w.mu.Unlock()
		st.run.noticeSafety(res)
		w.changedLocked()
	}
	rep, err := check.Run(ctx, cfg)
	w.mu.Lock()
	defer w.mu.Unlock()
	st.run.Finished = w.cfg.Now()
	st.run.finish(rep, err, server.Err() != nil, ctx.Err() != nil, w.cfg.RunLimit)
	w.changedLocked()
}

// finish records how a run ended: err is the checker's, stopped says the
// server stopped during the run, overran that the run reached limit.
func (r *Run) finish(rep *check.Report, err error, stopped, overran bool, limit time.Duration) {
	cut := err != nil && !errors.Is(err, check.ErrUnreachable) && !errors.Is(err, check.ErrNotAccepted)
	switch {
	case err != nil && stopped && !errors.Is(err, check.ErrUnreachable):
		// A request cut short by the server's own stop says nothing of the
		// endpoint, whatever the checker made of it; a refused connection
		// still does.
		r.State, r.Message = Interrupted, interruptedRunning
	case cut && overran:
		r.State, r.Message = NotRun, fmt.Sprintf("The run took longer than the %s the room gives one: its cases so far are shown.", limit)
	case errors.Is(err, check.ErrNotAccepted):
		// What answered may be no payment endpoint at all: the open board
		// names the kind of failure, never a word of the answer.
		r.State, r.Message = NotRun, "The checker could not test your endpoint: "+notAccepted(err)
	case err != nil:
		r.State, r.Message = NotRun, "The checker could not test your endpoint: "+oneLine(err.Error())
	default:
		r.State = Done
		if rep != nil && rep.Linearizability.Result == "violation" {
			// The history check is one more case, and it failed.
			r.Done++
			r.Failed++
			why := "the history of the run has no legal order: one action was charged or answered as no single payment could be (" + strings.Join(rep.Linearizability.Groups, ", ") + ")"
			if r.FirstSafety == "" {
				r.FirstSafety = oneLine(why)
			}
			if r.FirstFailure == "" {
				r.FirstFailure = oneLine(why)
			}
		}
	}
}

// notAccepted says how an endpoint failed to take a first good payment,
// quoting nothing it answered.
func notAccepted(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "gave no answer"):
		return "it was reached, but gave no answer to a first good payment."
	case strings.Contains(msg, "was reached, but"):
		return "it was reached, but its answer to a first good payment was past the room's bounds."
	}
	return "it answered a first good payment with no success, so it is not taking payments as the workshop's are sent (try paytwice check against it on your own computer)."
}

// noticeSafety shows a safety failure the checker is sure of before the
// case's verdict: the row turns red while the case still reads its
// slowest answers (a storm's), not after them.
func (r *Run) noticeSafety(res check.Result) {
	why := oneLine(fmt.Sprintf("case %d, %s: %s", res.Case, res.Name, res.Detail))
	r.early = res.Case
	if r.FirstSafety == "" {
		r.FirstSafety, r.earlySafety = why, true
	}
	if r.FirstFailure == "" {
		r.FirstFailure, r.earlyFailure = why, true
	}
}

// note counts one case's verdict.
func (r *Run) note(res check.Result) {
	if r.early != 0 && r.early == res.Case {
		// The verdict has the last word on what its case told early.
		if r.earlySafety {
			r.FirstSafety = ""
		}
		if r.earlyFailure {
			r.FirstFailure = ""
		}
		r.early, r.earlySafety, r.earlyFailure = 0, false, false
	}
	r.Done++
	switch res.Verdict {
	case check.Pass:
		r.Passed++
	case check.Fail:
		r.Failed++
		why := oneLine(fmt.Sprintf("case %d, %s: %s", res.Case, res.Name, res.Detail))
		if res.Safety && r.FirstSafety == "" {
			r.FirstSafety = why
		}
		if r.FirstFailure == "" {
			r.FirstFailure = why
		}
	}
}

// oneLine is s's first line, cut to reasonRunes.
func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if utf8.RuneCountInString(s) <= reasonRunes {
		return s
	}
	return string([]rune(s)[:reasonRunes-1]) + "…"
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// handlerTransport serves the checker's requests to a student's gateway
// in process: its books and switches are the room's own, never reached
// over the network.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	t.h.ServeHTTP(rec, in)
	res := rec.Result()
	res.Request = req
	return res, nil
}
