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
	"sync"
	"sync/atomic"
	"time"

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
	// WentOnAlone, when set, is told of the held request r that goes on
	// with nobody stepping it (why: the time limit let it go, or its
	// client went away), on the server that holds it, just before r goes
	// on: the puzzle of its order is not the class's to solve any more,
	// and must know so before r's charge is counted.
	WentOnAlone func(ctx context.Context, r HeldRequest, why Alone)
}

// Alone is why a held request went on with nobody stepping it
// (Config.WentOnAlone).
type Alone int

// Why a held request goes on alone.
const (
	AloneTimeLimit  Alone = iota + 1 // held past Config.Limit
	AloneClientGone                  // its client went away
)

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

// On reports whether step mode is on.
func (st *Stepper) On() bool { return st.on.Load() }
