// Package step is step mode, apart from HTTP: the presenter pauses the
// race and walks it through. While it is on, every payment request (a
// browser's, curl's, the CLI's) stops at named checkpoints and waits for
// the presenter: Next lets one request go on to its next checkpoint,
// Finish lets it run to the end, Play lets every held request run to the
// end. Nothing is held forever: turning step mode off, a reset, the
// request's connection closing, shutdown, or the time limit (Config.Limit,
// on an injectable timer) lets it go.
//
// A hold is only a wait on the request's own goroutine, between two steps
// of the protocol: no transaction is open and no lock of the database is
// taken, so every fault switch works as usual once the request goes on.
//
// The checkpoints are where the protocol already reports its steps (the
// payment's events): the protocol itself knows nothing of step mode. The
// stepper knows nothing of HTTP: a request is what Request says of it,
// and the server is what Config gives (the room, the peers, the event hub,
// the clock).
package step

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// Checkpoint is a place where step mode holds a request, in the order a
// request passes them.
type Checkpoint int

// The checkpoints.
const (
	CheckReceived        Checkpoint = iota + 1 // the request arrived and was parsed
	CheckLooked                                // the lab's look-up found no key row: the insert is next
	CheckClaimed                               // the key row was inserted as started
	CheckBeforeGateway                         // about to call the gateway
	CheckGatewayAnswered                       // the gateway answered (or the server crashed)
	CheckSaved                                 // the charge and the answer are committed
	CheckAnswered                              // about to send the answer
)

var checkpointNames = map[Checkpoint]string{
	CheckReceived: "received", CheckLooked: "key looked up", CheckClaimed: "key claimed", CheckBeforeGateway: "before the gateway",
	CheckGatewayAnswered: "gateway answered", CheckSaved: "saved", CheckAnswered: "answered",
}

func (c Checkpoint) String() string { return checkpointNames[c] }

// At is the checkpoint a payment event reaches; 0 for none.
func At(k live.Kind) Checkpoint {
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
	KindHeld    live.Kind = "held"      // a request waits at a checkpoint
	KindResumed live.Kind = "resumed"   // it goes on
	KindMode    live.Kind = "step_mode" // step mode was turned on or off
	// KindHeldList tells this server's pages that another server's held
	// requests changed with no event of theirs (shared_list.go).
	KindHeldList live.Kind = "held_list"
)

// DefaultLimit is how long a request may be held at one checkpoint.
const DefaultLimit = 2 * time.Minute

// Progress is one request's passage through step mode; the request keeps
// it (Request.Step).
type Progress struct {
	past Checkpoint  // the last checkpoint it stopped at (or passed)
	free atomic.Bool // run to the end without stopping again
	// full is set when step mode could not take the request in: it
	// already held MaxHeld requests (the caller refuses it: Full).
	full bool
	// Answer is the status the request is about to send, once it is held
	// at "answered", and Saved whether that answer is one the work saved
	// (the only kind an aimed lost response can lose): the caller sets
	// them before it holds the request there.
	Answer int
	Saved  bool
	// aim holds the faults the presenter aimed at the request (Aimed).
	aim atomic.Uint32
	// stopped is set when the server stopped while the request was held
	// (StopHeld): nobody stepped it on.
	stopped atomic.Bool
	// plays is the stepper's count of Plays when the request was last
	// held: one that differs at its next checkpoint means Play came while
	// it was on its way there, and it runs to the end too.
	plays uint64
}

// Stopped reports whether the server stopped while the request was held:
// it must not reach the gateway, which nobody let it call.
func (p *Progress) Stopped() bool { return p.stopped.Load() }

// Full reports whether step mode refused to take the request in.
func (p *Progress) Full() bool { return p.full }

// Aimed says which faults the presenter aimed at the request: its
// response lost, or its server crashing right after its gateway call.
func (p *Progress) Aimed() (responseLost, crashMidway bool) {
	a := p.aim.Load()
	return a&aimResponseLost != 0, a&aimCrashMidway != 0
}

