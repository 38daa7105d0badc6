package step

import (
	"errors"
	"slices"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

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
