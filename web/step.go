package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
)

// Step mode: the presenter pauses the race and walks it through. While it
// is on, every payment request (a browser's, curl's, the CLI's) stops at
// named checkpoints and waits for the presenter: Next lets one request go
// on to its next checkpoint, Finish lets it run to the end, Play lets
// every held request run to the end. Nothing is held forever: turning
// step mode off, a reset, the request's connection closing, shutdown, or
// the time limit (Config.StepLimit, on an injectable timer) lets it go.
//
// A hold is only a wait on the request's own goroutine, between two steps
// of the protocol: no transaction is open and no lock of the database is
// taken, so every fault switch works as usual once the request goes on.
//
// The checkpoints are where the protocol already reports its steps (the
// payment's events, see payment.publish): the protocol itself knows
// nothing of step mode.

// Checkpoint is a place where step mode holds a request, in the order a
// request passes them.
type Checkpoint int

// The checkpoints.
const (
	CheckReceived        Checkpoint = iota + 1 // the request arrived and was parsed
	CheckClaimed                               // the key row was inserted as started
	CheckBeforeGateway                         // about to call the gateway
	CheckGatewayAnswered                       // the gateway answered (or the server crashed)
	CheckSaved                                 // the charge and the answer are committed
	CheckAnswered                              // about to send the answer
)

var checkpointNames = map[Checkpoint]string{
	CheckReceived: "received", CheckClaimed: "key claimed", CheckBeforeGateway: "before the gateway",
	CheckGatewayAnswered: "gateway answered", CheckSaved: "saved", CheckAnswered: "answered",
}

func (c Checkpoint) String() string { return checkpointNames[c] }

// checkpointAt is the checkpoint a payment event reaches; 0 for none.
func checkpointAt(k live.Kind) Checkpoint {
	switch k {
	case live.Received:
		return CheckReceived
	case live.Claimed:
		return CheckClaimed
	case live.GatewayCall:
		return CheckBeforeGateway
	case live.GatewayReply, live.Crashed:
		return CheckGatewayAnswered
	case live.Charged, live.Completed, live.RolledBack:
		return CheckSaved
	case live.Replayed, live.Conflict, live.Mismatch, live.Rejected, live.Released, live.Dropped:
		return CheckAnswered
	}
	return 0
}

// The events step mode publishes.
const (
	heldKind    live.Kind = "held"      // a request waits at a checkpoint
	resumedKind live.Kind = "resumed"   // it goes on
	stepKind    live.Kind = "step_mode" // step mode was turned on or off
	// heldListKind tells this server's pages that another server's held
	// requests changed with no event of theirs (step_shared.go).
	heldListKind live.Kind = "held_list"
)

// defaultStepLimit is how long a request may be held at one checkpoint.
const defaultStepLimit = 2 * time.Minute

// stepProgress is one request's passage through step mode.
type stepProgress struct {
	past Checkpoint  // the last checkpoint it stopped at (or passed)
	free atomic.Bool // run to the end without stopping again
	// full is set when step mode could not take the request in: it
	// already held maxHeld requests (parse refuses it).
	full bool
	// answer is the status the request is about to send, once it is held
	// at "answered", and saved whether that answer is one the work saved
	// (the only kind an aimed lost response can lose).
	answer int
	saved  bool
}

// maxHeld bounds the requests one server holds: each is a row of the step
// bar on every page, and a class steps through a handful. A request that
// arrives beyond it is refused with a 503 before anything is saved.
const maxHeld = 500

// heldRequest is a request waiting at a checkpoint.
type heldRequest struct {
	p     *payment
	at    Checkpoint
	since time.Time
	next  chan struct{} // closed to let it go on
}

// stepper holds requests in step mode.
type stepper struct {
	s     *Server
	on    atomic.Bool
	limit time.Duration
	// after starts the time limit; tests replace it to end holds at will.
	after func(time.Duration) <-chan time.Time
	// lease is how long a held request's key is kept from the sweepers
	// after each renewal (the lock timeout); every starts the renewals'
	// ticker, which tests replace to renew at will (or never again, as a
	// server that died).
	lease time.Duration
	every func(time.Duration) (<-chan time.Time, func())

	// closing is set at shutdown: nobody will step a request any more, so
	// none is held (LetHeldGo).
	closing atomic.Bool
	// max bounds the requests held at once (maxHeld; tests lower it).
	max int

	mu   sync.Mutex
	held []*heldRequest // oldest first
	off  chan struct{}  // closed when step mode is turned off: every hold ends

	// The other servers on the database, when there are (step_shared.go):
	// their held requests as their events and announcements told, and
	// the commands this server forwards to them.
	others   []remoteHold // st.mu guards it
	commands stepCommands
}

