package step

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

// target is the request an action names, or the oldest held on any
// server when it names none.
func (st *Stepper) target(id string) (string, error) {
	if id != "" {
		return id, nil
	}
	if held := st.State().Held; len(held) > 0 {
		return held[0].Request, nil
	}
	return "", errNothingHeld
}

// Release is Next (toEnd false) or Finish for the request id, or the
// oldest held: here if this server holds it, else by the server that
// does. only, unless nil, bounds it to one order's requests, checked by
// the holder. It returns the request let go.
func (st *Stepper) Release(ctx context.Context, id string, toEnd bool, only *Only) (string, error) {
	id, err := st.target(id)
	if err != nil {
		return "", err
	}
	released, err := st.stepHeld(ctx, id, toEnd, only)
	if !st.shared() || pay.ErrorCode(err) != pay.ENOTFOUND {
		return released, err
	}
	op := stepOpNext
	if toEnd {
		op = stepOpFinish
	}
	if err := st.forward(ctx, stepCommand{Op: op, Request: id, Only: only}, KindResumed); err != nil {
		return "", err
	}
	return id, nil
}

// stepHeld is Next (or Finish) of the request id held here, refused if
// only bounds the step to another order's requests, and counted first
// (Config.CountStep): the step the count is for is the one about to
// happen, and the charge it makes must find it counted.
func (st *Stepper) stepHeld(ctx context.Context, id string, toEnd bool, only *Only) (string, error) {
	if st.cfg.CountStep == nil && only == nil {
		return st.Next(id, toEnd)
	}
	st.mu.Lock()
	h, err := st.find(id)
	var row HeldRequest
	if err == nil {
		row = st.rowLocked(h)
	}
	st.mu.Unlock()
	if err != nil {
		return "", err
	}
	if only != nil && (row.Scope != only.Scope || row.OrderID != only.OrderID) {
		return "", pay.Errorf(pay.EFORBIDDEN, "%s", only.Refusal)
	}
	undo := func() {}
	if st.cfg.CountStep != nil {
		undo = st.cfg.CountStep(ctx, row)
	}
	released, err := st.Next(row.Request, toEnd)
	if err != nil {
		undo() // it went on its own meanwhile (time limit, client gone)
	}
	return released, err
}

// playHeld is Play of the requests held here, counted first
// (Config.CountPlay) as the Play named play.
func (st *Stepper) playHeld(ctx context.Context, play string) int {
	if st.cfg.CountPlay == nil {
		return st.Play()
	}
	st.mu.Lock()
	rows := make([]HeldRequest, 0, len(st.held))
	for _, h := range st.held {
		rows = append(rows, st.rowLocked(h))
	}
	st.mu.Unlock()
	settle := func(bool) {}
	if len(rows) > 0 {
		settle = st.cfg.CountPlay(ctx, play, rows)
	}
	n := st.Play()
	settle(n > 0) // none: they went on their own meanwhile
	return n
}

// AimAny aims fault at the request id, or the oldest held, wherever it
// is held.
func (st *Stepper) AimAny(ctx context.Context, id, fault string) error {
	id, err := st.target(id)
	if err == nil {
		err = st.aim(id, fault)
	}
	if !st.shared() || id == "" || pay.ErrorCode(err) != pay.ENOTFOUND {
		return err
	}
	return st.forward(ctx, stepCommand{Op: stepOpAim, Request: id, Fault: fault}, KindAimed)
}

// PlayAll lets every held request run to the end, on every server, and
// returns how many this server saw go: its own, and the others' that its
// pages listed and whose resumed events came back in time.
func (st *Stepper) PlayAll(ctx context.Context) int {
	play := pay.NewID("sc_")
	n := st.playHeld(ctx, play)
	if !st.shared() {
		return n
	}
	var ids []string
	for _, h := range st.State().Held {
		ids = append(ids, h.Request)
	}
	return n + st.broadcast(ctx, stepCommand{ID: play, Op: stepOpPlay}, ids)
}

// forward sends cmd to the other servers and waits until the request it
// names shows the event want (the holder acted), a refusal comes back, or
// the forward wait passes: then no server holds the request any more, and
// this server's pages stop listing it.
func (st *Stepper) forward(ctx context.Context, cmd stepCommand, want live.Kind) error {
	// A refusal ends the wait, not the sending: it can come back from
	// the holder before the database has answered the NOTIFY that carried
	// the command, and must not make that NOTIFY look failed.
	wait, stopWaiting := context.WithTimeout(ctx, st.forwardWait())
	defer stopWaiting()
	var refused error
	var once sync.Once
	cmd.ID = pay.NewID("sc_")
	sub, err := st.send(ctx, cmd, func(err error) { once.Do(func() { refused = err; stopWaiting() }) })
	if err != nil {
		return err
	}
	defer st.unregister(cmd.ID)
	for {
		entries, err := sub.Next(wait)
		if errors.Is(err, live.ErrTooSlow) {
			sub = st.cfg.Hub.Subscribe(st.cfg.Hub.LastSeq())
			continue
		}
		if err != nil {
			st.commands.mu.Lock() // refused is written under it (command)
			r := refused
			st.commands.mu.Unlock()
			if r != nil {
				return r
			}
			st.forget(cmd.Request)
			return pay.Errorf(pay.ENOTFOUND, "No server let the request %q go within %s: it is not held at a checkpoint (it may be running between two, or finished, or its server stopped).",
				pay.Truncate(cmd.Request, 40), st.forwardWait())
		}
		for _, e := range entries {
			if e.Request == cmd.Request && e.Kind == want {
				return nil
			}
		}
	}
}

