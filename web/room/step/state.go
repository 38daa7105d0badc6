package step

import (
	"slices"
	"time"
)

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