func newStepper(s *Server, limit, lease time.Duration) *stepper {
	if limit <= 0 {
		limit = defaultStepLimit
	}
	st := &stepper{s: s, limit: limit, max: maxHeld, after: time.After, off: make(chan struct{}),
		lease: lease, every: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}}
	st.commands.changed = make(chan struct{}, 1)
	return st
}

// at holds p at the checkpoint its event kind reaches, if step mode is on
// and p has not passed that checkpoint yet.
func (st *stepper) at(p *payment, k live.Kind) {
	if cp := checkpointAt(k); cp != 0 {
		st.hold(p, cp)
	}
}

// hold waits at checkpoint cp until the presenter lets p go on.
func (st *stepper) hold(p *payment, cp Checkpoint) {
	if !st.on.Load() || st.closing.Load() || p.step.free.Load() || cp <= p.step.past {
		return
	}
	p.step.past = cp
	h := &heldRequest{p: p, at: cp, since: st.s.clock.Now(), next: make(chan struct{})}
	st.mu.Lock()
	if !st.on.Load() || st.closing.Load() {
		st.mu.Unlock()
		return
	}
	if cp == CheckReceived && len(st.held) >= st.max {
		st.mu.Unlock()
		p.step.full = true
		p.step.free.Store(true) // its refusal is not held either
		return
	}
	st.listChanged()
	st.held = append(st.held, h)
	off := st.off
	st.mu.Unlock()
	p.publishStep(heldKind, cp.String())

	// Time spent held is not the work being slow: the work's deadline
	// stops running, and every sweeper is told the key's work is alive by
	// a lease of one lock timeout, renewed every third of it while the
	// request is held. A server killed meanwhile renews no more, and its
	// keys are free a lock timeout later, as any dead server's are.
	resume := p.pauseWork()
	defer resume()
	p.renewWork(st.lease)
	renew, stopRenewing := st.every(st.lease / 3)
	defer stopRenewing()
	limit := st.after(st.limit)

	reason := ""
wait:
	for {
		select {
		case <-renew:
			p.renewWork(st.lease)
			continue
		case <-h.next:
		case <-off:
		case <-p.c.Request().Context().Done():
			reason = "the client went away"
			p.step.free.Store(true)
		case <-st.s.baseCtx.Done():
			p.step.free.Store(true)
		case <-limit:
			reason = "held for " + st.limit.String() + ": the time limit let it go"
			p.step.free.Store(true)
		}
		break wait
	}
	st.mu.Lock()
	st.drop(h)
	st.mu.Unlock()
	p.publishStep(resumedKind, reason)
}

// pauseWork stops the deadline of p's claimed work, if it has one, until
// resume.
func (p *payment) pauseWork() (resume func()) {
	if p.run == nil {
		return func() {}
	}
	return p.run.PauseWork()
}

// renewWork tells every sweeper that p's claimed work, if it has one, is
// alive for lease from now.
func (p *payment) renewWork(lease time.Duration) {
	if p.run == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.s.baseCtx), pay.MaxClaimWait)
	defer cancel()
	if err := p.run.RenewWork(ctx, lease); err != nil {
		p.s.logf("step mode: renewing the work lease of %s: %v", p.id, err)
	}
}

// errNoChange is the room edit's way to write nothing.
var errNoChange = errors.New("no change")

// errNothingHeld answers Next or Finish when no request waits.
var errNothingHeld = pay.Errorf(pay.ENOTFOUND, "No request is held at a checkpoint. Turn step mode on, then pay.")

// find returns the held request with the id, or the oldest for "".
func (st *stepper) find(id string) (*heldRequest, error) {
	for _, h := range st.held {
		if id == "" || h.p.id == id {
			return h, nil
		}
	}
	if id != "" {
		return nil, pay.Errorf(pay.ENOTFOUND, "The request %q is not held at a checkpoint (it may be running between two, or finished).", truncate(id, 40))
	}
	return nil, errNothingHeld
}

