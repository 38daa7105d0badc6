package board

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// said applies events to a fresh board, as its own goroutine would, and
// returns the newest row.
func said(t *testing.T, events ...live.Event) views.TimelineRow {
	t.Helper()
	b := newTestBoard(t, nil, 10)
	for i, e := range events {
		e.Seq = b.hub.LastSeq() + uint64(i) + 1
		if e.Request == "" && e.Kind != live.Received {
			e.Request = "rq_1"
		}
		b.apply(e)
	}
	l := b.Snapshot()
	if len(l.Timeline) == 0 {
		t.Fatal("no row drawn")
	}
	return l.Timeline[0]
}

func labels(r views.TimelineRow) string {
	var out []string
	for _, s := range r.Steps {
		l := s.Label
		if s.Badge.Text != "" {
			l += " [" + s.Badge.Text + "]"
		}
		if s.Lost {
			l += " (lost)"
		}
		out = append(out, l)
	}
	return strings.Join(out, " | ")
}

func TestNarratorSaysWhatEachEventDid(t *testing.T) {
	received := live.Event{Kind: live.Received, Request: "rq_1", Message: "POST /v1/payments", Key: "k", Scope: "s", OrderID: "A-1"}
	ev := func(k live.Kind, status int, msg string) live.Event {
		return live.Event{Kind: k, Status: status, Message: msg, Key: "k", Scope: "s", OrderID: "A-1"}
	}
	for _, c := range []struct {
		name     string
		events   []live.Event
		title    string
		arrows   string
		outcome  string
		tone     views.Tone
		tooltips bool
	}{
		{"a request arrives: its row is titled by its message", []live.Event{received},
			"POST /v1/payments", "POST + key", "", "", false},
		{"a refused request says nothing was saved, with its status", []live.Event{received, ev(live.Rejected, 400, "amount_satang must be an integer")},
			"POST /v1/payments", "POST + key | nothing saved [400]", "400 refused", views.ToneBad, true},
		{"the gateway times out: the outcome is unknown", []live.Event{received, ev(live.GatewayCall, 0, ""), ev(live.GatewayReply, http.StatusGatewayTimeout, "no answer in 5s")},
			"POST /v1/payments", "POST + key | charge(key) | no answer [timeout] (lost)", "outcome unknown", views.ToneWarn, false},
		{"the gateway declines the card", []live.Event{received, ev(live.GatewayReply, http.StatusPaymentRequired, "declined")},
			"POST /v1/payments", "POST + key | card declined [declined]", "", "", false},
		{"the gateway fails with its status", []live.Event{received, ev(live.GatewayReply, http.StatusBadGateway, "boom")},
			"POST /v1/payments", "POST + key | gateway failed [502]", "", "", false},
		{"a payment completes: 201 paid", []live.Event{received, ev(live.Claimed, 0, ""), ev(live.GatewayReply, 200, ""), ev(live.Charged, 0, ""), ev(live.Completed, 201, "")},
			"POST /v1/payments", "POST + key | INSERT key: started [claimed] | charged [ok] | INSERT charge [charged] | key done: 201 saved | Created [201]", "201 paid", views.ToneOK, false},
		{"a saved server error says its status line", []live.Event{received, ev(live.Completed, 500, "")},
			"POST /v1/payments", "POST + key | key done: 500 saved | Internal Server Error [500]", "500 Internal Server Error, saved", views.ToneBad, false},
		{"a lost response replaces the answer's arrow", []live.Event{received, ev(live.Completed, 201, ""), ev(live.ResponseLost, 201, "connection closed")},
			"POST /v1/payments", "POST + key | key done: 201 saved | 201 never arrives [lost response] (lost)", "response lost", views.ToneBad, false},
		{"a replay reads the saved answer", []live.Event{received, ev(live.Replayed, 201, "")},
			"POST /v1/payments", "POST + key | key done: read saved answer | 201 again [replayed]", "201 replayed", views.ToneInfo, false},
		{"a 409 while the first runs", []live.Event{received, ev(live.Conflict, 409, "")},
			"POST /v1/payments", "POST + key | key still started | Conflict [409]", "409 in progress", views.ToneWarn, false},
		{"a key reused with another body", []live.Event{received, ev(live.Mismatch, 422, "")},
			"POST /v1/payments", "POST + key | other fingerprint | key reused [422]", "422 key reused", views.ToneBad, false},
		{"a crash leaves the key started", []live.Event{received, ev(live.Crashed, 0, "crash midway")},
			"POST /v1/payments", "POST + key | stopped after the gateway call [crash] | no response (lost)", "crashed: key left started", views.ToneBad, true},
		{"the sweeper finds the charge", []live.Event{{Kind: live.Swept, Sweep: live.SweepCharged, Key: "k", Scope: "s", Message: "swept"}},
			"Sweeper", "lookup(key) | yes | INSERT charge, key done [swept]", "swept: charged", views.ToneOK, true},
		{"the sweeper finds none", []live.Event{{Kind: live.Swept, Sweep: live.SweepReleased, Key: "k", Scope: "s"}},
			"Sweeper", "lookup(key) | no | DELETE key [swept]", "swept: released", views.ToneMute, true},
		{"the sweeper fails", []live.Event{{Kind: live.Swept, Sweep: live.SweepFailed, Key: "k", Scope: "s", Message: "gateway down"}},
			"Sweeper", "lookup(key) | gateway down [sweep failed]", "still started", views.ToneWarn, true},
		{"a look-up finds the order paid", []live.Event{{Kind: live.LookedUp, OrderID: "A-9", Charge: "ch_1"}},
			"Look-up", "GET ?order_id=A-9 | SELECT the order's charges | paid [200]", "found paid", views.ToneOK, false},
		{"a look-up finds it not paid", []live.Event{{Kind: live.LookedUp, OrderID: "A-9"}},
			"Look-up", "GET ?order_id=A-9 | SELECT the order's charges | not paid [200]", "not paid", views.ToneInfo, false},
		{"step mode holds a request where it waits", []live.Event{received, {Kind: step.KindHeld, Message: "claimed"}},
			"POST /v1/payments", "POST + key | paused at “claimed” [held]", "", "", false},
		{"a resumed request loses its pause and says why", []live.Event{received, {Kind: step.KindHeld, Message: "claimed"}, {Kind: step.KindResumed, Message: "let go by the presenter"}},
			"POST /v1/payments", "POST + key | let go by the presenter [released]", "", "", false},
		{"a kind the narrator has no line for gets a row of its own", []live.Event{{Kind: "lesson", Message: "chapter 2 starts"}},
			"lesson", "chapter 2 starts", "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := said(t, c.events...)
			if r.Title != c.title || labels(r) != c.arrows || r.Outcome.Text != c.outcome || r.Outcome.Tone != c.tone {
				t.Fatalf("row %q: %s => %q (%s)\nwant %q: %s => %q (%s)", r.Title, labels(r), r.Outcome.Text, r.Outcome.Tone,
					c.title, c.arrows, c.outcome, c.tone)
			}
			last := c.events[len(c.events)-1]
			if tip := r.Steps[len(r.Steps)-1].Title; c.tooltips && tip != last.Message {
				t.Fatalf("the arrow's tooltip is %q, want the event's message %q", tip, last.Message)
			}
		})
	}
}

