package live

// Tally counts the answers this server gave, by the kind the board counts
// them under: the requests it received and, of those, the ones refused
// before any work, replayed, answered 409 or 422, and the answers lost
// on the way. It counts only this server's own events, never another
// server's it only shows, so that the counts of every server of a room
// add up without counting an answer twice. Gen is the room's reset the
// counts run since (Hub.RestartTally).
type Tally struct {
	Gen        uint64
	Requests   int64
	Rejected   int64
	Lost       int64
	Replays    int64
	Conflicts  int64
	Mismatches int64
}

// Plus is t with o's counts added; t's Gen stays.
func (t Tally) Plus(o Tally) Tally {
	t.Requests += o.Requests
	t.Rejected += o.Rejected
	t.Lost += o.Lost
	t.Replays += o.Replays
	t.Conflicts += o.Conflicts
	t.Mismatches += o.Mismatches
	return t
}

// count adds one event of kind k to the tally.
func (t *Tally) count(k Kind) {
	switch k {
	case Received:
		t.Requests++
	case Rejected:
		t.Rejected++
	case ResponseLost:
		t.Lost++
	case Replayed:
		t.Replays++
	case Conflict:
		t.Conflicts++
	case Mismatch:
		t.Mismatches++
	}
}

// Tally returns the counts of this server's own events so far, and the
// Seq of the newest event they include: a board that starts from them
// counts the events after seq itself, none twice.
func (h *Hub) Tally() (t Tally, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tally, h.next - 1
}

// Minus is t less o's counts; t's Gen stays.
func (t Tally) Minus(o Tally) Tally {
	t.Requests -= o.Requests
	t.Rejected -= o.Rejected
	t.Lost -= o.Lost
	t.Replays -= o.Replays
	t.Conflicts -= o.Conflicts
	t.Mismatches -= o.Mismatches
	return t
}

// countOf adds another server's event e to a tally of the answers of
// the room's newest reset gen seen: an event of a newer gen (another
// server's reset reached here first through its events) starts it again,
// one of an older gen (relayed late, from before the reset) is not
// counted.
func (t *Tally) countOf(e *Event) {
	switch {
	case e.Gen > t.Gen:
		*t = Tally{Gen: e.Gen}
	case e.Gen < t.Gen:
		return
	}
	t.count(e.Kind)
}

// Counts returns the counts of this server's own events so far (as Tally
// does), those of the other servers' events this hub has published since
// it started, and the Seq of the newest event they include. The two run
// since their own reset gens (Tally.Gen): the other servers' events carry
// theirs, and a reset reaches this server's tally when its memory is
// reset (RestartTally), perhaps a moment before or after the others'
// events of the new gen arrive.
func (h *Hub) Counts() (own, remote Tally, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tally, h.remote, h.next - 1
}

// RestartTally sets the counts to zero for the room's reset gen: at start
// (with the room's current generation) and on every reset.
func (h *Hub) RestartTally(gen uint64) {
	h.mu.Lock()
	h.tally = Tally{Gen: gen}
	h.mu.Unlock()
}
