package web

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// SweptKey is one key the sweeper closed, as POST /api/sweep reports it.
// The scope is left out: for a browser it is the session cookie's value.
type SweptKey struct {
	Key          string `json:"key"`
	OrderID      string `json:"order_id"`
	AmountSatang int64  `json:"amount_satang"`
	// Outcome is "charged" (the gateway had charged: the charge was
	// recorded and the key now replays 201), "released" (it had not: the
	// key was deleted and a retry runs afresh) or "failed" (the key could
	// not be closed this time and stays started).
	Outcome  string `json:"outcome"`
	ChargeID string `json:"charge_id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// SweepReport is the body of POST /api/sweep.
type SweepReport struct {
	LockTimeoutSeconds float64    `json:"lock_timeout_seconds"`
	Closed             []SweptKey `json:"closed"`
	// ClosedInRoom counts the keys every sweep closed in this room since
	// its last reset, this one's included: the periodic sweeper's too,
	// and on a cluster the other servers'.
	ClosedInRoom int64 `json:"closed_in_room"`
}

// report turns the sweeper's outcomes into the API's shape.
func (ks *keySweeper) report(outcomes []pay.SweepOutcome) SweepReport {
	rep := SweepReport{LockTimeoutSeconds: ks.lockTimeout.Seconds(), Closed: []SweptKey{}, ClosedInRoom: int64(ks.room.Load().Swept)}
	for _, o := range outcomes {
		res := sweepResult(o)
		k := SweptKey{Key: o.Row.Key, OrderID: o.Row.OrderID, AmountSatang: o.Row.AmountSatang, Outcome: string(res)}
		switch res {
		case live.SweepFailed:
			k.Error = pay.ErrorMessage(o.Err)
		case live.SweepCharged:
			k.ChargeID = o.Charge.ID
		}
		rep.Closed = append(rep.Closed, k)
	}
	return rep
}

// demoReset is the presenter's reset, and a lesson's: what it waits for
// (the payments in flight on this server, through the in-flight lock, and
// on the others, through the room's barrier), the tables it empties, the
// room it sets, and what this server keeps in its own memory.
type demoReset struct {
	// steps lets held requests go first: they hold the in-flight lock.
	steps *step.Stepper
	// barriers is this server's side of a reset's barrier; nil on a
	// server with its database to itself.
	barriers *room.Barriers
	inflight *sync.RWMutex
	room     *room.Room[room.State]
	tables   resetTables
	here     serverMemory
	timeline timeline
	logf     func(format string, args ...any)
}

// resetTables are the tables a reset empties: the payments store's, with
// the lab's rows, and the gateway's ledger when it is a database of its
// own (nil when the payments store holds it).
type resetTables struct {
	payments interface {
		Reset(ctx context.Context) error
		LabReset(ctx context.Context) error
	}
	ledger interface {
		Reset(ctx context.Context) error
	}
}

// serverMemory is what this server keeps in its own memory apart from the
// room: the lab's counts, the simulated gateway served at /sim/gateway,
// the timeline, the answer counts and where the presenter's token was
// taken lately (knownTokens).
type serverMemory struct {
	lab      *mistakesLab
	gateway  *sim.GatewayHandler
	timeline interface{ Clear() }
	answers  *answerCounts
	tokens   *knownTokens
}

// demoReset is the server's reset.
func (s *Server) demoReset() demoReset {
	r := demoReset{steps: s.payments.steps, inflight: &s.payments.inflight, room: s.room, timeline: s.hub, logf: s.logf,
		tables: resetTables{payments: s.db},
		here:   serverMemory{lab: s.lab, gateway: s.world.handler, timeline: s.hub, answers: s.pages.answers, tokens: s.admission.presenter.known}}
	if s.servers.peers.Shared() {
		r.barriers = s.servers.barriers
	}
	if s.ledgerApart() {
		r.tables.ledger = s.world.ledger
	}
	return r
}

// run clears every key, charge and gateway record, turns every
// switch off, puts the clock back, leaves the lesson and empties the
// timeline, leaving one Reset event that says who did it. The switches,
// the lab, the lesson and the clock are the room's: the reset sets them
// for every server on the database at once.
//
// It first waits for every payment in flight and any sweep under way to
// finish, and holds new ones back until it is done: on this server
// through the in-flight lock, and on the others sharing the database
// through a barrier in the room (web/room's Barriers). A payment that charged the
// gateway before the reset and saved after it would leave a local charge
// the gateway no longer has, or a lab row the real protocol then trips
// over; waiting keeps gateway and local charges equal. The wait is
// bounded: a payment's work runs under the gateway time-out once step
// mode lets it go, and a server that does not answer in time is logged
// and not waited for any longer.
func (r demoReset) run(ctx context.Context, who string) error {
	// Held requests hold the in-flight lock: let them go first.
	r.steps.Turn(false, who)
	var barrier *room.Barrier
	if r.barriers != nil {
		b, err := r.barriers.StartReset(ctx)
		if err != nil {
			return err
		}
		barrier = &b
		// The other servers hold their payments until this reset ends the
		// barrier: it runs to its end whatever its client does.
		ctx = context.WithoutCancel(ctx)
	}
	r.inflight.Lock()
	defer r.inflight.Unlock()
	var unanswered []string
	if barrier != nil {
		if unanswered = r.barriers.AwaitAcks(ctx, *barrier); len(unanswered) > 0 {
			r.logf("reset: %s did not answer within %s; their payments in flight may save after the reset",
				strings.Join(unanswered, ", "), r.barriers.AckWait)
		}
	}
	err := r.emptyTables(ctx)
	// The lab's counts are of the tables just emptied (some of them, if
	// that failed midway): they are rebuilt at the next question, before
	// the room changes, since a room that cannot be written returns
	// before this server's memory is reset below.
	r.here.lab.tablesChanged()
	// The room's defaults end the barrier, which lets the other servers go
	// on: written even when the tables could not be emptied.
	if _, _, rerr := r.room.Change(ctx, func(st *room.State) error {
		st.Reset()
		if barrier != nil && st.Barrier != nil && st.Barrier.Gen == barrier.Gen {
			st.Barrier = nil
		}
		return nil
	}); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	r.here.reset()
	msg := "keys, charges, gateway memory and timeline cleared; every switch off; clock reset"
	if len(unanswered) > 0 {
		msg += "; not waited for: " + strings.Join(unanswered, ", ")
	}
	if who != "" {
		msg = who + ": " + msg
	}
	r.timeline.Publish(live.Event{Kind: live.Reset, Message: msg})
	return nil
}

// emptyTables deletes every key, charge and gateway record, and the lab's
// rows.
func (r demoReset) emptyTables(ctx context.Context) error {
	if r.tables.ledger != nil {
		if err := r.tables.ledger.Reset(ctx); err != nil {
			return err
		}
	}
	if err := r.tables.payments.Reset(ctx); err != nil {
		return err
	}
	if err := r.tables.payments.LabReset(ctx); err != nil {
		r.logf("lab reset: %v", err) // the rest of the reset has happened anyway
	}
	return nil
}

// reset resets what this server keeps in its own memory apart from the
// room. A reset (demoReset.run) calls it after emptying the shared
// tables; a server that learns of another server's reset calls it alone, as the tables are already empty and the room's
// reset reaches it through the room. It leaves the room alone so that a
// reset heard late cannot undo what the room set after it, such as the
// switches of a lesson started right after its reset.
func (m serverMemory) reset() {
	m.lab.clear()
	m.gateway.Reset()
	m.timeline.Clear()
	m.answers.restart()
	// The presenter's token is looked at in the shared count again.
	m.tokens.forget()
}

// ClockAdvance is the body of POST /api/clock/advance.
type ClockAdvance struct {
	Seconds int64 `json:"seconds"`
}

// ClockState is how far the server's clock runs ahead of real time.
type ClockState struct {
	Now           time.Time `json:"now"`
	OffsetSeconds float64   `json:"offset_seconds"`
}

// roomClock is the room's clock as the presenter reads and moves it: the
// server's clock, which follows the room's offset, and the room that
// holds the offset for every server of the class.
type roomClock struct {
	clock    *sim.Clock
	room     *room.Room[room.State]
	timeline timeline
}

func (rc roomClock) clockState() ClockState {
	return ClockState{Now: rc.clock.Now().UTC(), OffsetSeconds: rc.clock.Offset().Seconds()}
}

// advanceClock moves the room's clock forward by d, so that keys age
// (towards the lock timeout, towards pruning) without anyone waiting, and
// publishes the jump. The bound is checked against the room's offset as
// part of the change, so advances on several servers at once cannot take
// the clock past it together.
func (rc roomClock) advanceClock(ctx context.Context, d time.Duration, who string) error {
	if d <= 0 || d > room.MaxClockAdvance {
		return pay.Errorf(pay.EINVALID, "seconds must be between 1 and %d, not %d.", int64(room.MaxClockAdvance/time.Second), int64(d/time.Second))
	}
	_, next, err := rc.room.Change(ctx, func(r *room.State) error {
		offset, ok := sim.AdvanceOffset(r.ClockOffset, d)
		if !ok {
			return pay.Errorf(pay.EINVALID, "The clock already runs %s ahead, and it may run at most %d seconds (%d days) ahead in total: advance it by at most %d more seconds, or reset the demo to start again from the real time.",
				offset, int64(sim.MaxOffset/time.Second), int64(sim.MaxOffset/(24*time.Hour)), int64((sim.MaxOffset-offset)/time.Second))
		}
		r.ClockOffset = offset
		return nil
	})
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("clock advanced by %s; it now runs %s ahead", d, next.ClockOffset)
	if who != "" {
		msg = who + ": " + msg
	}
	rc.timeline.Publish(live.Event{Kind: live.Switched, Message: msg})
	return nil
}