// Request is what step mode needs of a request it may hold: the caller's
// payment implements it.
type Request interface {
	// ID is the request's id on the timeline.
	ID() string
	// Step is the request's passage through step mode.
	Step() *Progress
	// Describe is the request as the step bar lists it (id, key, order,
	// scope, click, amount); the stepper fills in the rest.
	Describe() HeldRequest
	// Done is closed when the request's client went away.
	Done() <-chan struct{}
	// Publish publishes one of step mode's events for the request.
	Publish(kind live.Kind, msg string)
	// PauseWork stops the deadline of the request's claimed work until
	// resume; RenewWork tells the sweepers its key's work is alive for
	// lease from now (see pay.Payment's).
	PauseWork() (resume func())
	RenewWork(lease time.Duration)
}

// Config is what the stepper needs of its server.
type Config struct {
	// Name is the server's name, for its rows on the other servers'.
	Name string
	// Limit is how long a request may be held at one checkpoint
	// (DefaultLimit when 0); Lease how long a held request's key is kept
	// from the sweepers after each renewal (the lock timeout).
	Limit, Lease time.Duration
	// Room is the class's room, where step mode is on or off; Peers the
	// other servers; Hub the server's events.
	Room  *room.Room[room.State]
	Peers room.Peers
	Hub   *live.Hub
	Now   func() time.Time
	Logf  func(format string, args ...any)
	// CountStep, when set, counts a step on the held request r (the
	// puzzle's count) on the server that holds it, just before Next or
	// Finish lets it go, and returns how to take the count back if it was
	// not let go after all. It is counted here rather than by the server
	// that received the action: that server's copy of the others' held
	// lists can briefly miss the request (an announcement built before
	// the hold arriving after its event), and only the holder knows for
	// sure which order a held request pays.
	CountStep func(ctx context.Context, r HeldRequest) (undo func())
	// CountPlay, when set, counts Play as one step (the puzzle's count)
	// on each server that holds requests when Play reaches it, just
	// before they go: held is what this server holds, and play names the
	// Play, the same on every server, so that a Play is counted once
	// however many servers hold the puzzle's requests, and whatever the
	// receiving server's copy of the others' held lists shows. settle is
	// told whether this server let any go: one that counted it and let
	// none go takes it back, unless another server let one go.
	CountPlay func(ctx context.Context, play string, held []HeldRequest) (settle func(letGo bool))
}

// Only bounds a step to the held requests of one order: the student who
// holds a puzzle's step bar steps those only. The server that holds the
// request checks it, not the one that received the step, whose copy of
// the others' held lists can briefly miss the request; Refusal is the
// sentence another request's step is refused with.
type Only struct {
	Scope   string `json:"scope"`
	OrderID string `json:"order_id"`
	Refusal string `json:"refusal"`
}

// MaxHeld bounds the requests one server holds: each is a row of the step
// bar on every page, and a class steps through a handful. A request that
// arrives beyond it is refused with a 503 before anything is saved.
const MaxHeld = 500

// heldRequest is a request waiting at a checkpoint.
type heldRequest struct {
	r     Request
	at    Checkpoint
	since time.Time
	next  chan struct{} // closed to let it go on
}