// next lets one request go on to its next checkpoint; toEnd lets it run
// to the end.
func (st *stepper) next(id string, toEnd bool) (string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	h, err := st.find(id)
	if err != nil {
		return "", err
	}
	if toEnd {
		h.p.step.free.Store(true)
	}
	st.letGo(h)
	return h.p.id, nil
}

// LetHeldGo is for shutdown: every request step mode holds on this server
// runs to its end at once, and none is held from now on, so that the
// server's wait for its requests in flight ends as soon as their work
// does. The room's step mode stays as it is for the other servers. It
// returns how many requests it let go.
func (s *Server) LetHeldGo() int {
	s.steps.closing.Store(true)
	return s.steps.play()
}

// play lets every held request run to the end; step mode stays on for the
// requests that come next.
func (st *stepper) play() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	held := slices.Clone(st.held)
	for _, h := range held {
		h.p.step.free.Store(true)
		st.letGo(h)
	}
	return len(held)
}

// letGo lets h go on and takes it off the held list at once, so that the
// answer to the action already shows it gone; st.mu is held.
func (st *stepper) letGo(h *heldRequest) {
	select {
	case <-h.next:
	default:
		close(h.next)
	}
	st.drop(h)
}

// drop takes h off the held list; st.mu is held.
func (st *stepper) drop(h *heldRequest) {
	for i, o := range st.held {
		if o == h {
			st.listChanged()
			st.held = append(st.held[:i:i], st.held[i+1:]...)
			return
		}
	}
}

// set turns step mode on or off. Off lets every held request go on, to the
// end. It reports whether it changed anything.
func (st *stepper) set(on bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.on.Load() == on {
		return false
	}
	st.on.Store(on)
	if !on {
		close(st.off)
		st.off = make(chan struct{})
		// Every server lets its requests go too: their holds are over.
		st.others = nil
	}
	return true
}

// turn sets step mode in the room, so for every server sharing the
// database, and here, and tells every page. Turning it off always lets
// this server's held requests go, even when the room cannot be written.
func (st *stepper) turn(on bool, who string) error {
	_, _, err := st.s.room.Change(st.s.baseCtx, func(r *room.State) error {
		if r.Step == on {
			return errNoChange
		}
		r.Step = on
		return nil
	})
	changed := err == nil // the room applied it here already
	if errors.Is(err, errNoChange) {
		err = nil
	}
	if err != nil && on {
		return err
	}
	if st.set(on) {
		changed = true
	}
	if !changed {
		return err
	}
	msg := "step mode off: every held request goes on"
	if on {
		msg = "step mode on: every payment stops at each checkpoint"
	}
	if who != "" {
		msg = who + ": " + msg
	}
	st.s.hub.Publish(live.Event{Kind: stepKind, Message: msg})
	return err
}

// StepState is the body of GET and PUT /api/step and of the step actions.
type StepState struct {
	On           bool          `json:"on"`
	LimitSeconds int           `json:"limit_seconds"`
	Held         []HeldRequest `json:"held"`
	// Released names the request an action let go, if any.
	Released string `json:"released,omitempty"`
}

// HeldRequest is one request waiting at a checkpoint.
type HeldRequest struct {
	Request    string `json:"request"`
	Checkpoint string `json:"checkpoint"`
	// Answer is the status it is about to send, when held at "answered".
	Answer int `json:"answer,omitempty"`
	// Click is which click of the checkout page it is ("2", "2.1" for
	// that click's first retry), when a page sent it.
	Click string `json:"click,omitempty"`
	// Faults names the faults that can still be aimed at it (aimable).
	Faults  []string  `json:"faults,omitempty"`
	Key     string    `json:"key,omitempty"`
	OrderID string    `json:"order_id,omitempty"`
	Scope   string    `json:"-"`
	Since   time.Time `json:"since"`
	// Server names the server that holds it, when several share the
	// database.
	Server string `json:"server,omitempty"`
}

