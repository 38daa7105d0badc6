package web

import (
	"context"
	"sync"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
	"paytwice/web/workshop"
)

// The parts Server shares among its groups, each gathered by what it is
// (server.go builds them; each handler group takes only what it uses).

// classTies are this server's ties to the other servers of its class.
type classTies struct {
	// peers are the other servers sharing the database (web/room), or
	// room.Memory() for a server on its own.
	peers room.Peers
	// barriers is this server's side of a reset's barrier, with several
	// servers on the database (web/room).
	barriers *room.Barriers
	// relay carries live events between the servers that share one
	// database (web/room/relay.go, web/relay.go); nil on a server of its
	// own.
	relay *room.Relay
}

// serverLife is the server's lifetime as its background work and the
// payments' work see it.
type serverLife struct {
	// base outlives requests and ends at shutdown (stop): claimed work
	// runs under it, not under the client's connection.
	base context.Context
	stop context.CancelFunc
	// work is what a payment's work runs under: base, ended early by
	// AbandonWork (abandon) when a shutdown will wait no longer.
	work    context.Context
	abandon context.CancelCauseFunc
}

// simWorld is the simulated provider: the gateway the payments charge,
// its ledger, the same provider served to applications under test, and
// the plan that draws the fault switches in random mode.
type simWorld struct {
	ledger  Ledger // the gateway's; may be the payments store itself
	gateway *sim.Gateway
	// handler is the provider served at /sim/gateway for applications
	// under test (sim_gateway.go); the room's reset empties it.
	handler *sim.GatewayHandler
	faults  *sim.FaultPlan
}

// paymentParts are the parts of the payments that the sweeper and the
// reset share with the payment handlers (payment_handlers.go).
type paymentParts struct {
	// protocol runs the payment protocol (pay/service.go).
	protocol *pay.Service
	// idleSweeps lets the sweeper skip its query while no key can be
	// started (idle.go).
	idleSweeps *idleSweeps
	// inflight is held shared by every payment and the sweeper, and
	// exclusively by a reset, which so waits for them (admin.go).
	inflight sync.RWMutex
	// sleep waits during the delay fault; tests may replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// attempts are the checkout pages' recent payment attempts, so that
	// one the browser sent twice shows as such.
	attempts attemptLog
	// steps holds payments in step mode (web/room/step; its HTTP side in
	// step.go).
	steps *step.Stepper
}

// livePages are what the live pages share: the board, this server's
// answer counts, and the place students join from.
type livePages struct {
	// board is the live pages' board (web/board), started on first use
	// (board_wiring.go).
	board lazyBoard
	// answers is this server's answer counts as the books keep them
	// (answer_counts.go).
	answers *answerCounts
	// join is where students join: the handout, its QR code and the
	// board's address (join.go).
	join *joinHandlers
}

// teachingParts are the guided lessons and the scheduler's puzzle.
type teachingParts struct {
	// lessons are the guided lessons, narration ticks the running
	// chapter's "Watch for" items (web/room/lesson).
	lessons   lesson.Book
	narration *lesson.Narrator
	// judge solves the scheduler's puzzle from the books (puzzle_judge.go).
	judge *puzzleJudge
}

// studentEndpoints is "bring your own endpoint" (web/workshop): the
// workshop, and its guard, what it may call.
type studentEndpoints struct {
	workshop *workshop.Workshop
	guard    *workshop.Guard
}