// Stepper holds requests in step mode.
type Stepper struct {
	cfg Config
	// ctx ends when the server shuts down.
	ctx   context.Context
	on    atomic.Bool
	limit time.Duration
	// After starts the time limit; tests replace it, before the first
	// request, to end holds at will.
	After func(time.Duration) <-chan time.Time
	// lease is how long a held request's key is kept from the sweepers
	// after each renewal; Every starts the renewals' ticker, which tests
	// replace to renew at will (or never again, as a server that died).
	lease time.Duration
	Every func(time.Duration) (<-chan time.Time, func())
	// ForwardWait bounds a command sent to the other servers
	// (stepForwardWait when zero); tests on a loaded machine give it
	// more, before the first command.
	ForwardWait time.Duration
	// ticker starts the tickers of the announcements and of the watch on
	// the other servers (shared_list.go), and wallNow is the real time that
	// ages the other servers' rows; tests replace both before
	// StartCommands.
	ticker  func(time.Duration) (<-chan time.Time, func())
	wallNow func() time.Time

	// closing is set at shutdown: nobody will step a request any more, so
	// none is held (LetHeldGo).
	closing atomic.Bool
	// Max bounds the requests held at once (MaxHeld; tests lower it
	// before the first request).
	Max int

	mu   sync.Mutex
	held []*heldRequest // oldest first
	off  chan struct{}  // closed when step mode is turned off: every hold ends
	// plays counts Play: a request stepped on (Next) and on its way to its
	// next checkpoint is not held when Play comes, and must not be held
	// again after it either.
	plays uint64

	// The other servers on the database, when there are (shared.go):
	// their held requests as their events and announcements told, and
	// the commands this server forwards to them.
	others   []remoteHold // st.mu guards it
	commands stepCommands
}

// New is a stepper, off, for a server that runs until ctx ends.
func New(ctx context.Context, cfg Config) *Stepper {
	limit := cfg.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	tick := func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTicker(d)
		return t.C, t.Stop
	}
	st := &Stepper{cfg: cfg, ctx: ctx, limit: limit, Max: MaxHeld, After: time.After, off: make(chan struct{}),
		lease: cfg.Lease, Every: tick, ticker: tick, wallNow: time.Now}
	st.commands.changed = make(chan struct{}, 1)
	return st
}

// At holds p at the checkpoint its event kind reaches, if step mode is on
// and p has not passed that checkpoint yet.
func (st *Stepper) At(p Request, k live.Kind) {
	if cp := At(k); cp != 0 {
		st.Hold(p, cp)
	}
}

// Hold waits at checkpoint cp until the presenter lets p go on.
func (st *Stepper) Hold(p Request, cp Checkpoint) {
	ps := p.Step()
	if !st.on.Load() || ps.free.Load() || cp <= ps.past {
		return
	}
	if st.closing.Load() {
		stopUnstepped(ps, cp)
		return
	}
	heldBefore := ps.past != 0
	ps.past = cp
	h := &heldRequest{r: p, at: cp, since: st.cfg.Now(), next: make(chan struct{})}
	st.mu.Lock()
	if !st.on.Load() {
		st.mu.Unlock()
		return
	}
	if heldBefore && ps.plays != st.plays {
		// Stepped on before the presenter pressed Play, and between two
		// checkpoints then: Play meant it too.
		st.mu.Unlock()
		ps.free.Store(true)
		return
	}
	ps.plays = st.plays
	if st.closing.Load() {
		st.mu.Unlock()
		stopUnstepped(ps, cp)
		return
	}
	if cp == CheckReceived && len(st.held) >= st.Max {
		st.mu.Unlock()
		ps.full = true
		ps.free.Store(true) // its refusal is not held either
		return
	}
	st.listChanged()
	st.held = append(st.held, h)
	off := st.off
	st.mu.Unlock()
	p.Publish(KindHeld, cp.String())

	// Time spent held is not the work being slow: the work's deadline
	// stops running, and every sweeper is told the key's work is alive by
	// a lease of one lock timeout, renewed every third of it while the
	// request is held. A server killed meanwhile renews no more, and its
	// keys are free a lock timeout later, as any dead server's are.
	resume := p.PauseWork()
	defer resume()
	p.RenewWork(st.lease)
	renew, stopRenewing := (<-chan time.Time)(nil), func() {}
	if st.lease > 0 {
		// A floor on the period: a ticker of 0 panics, and renewing more
		// often than every millisecond would only load the database.
		renew, stopRenewing = st.Every(max(st.lease/3, time.Millisecond))
	}
	defer stopRenewing()
	limit := st.After(st.limit)

	reason := ""
wait:
	for {
		select {
		case <-renew:
			p.RenewWork(st.lease)
			continue
		case <-h.next:
		case <-off:
		case <-p.Done():
			reason = "the client went away"
			ps.free.Store(true)
		case <-st.ctx.Done():
			ps.free.Store(true)
		case <-limit:
			reason = "held for " + st.limit.String() + ": the time limit let it go"
			ps.free.Store(true)
		}
		break wait
	}
	// The last renewal may be nearly a lease old, and the work goes on
	// now with as much of its deadline as it had left: one renewal more
	// keeps the sweepers off the key for a full lease from the resume.
	p.RenewWork(st.lease)
	st.mu.Lock()
	st.drop(h)
	st.mu.Unlock()
	p.Publish(KindResumed, reason)
}