// state is step mode as this server's pages show it: the requests it
// holds and, with other servers on the database, theirs, oldest first.
func (st *stepper) state() StepState {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := StepState{On: st.on.Load(), LimitSeconds: int(st.limit / time.Second), Held: []HeldRequest{}}
	for _, h := range st.held {
		out.Held = append(out.Held, st.rowLocked(h))
	}
	if others := st.othersLocked(); len(others) > 0 {
		out.Held = append(out.Held, others...)
		slices.SortStableFunc(out.Held, func(a, b HeldRequest) int { return a.Since.Compare(b.Since) })
	}
	return out
}

// rowLocked is h as the API lists it; st.mu is held.
func (st *stepper) rowLocked(h *heldRequest) HeldRequest {
	return HeldRequest{Request: h.p.id, Checkpoint: h.at.String(), Answer: h.p.step.answer, Faults: aimable(h), Click: pageClick(h.p.c.Request()), Key: h.p.key,
		OrderID: h.p.req.OrderID, Scope: h.p.scope, Since: h.since, Server: st.s.cfg.Name}
}

// view is the step bar as the board draws it.
func (st *stepper) view() views.StepBar {
	s := st.state()
	v := views.StepBar{On: s.On}
	for _, h := range s.Held {
		if h.Faults == nil {
			// Another server's request: its events tell only where it is.
			h.Faults = aimableAt(h.Checkpoint)
		}
		who := views.ScopeLabel(h.Scope)
		if h.Server != "" {
			who += " on " + h.Server
		}
		v.Held = append(v.Held, views.HeldRow{Request: h.Request, RowID: "tl-" + h.Request, Checkpoint: h.Checkpoint, Answer: heldAnswerText(h.Answer), Click: clickText(h.Click),
			CanLose: slices.Contains(h.Faults, "response_lost"), CanCrash: slices.Contains(h.Faults, "crash_midway"),
			OrderID: h.OrderID, Who: who})
	}
	return v
}

// publishStep publishes one of step mode's events for the payment.
func (p *payment) publishStep(kind live.Kind, msg string) {
	p.publishEvent(live.Event{Kind: kind, Message: msg})
}

// stepRoutes registers step mode's JSON API: reading it is open to all,
// changing it is the presenter's, like the fault switches.
func (s *Server) stepRoutes(e *echo.Echo) {
	e.GET("/api/step", s.handleGetStep)
	e.PUT("/api/step", s.handlePutStep, s.presenterOnly)
	e.POST("/api/step/next", s.handleStepNext, s.presenterOnly)
	e.POST("/api/step/finish", s.handleStepFinish, s.presenterOnly)
	e.POST("/api/step/play", s.handleStepPlay, s.presenterOnly)
	e.POST("/api/step/aim", s.handleStepAim, s.presenterOnly)
}

// StepChange is the body of PUT /api/step.
type StepChange struct {
	On *bool `json:"on"`
}

// StepTarget is the body of POST /api/step/next and /finish: the request
// to let go ("" or no body: the oldest held).
type StepTarget struct {
	Request string `json:"request"`
}

func (s *Server) handleGetStep(c echo.Context) error {
	return c.JSON(http.StatusOK, s.steps.state())
}

func (s *Server) handlePutStep(c echo.Context) error {
	var req StepChange
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.On == nil {
		return pay.Errorf(pay.EINVALID, `Say whether step mode is on: {"on": true} or {"on": false}.`)
	}
	if err := s.steps.turn(*req.On, changedBy(c.Request())); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.steps.state())
}

func (s *Server) stepTarget(c echo.Context) (string, error) {
	var t StepTarget
	if c.Request().ContentLength == 0 {
		return "", nil
	}
	if err := decodeAdminJSON(c.Request(), &t); err != nil {
		return "", err
	}
	return t.Request, nil
}

func (s *Server) handleStepNext(c echo.Context) error   { return s.stepRelease(c, false) }
func (s *Server) handleStepFinish(c echo.Context) error { return s.stepRelease(c, true) }

func (s *Server) stepRelease(c echo.Context, toEnd bool) error {
	id, err := s.stepTarget(c)
	if err != nil {
		return err
	}
	released, err := s.steps.release(c.Request().Context(), id, toEnd)
	if err != nil {
		return err
	}
	out := s.steps.state()
	out.Released = released
	return c.JSON(http.StatusOK, out)
}

