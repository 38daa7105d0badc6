package step

import (
	"slices"

	"paytwice/pay"
	"paytwice/web/live"
)

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