// Every kind the server publishes has a line: none falls to the row of an
// unknown kind.
func TestNarratorHasALinePerKind(t *testing.T) {
	for _, k := range []live.Kind{live.Received, live.Rejected, live.Claimed, live.Replayed, live.Conflict, live.Mismatch,
		live.Delayed, live.GatewayCall, live.GatewayReply, live.Charged, live.Completed, live.Released, live.Dropped,
		live.ResponseLost, live.Crashed, live.RolledBack, live.Swept, live.Pruned, live.LookedUp, live.Delivered,
		live.Undelivered, live.Switched, live.Reset, live.Gap, step.KindHeld, step.KindResumed, step.KindMode,
		step.KindAimed, step.KindHeldList, lesson.WatchKind} {
		n, ok := narrator[k]
		if !ok {
			t.Errorf("no line for %q", k)
			continue
		}
		if n.by != nil && len(n.cases) > 0 {
			if _, ok := n.cases[""]; !ok {
				t.Errorf("%q picks a line by a field but has none for the other values", k)
			}
		}
	}
}

// Busy mode applies only the lines' effects: the counters and tables it
// keeps are those the drawn timeline keeps for the same events.
func TestBusyModeCountsWhatTheTimelineCounts(t *testing.T) {
	var events []live.Event
	for i := range 5 {
		events = append(events, paymentEvents(i)...)
	}
	e := paymentEvents(0)[0]
	for _, k := range []live.Kind{live.Replayed, live.Conflict, live.Mismatch} {
		x := e
		x.Kind, x.Status = k, 201
		events = append(events, x)
	}
	x := e
	x.Kind, x.Key = live.Released, "board-key-4"
	events = append(events, x, live.Event{Kind: live.ResponseLost, Request: "rq_b0000001", Status: 201},
		live.Event{Kind: live.Rejected, Status: 400})
	run := func(quiet bool) (views.Counters, []views.KeyRow, int) {
		b := newTestBoard(t, nil, 10)
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, e := range events {
			e.Seq = uint64(i + 1)
			u := &update{p: b.Board, e: e, quiet: quiet}
			u.narrate()
		}
		return b.counters, b.snapshotKeysLocked(), len(b.charges)
	}
	drawn, drawnKeys, drawnCharges := run(false)
	quiet, quietKeys, quietCharges := run(true)
	if !reflect.DeepEqual(drawn, quiet) || drawnCharges != quietCharges || len(drawnKeys) != len(quietKeys) {
		t.Fatalf("drawn: %+v, %d keys, %d charges\nbusy:  %+v, %d keys, %d charges", drawn, len(drawnKeys), drawnCharges, quiet, len(quietKeys), quietCharges)
	}
	for i := range drawnKeys {
		d, q := drawnKeys[i], quietKeys[i]
		if d.Key != q.Key || d.Status != q.Status || d.Code != q.Code || d.Hits != q.Hits {
			t.Errorf("key %d: drawn %+v, busy %+v", i, d, q)
		}
	}
	if drawn.Requests != 5 || drawn.Charges != 5 || drawn.Replays != 1 || drawn.Conflicts != 1 || drawn.Mismatches != 1 || drawn.Lost != 1 || drawn.Rejected != 1 || len(drawnKeys) != 4 {
		t.Fatalf("counters %+v, %d keys", drawn, len(drawnKeys))
	}
}