func (s *Server) handleStepPlay(c echo.Context) error {
	n := s.steps.playAll(c.Request().Context())
	out := s.steps.state()
	out.Released = fmt.Sprintf("%d", n)
	return c.JSON(http.StatusOK, out)
}

// stepMode draws step mode's events: a paused request shows where it
// waits, in its own row, until it goes on; the step bar is redrawn.
func (u *update) stepMode() {
	e := u.e
	const S = views.LaneServer
	switch e.Kind {
	case heldKind:
		r := u.rowFor("request")
		u.step(r, views.Step{ID: r.ID + "-held", From: S, To: S, Label: "paused at “" + e.Message + "”",
			Badge: views.Badge{Text: "held", Tone: views.ToneWarn}})
	case resumedKind:
		id := "tl-" + e.Request
		for _, r := range u.p.rows {
			if r.ID != id {
				continue
			}
			for i, s := range r.Steps {
				if s.ID == id+"-held" {
					r.Steps = append(r.Steps[:i:i], r.Steps[i+1:]...)
					u.add(views.FrameDelete(s.ID))
					break
				}
			}
			if e.Message != "" {
				u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "released", Tone: views.ToneMute}})
			}
		}
	case aimKind:
		r := u.rowFor("request")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "aimed", Tone: views.ToneBad}})
	case watchKind:
		// A "Watch for" item ticked: the step bar's redraw is only there
	case heldListKind:
		// Another server's held list changed: the bar shows it.
		// to make a frame, which makes every page ask for its lesson.
	case stepKind:
		r := u.rowFor("Step mode")
		u.step(r, views.Step{From: S, To: S, Label: e.Message, Badge: views.Badge{Text: "step", Tone: views.ToneInfo}})
	}
	u.drawSteps()
}

// drawSteps redraws what changed in the step bar since the frames last
// drew it, so that what a held event costs each viewer does not grow with
// the requests held: the head when the list empties or fills, and each
// held row added, changed or gone, by its id. The whole bar is redrawn
// when step mode is turned on or off, and the whole list when that is
// shorter than its changes (Play) or when a row must go elsewhere than
// the end (another server's request that was held earlier).
func (u *update) drawSteps() {
	prev, next := u.p.steps, u.p.s.steps.view()
	u.p.steps = next
	u.add(stepBarChanges(prev, next)...)
}

// stepBarChanges are the fragments that turn the step bar prev into next.
func stepBarChanges(prev, next views.StepBar) []templ.Component {
	if prev.On != next.On {
		return []templ.Component{views.StepBarView(next, true)}
	}
	var ops []templ.Component
	if (len(prev.Held) == 0) != (len(next.Held) == 0) {
		ops = append(ops, views.StepHead(next, true))
	}
	was := make(map[string]views.HeldRow, len(prev.Held))
	for _, h := range prev.Held {
		was[h.Request] = h
	}
	is := make(map[string]bool, len(next.Held))
	var changed, added []views.HeldRow
	for _, h := range next.Held {
		is[h.Request] = true
		if old, ok := was[h.Request]; !ok {
			added = append(added, h)
		} else if old != h {
			changed = append(changed, h)
		}
	}
	// Rows are only added at the end: the rows of prev still there must
	// lead next's, in the same order.
	var gone []string
	inOrder, i := true, 0
	for _, h := range prev.Held {
		if !is[h.Request] {
			gone = append(gone, h.Request)
			continue
		}
		if next.Held[i].Request != h.Request {
			inOrder = false
		}
		i++
	}
	if !inOrder || len(gone)+len(changed)+len(added) > len(next.Held) {
		return append(ops, views.HeldList(next.Held, true))
	}
	for _, id := range gone {
		ops = append(ops, views.FrameDelete(views.HeldRowID(id)))
	}
	for _, h := range changed {
		ops = append(ops, views.HeldRowView(h, true))
	}
	if len(added) > 0 {
		ops = append(ops, views.FrameHeldRows(added))
	}
	return ops
}

// Faults aimed at one request: from the board the presenter points at a
// held request and makes this one fail, instead of flipping a switch for
// the whole room. The fault applies when the request goes on.
const (
	aimResponseLost uint32 = 1 << iota // its response is lost after the work commits
	aimCrashMidway                     // the server stops right after its gateway call
)