// stopUnstepped ends, at shutdown, a request that step mode would have
// held at cp: nobody will step it on any more. One that has not called the
// gateway yet is stopped (Progress.Stopped), as StopHeld stops the held
// ones, so it releases its key and charges nothing; one past the gateway
// call (the presenter let it call) runs to the end to record what the
// gateway did. Either way it is not held again.
func stopUnstepped(ps *Progress, cp Checkpoint) {
	if cp <= CheckBeforeGateway {
		ps.stopped.Store(true)
	}
	ps.free.Store(true)
}

// errNoChange is the room edit's way to write nothing.
var errNoChange = errors.New("no change")

// errNothingHeld answers Next or Finish when no request waits.
var errNothingHeld = pay.Errorf(pay.ENOTFOUND, "No request is held at a checkpoint. Turn step mode on, then pay.")

// find returns the held request with the id, or the oldest for "".
func (st *Stepper) find(id string) (*heldRequest, error) {
	for _, h := range st.held {
		if id == "" || h.r.ID() == id {
			return h, nil
		}
	}
	if id != "" {
		return nil, pay.Errorf(pay.ENOTFOUND, "The request %q is not held at a checkpoint (it may be running between two, or finished).", pay.Truncate(id, 40))
	}
	return nil, errNothingHeld
}

// Next lets one request go on to its next checkpoint; toEnd lets it run
// to the end.
func (st *Stepper) Next(id string, toEnd bool) (string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	h, err := st.find(id)
	if err != nil {
		return "", err
	}
	if toEnd {
		h.r.Step().free.Store(true)
	}
	st.letGo(h)
	return h.r.ID(), nil
}

// Play lets every held request run to the end, and every request stepped
// on and still on its way to its next checkpoint; step mode stays on for
// the requests that come next.
func (st *Stepper) Play() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.plays++
	held := slices.Clone(st.held)
	for _, h := range held {
		h.r.Step().free.Store(true)
		st.letGo(h)
	}
	return len(held)
}

// letGo lets h go on and takes it off the held list at once, so that the
// answer to the action already shows it gone; st.mu is held.
func (st *Stepper) letGo(h *heldRequest) {
	select {
	case <-h.next:
	default:
		close(h.next)
	}
	st.drop(h)
}

// drop takes h off the held list; st.mu is held.
func (st *Stepper) drop(h *heldRequest) {
	for i, o := range st.held {
		if o == h {
			st.listChanged()
			st.held = append(st.held[:i:i], st.held[i+1:]...)
			return
		}
	}
}

