package workshop

import (
	"paytwice/sim"
)

// Row is one student on the scoreboard.
type Row struct {
	Name     string
	Endpoint string
	Run      Run
	// Place is the run's place in the queue (1 is next), 0 when not
	// queued.
	Place int
	// Charges is how many charges the student's gateway took: those its
	// books hold now and those they pruned, oldest first (Pruned), to
	// stay within their bound.
	Charges int
	Pruned  int64
	// ChargesUnknown says the books did not answer when the row was read:
	// Charges and Pruned are then zero, not a count.
	ChargesUnknown bool
}

// Scoreboard is the whole board.
type Scoreboard struct {
	On      bool
	Faults  sim.GatewayBaseFaults
	Allowed []Allow
	Rows    []Row
	// Hidden names the students the presenter took off the scoreboard,
	// for the presenter's "show again".
	Hidden []string
	Queued int
	Queue  int
	// ChargesErr is why the rows' charges are not known
	// (Row.ChargesUnknown), nil when they are.
	ChargesErr error
}

// Scoreboard is every student's row, in the order they registered.
func (w *Workshop) Scoreboard() Scoreboard {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := Scoreboard{On: w.on, Faults: w.faults, Allowed: w.cfg.Guard.Allowed(), Queued: len(w.queue), Queue: w.cfg.Queue}
	for _, st := range w.order {
		if st.hidden {
			b.Hidden = append(b.Hidden, st.name)
		} else {
			b.Rows = append(b.Rows, w.rowLocked(st))
		}
	}
	return b
}

// Hide takes the student called name off the scoreboard, as the
// presenter does with a name or a reason unfit for the projector; their
// gateway and own page go on. It reports whether such a student was
// shown.
func (w *Workshop) Hide(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.order {
		if st.name == name && !st.hidden {
			st.hidden = true
			w.changedLocked()
			return true
		}
	}
	return false
}

// Show puts the hidden student called name back on the scoreboard, as the
// presenter does after hiding the wrong row or once a name was changed.
// It reports whether such a student was hidden.
func (w *Workshop) Show(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.order {
		if st.name == name && st.hidden {
			st.hidden = false
			w.changedLocked()
			return true
		}
	}
	return false
}

func (w *Workshop) rowLocked(st *student) Row {
	l := st.gw.Ledger()
	return Row{Name: st.name, Endpoint: st.endpoint.String(), Run: st.run, Place: w.placeLocked(st),
		Charges: st.chargesBefore + l.Charges + int(l.Pruned), Pruned: l.Pruned}
}