// aimKind is the event that shows an aimed fault on the request's row.
const aimKind live.Kind = "aimed"

// aimedFaults names the faults that can be aimed, as the API spells them,
// with the checkpoint a request must not have passed yet.
var aimedFaults = map[string]struct {
	bit    uint32
	before Checkpoint
	label  string
}{
	"response_lost": {aimResponseLost, CheckAnswered + 1, "lose this response"},
	"crash_midway":  {aimCrashMidway, CheckGatewayAnswered, "crash after this gateway call"},
}

// aimable names the faults that can still change what happens to the held
// request h: a crash only before its gateway call has answered, a lost
// response only while it has one to lose (an answer the work saved; a 409
// or a replay loses nothing the class would see).
func aimable(h *heldRequest) []string {
	out := []string{} // not nil: nil is another server's request (view)
	if h.at < CheckAnswered || (h.at == CheckAnswered && h.p.step.saved) {
		out = append(out, "response_lost")
	}
	if h.at < CheckGatewayAnswered {
		out = append(out, "crash_midway")
	}
	return out
}

// aimableAt is aimable for a request known only by its checkpoint's name.
func aimableAt(name string) []string {
	for cp, n := range checkpointNames {
		if n != name {
			continue
		}
		var out []string
		if cp < CheckAnswered {
			out = append(out, "response_lost")
		}
		if cp < CheckGatewayAnswered {
			out = append(out, "crash_midway")
		}
		return out
	}
	return nil
}

// clickText names a page's click as the step bar writes it: "click 2",
// "click 2, retry 1"; "" for a request no page numbered.
func clickText(click string) string {
	if click == "" {
		return ""
	}
	n, retry, ok := strings.Cut(click, ".")
	if !ok {
		return "click " + n
	}
	return "click " + n + ", retry " + retry
}

// heldAnswerText is an HTTP status as the step bar writes it, "" for none.
func heldAnswerText(status int) string {
	if status == 0 {
		return ""
	}
	return strconv.Itoa(status)
}

// aim arms a fault for one held request.
func (st *stepper) aim(id, fault string) error {
	f, ok := aimedFaults[fault]
	if !ok {
		return pay.Errorf(pay.EINVALID, `Aim "response_lost" or "crash_midway" at a request, not %q.`, truncate(fault, 40))
	}
	st.mu.Lock()
	h, err := st.find(id)
	if err == nil && h.at >= f.before {
		err = pay.Errorf(pay.ECONFLICT, "The request %s is already at %q: too late to %s.", h.p.id, h.at.String(), f.label)
	}
	if err == nil && !slices.Contains(aimable(h), fault) {
		err = pay.Errorf(pay.ECONFLICT, "The request %s is about to answer %d, which the work did not save: there is nothing for %s to change.", h.p.id, h.p.step.answer, f.label)
	}
	if err != nil {
		st.mu.Unlock()
		return err
	}
	p := h.p
	p.aim.Or(f.bit)
	st.mu.Unlock()
	p.s.hub.Publish(live.Event{Kind: aimKind, Request: p.id, Scope: p.scope, Key: p.key, OrderID: p.req.OrderID,
		Amount: p.req.AmountSatang, Fault: true, Message: "presenter: " + f.label})
	return nil
}

// aimedAt applies the faults aimed at p: into the protocol's faults
// (while it runs), and into p's own (the lost response, which the HTTP
// side plays).
func (p *payment) aimedAt(f *pay.ServerFaults) {
	a := p.aim.Load()
	if a == 0 {
		return
	}
	if f != nil && a&aimCrashMidway != 0 {
		f.CrashMidway = true
	}
	if a&aimResponseLost != 0 {
		p.faults.ResponseLost = true
	}
}

// StepAim is the body of POST /api/step/aim.
type StepAim struct {
	Request string `json:"request"`
	Fault   string `json:"fault"`
}

func (s *Server) handleStepAim(c echo.Context) error {
	var a StepAim
	if err := decodeAdminJSON(c.Request(), &a); err != nil {
		return err
	}
	if err := s.steps.aimAny(c.Request().Context(), a.Request, a.Fault); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.steps.state())
}