// Set turns step mode on or off. Off lets every held request go on, to the
// end. It reports whether it changed anything.
func (st *Stepper) Set(on bool) bool {
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

// Turn sets step mode in the room, so for every server sharing the
// database, and here, and tells every page. Turning it off always lets
// this server's held requests go, even when the room cannot be written.
func (st *Stepper) Turn(on bool, who string) error {
	_, _, err := st.cfg.Room.Change(st.ctx, func(r *room.State) error {
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
	if st.Set(on) {
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
	st.cfg.Hub.Publish(live.Event{Kind: KindMode, Message: msg})
	return err
}

// State is the body of GET and PUT /api/step and of the step actions.
type State struct {
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
	Amount  int64     `json:"-"`
	Since   time.Time `json:"since"`
	// Server names the server that holds it, when several share the
	// database.
	Server string `json:"server,omitempty"`
}

// State is step mode as this server's pages show it: the requests it
// holds and, with other servers on the database, theirs, oldest first.
func (st *Stepper) State() State {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := State{On: st.on.Load(), LimitSeconds: int(st.limit / time.Second), Held: []HeldRequest{}}
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
func (st *Stepper) rowLocked(h *heldRequest) HeldRequest {
	r := h.r.Describe()
	r.Checkpoint, r.Answer, r.Faults, r.Since, r.Server = h.at.String(), h.r.Step().Answer, aimable(h), h.since, st.cfg.Name
	return r
}

// Faults aimed at one request: from the board the presenter points at a
// held request and makes this one fail, instead of flipping a switch for
// the whole room. The fault applies when the request goes on.
const (
	aimResponseLost uint32 = 1 << iota // its response is lost after the work commits
	aimCrashMidway                     // the server stops right after its gateway call
)

// KindAimed is the event that shows an aimed fault on the request's row.
const KindAimed live.Kind = "aimed"

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
	if h.at < CheckAnswered || (h.at == CheckAnswered && h.r.Step().Saved) {
		out = append(out, "response_lost")
	}
	if h.at < CheckGatewayAnswered {
		out = append(out, "crash_midway")
	}
	return out
}

// AimableAt is aimable for a request known only by its checkpoint's name.
func AimableAt(name string) []string {
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

// aim arms a fault for one held request.
func (st *Stepper) aim(id, fault string) error {
	f, ok := aimedFaults[fault]
	if !ok {
		return pay.Errorf(pay.EINVALID, `Aim "response_lost" or "crash_midway" at a request, not %q.`, pay.Truncate(fault, 40))
	}
	st.mu.Lock()
	h, err := st.find(id)
	if err == nil && h.at >= f.before {
		err = pay.Errorf(pay.ECONFLICT, "The request %s is already at %q: too late to %s.", h.r.ID(), h.at.String(), f.label)
	}
	if err == nil && !slices.Contains(aimable(h), fault) {
		err = pay.Errorf(pay.ECONFLICT, "The request %s is about to answer %d, which the work did not save: there is nothing for %s to change.", h.r.ID(), h.r.Step().Answer, f.label)
	}
	if err != nil {
		st.mu.Unlock()
		return err
	}
	p := h.r
	p.Step().aim.Or(f.bit)
	st.mu.Unlock()
	d := p.Describe()
	st.cfg.Hub.Publish(live.Event{Kind: KindAimed, Request: d.Request, Scope: d.Scope, Key: d.Key, OrderID: d.OrderID,
		Amount: d.Amount, Fault: true, Message: "presenter: " + f.label})
	return nil
}

// On reports whether step mode is on.
func (st *Stepper) On() bool { return st.on.Load() }

// StopHeld is for shutdown: every request step mode holds on this server
// ends at once, and none is held from now on (one that reaches a
// checkpoint later, arriving or between two, ends there: Hold), so that
// the server's wait for its requests in flight is short. Nobody stepped them on, so those
// held before their gateway call are marked stopped (Progress.Stopped):
// they release their key and charge nothing; those past it (the
// presenter let them call the gateway) record what the gateway did. The
// room's step mode stays as it is, for the other servers and for this
// one's next start. It returns how many requests it ended.
func (st *Stepper) StopHeld() int {
	st.closing.Store(true)
	st.mu.Lock()
	defer st.mu.Unlock()
	held := slices.Clone(st.held)
	for _, h := range held {
		stopUnstepped(h.r.Step(), h.at)
		st.letGo(h)
	}
	return len(held)
}