// forwardWait is how long a command sent to the other servers waits for
// them to act.
func (st *Stepper) forwardWait() time.Duration {
	if st.ForwardWait > 0 {
		return st.ForwardWait
	}
	return stepForwardWait
}

// broadcast sends cmd to every other server and waits, for
// the forward wait at most, until each request of ids has resumed; it
// returns how many did.
func (st *Stepper) broadcast(ctx context.Context, cmd stepCommand, ids []string) int {
	ctx, cancel := context.WithTimeout(ctx, st.forwardWait())
	defer cancel()
	if cmd.ID == "" {
		cmd.ID = pay.NewID("sc_")
	}
	sub, err := st.send(ctx, cmd, nil)
	if err != nil {
		st.cfg.Logf("step mode: %v", err)
		return 0
	}
	defer st.unregister(cmd.ID)
	left, n := slices.Clone(ids), 0
	for len(left) > 0 {
		entries, err := sub.Next(ctx)
		if errors.Is(err, live.ErrTooSlow) {
			sub = st.cfg.Hub.Subscribe(st.cfg.Hub.LastSeq())
			continue
		}
		if err != nil {
			for _, id := range left {
				st.forget(id)
			}
			break
		}
		for _, e := range entries {
			if e.Kind == KindResumed && slices.Contains(left, e.Request) {
				left = slices.DeleteFunc(left, func(id string) bool { return id == e.Request })
				n++
			}
		}
	}
	return n
}

// send registers cmd's refusal handler (unless nil), starts watching this
// server's events and sends cmd: the watch starts before the command
// leaves, so the answer cannot slip past it.
func (st *Stepper) send(ctx context.Context, cmd stepCommand, onRefused func(error)) (*live.Subscription, error) {
	c := &st.commands
	cmd.From = st.cfg.Room.ID()
	if onRefused != nil {
		c.mu.Lock()
		c.waiting[cmd.ID] = onRefused
		c.mu.Unlock()
	}
	sub := st.cfg.Hub.Subscribe(st.cfg.Hub.LastSeq())
	b, _ := json.Marshal(cmd)
	nctx, cancel := context.WithTimeout(ctx, stepReplyTimeout)
	defer cancel()
	if err := c.peers.Notify(nctx, stepChannel, string(b)); err != nil {
		st.unregister(cmd.ID)
		return nil, pay.Errorf(pay.EUNAVAILABLE, "The other servers could not be asked to step (the database did not take the notification); try again.")
	}
	return sub, nil
}

func (st *Stepper) unregister(id string) {
	c := &st.commands
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

// Command carries out another server's command on this server's held
// requests. A request this server does not hold is another's: it stays
// silent. It runs on the listener's goroutine, which may be the relay's:
// it only takes the stepper's lock, and a refusal goes out on a goroutine
// of its own, bounded by stepReplyTimeout.
func (st *Stepper) Command(payload string) {
	var cmd stepCommand
	if err := json.Unmarshal([]byte(payload), &cmd); err != nil {
		st.cfg.Logf("step mode: ignoring a notification that is not a command: %v", err)
		return
	}
	me := st.cfg.Room.ID()
	if cmd.From == me || st.ctx.Err() != nil {
		return // its own, or shutting down: every hold ends anyway
	}
	var err error
	switch cmd.Op {
	case stepOpNext, stepOpFinish:
		if st.cfg.CountStep != nil {
			// Counting writes to the room, off the listener's goroutine
			// (the relay's, maybe): the command's answer is the resumed
			// event, which comes when it is done.
			st.commands.replies.Go(func() {
				ctx, cancel := context.WithTimeout(st.ctx, st.forwardWait())
				defer cancel()
				_, err := st.stepHeld(ctx, cmd.Request, cmd.Op == stepOpFinish, cmd.Only)
				st.refuse(cmd, err)
			})
			return
		}
		_, err = st.stepHeld(st.ctx, cmd.Request, cmd.Op == stepOpFinish, cmd.Only)
	case stepOpPlay:
		if st.cfg.CountPlay != nil {
			// Counted in the room, off the listener's goroutine, as Next.
			st.commands.replies.Go(func() {
				ctx, cancel := context.WithTimeout(st.ctx, st.forwardWait())
				defer cancel()
				st.playHeld(ctx, cmd.ID)
			})
			return
		}
		st.Play()
	case stepOpAim:
		err = st.aim(cmd.Request, cmd.Fault)
	case stepOpHolding:
		st.holding(cmd)
	case stepOpRefused:
		if cmd.To == me {
			c := &st.commands
			c.mu.Lock()
			if f := c.waiting[cmd.ID]; f != nil {
				f(pay.Errorf(cmd.Code, "%s", cmd.Detail))
			}
			c.mu.Unlock()
		}
	}
	st.refuse(cmd, err)
}

// refuse tells the server that sent cmd that this one refused it with
// err, unless err is nil or says the request is not held here (another
// server may hold it).
func (st *Stepper) refuse(cmd stepCommand, err error) {
	if err == nil || pay.ErrorCode(err) == pay.ENOTFOUND {
		return
	}
	me := st.cfg.Room.ID()
	b, _ := json.Marshal(stepCommand{From: me, ID: cmd.ID, Op: stepOpRefused, To: cmd.From,
		Code: pay.ErrorCode(err), Detail: pay.ErrorMessage(err)})
	st.commands.replies.Go(func() {
		ctx, cancel := context.WithTimeout(st.ctx, stepReplyTimeout)
		defer cancel()
		if err := st.commands.peers.Notify(ctx, stepChannel, string(b)); err != nil && ctx.Err() == nil {
			st.cfg.Logf("step mode: refusing %s for %s: %v", cmd.Op, cmd.From, err)
		}
	})
}
