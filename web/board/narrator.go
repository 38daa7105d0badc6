package board

import (
	"strconv"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// The narrator: what the timeline says of each kind of event, as a table.
// A line names the row the event goes in, the arrows it draws there, the
// answer sent back to the browser, the outcome, and what the event changes
// in the tables and counters. In busy mode only that last part applies:
// the counters and tables stay true while nothing is drawn.
//
// A kind whose drawing depends on the event (the gateway's reply by its
// status, the sweeper's by what it found) names a field to pick by and a
// line per value. Texts may hold the event's fields: {status},
// {statusText}, {statusLine}, {message}, {order}, {kind}.

// line is what the timeline says of one kind of event.
type line struct {
	// row is the title of the row the event starts, or finds by its
	// request; "" draws nothing in the timeline.
	row string
	// attempt: the row remembers the page's attempt, to draw its answer
	// as delivered or not when the page says so.
	attempt bool
	// explain: the event's message says more than the arrows' labels, so
	// the arrows carry it as a tooltip. (The others would only repeat the
	// label, in every frame sent to every viewer.)
	explain bool
	arrows  []arrow
	// draw is what a table cannot say: a drawing that changes the row's
	// arrows already there, or rows other than the event's.
	draw func(u *update, r *views.TimelineRow)
	// answer is the response travelling back to the browser.
	answer *arrow
	// outcome is the row's result badge.
	outcome *badge
	effect  effect
	// stepBar: the step bar is redrawn (step mode's events).
	stepBar bool
}

// arrow is one step of a row, from one lane to another.
type arrow struct {
	from, to views.Lane
	label    string
	badge    badge
	lost     bool
	// id, when set, is appended to the row's id: a later event finds the
	// arrow by it.
	id string
}

// badge is a badge's text and tone; toneOfStatus is the tone of the
// event's HTTP status (codeTone).
type badge struct {
	text string
	tone views.Tone
}

const toneOfStatus views.Tone = "of-status"

// effect is what an event changes in the tables and counters, in the
// order they apply.
type effect uint16

const (
	countRequest effect = 1 << iota
	countRejected
	countLost
	countReplay
	countConflict
	countMismatch
	chargeAdded    // a charge row, once per charge id
	keyStarted     // the key row is started
	keyDone        // the key row is done with the event's status
	keyDoneCreated // the key row is done with 201 (the sweeper's)
	keyHit         // a request found the key there
	keyGone        // the key row is deleted
)

// narration is a kind's line, or its lines by a field of the event.
type narration struct {
	line
	by    func(live.Event) string
	cases map[string]line
}

// The lanes.
const (
	B = views.LaneBrowser
	S = views.LaneServer
	D = views.LaneDatabase
	G = views.LaneGateway
)

// lookupArrow is the sweeper asking the gateway, in each of its lines.
var lookupArrow = arrow{from: S, to: G, label: "lookup(key)"}

// narrator is what the timeline says, per kind of event.
var narrator = map[live.Kind]narration{
	live.Received: {line: line{row: "{message}", attempt: true,
		arrows: []arrow{{from: B, to: S, label: "POST + key"}},
		effect: countRequest}},
	live.Rejected: {line: line{row: "request", explain: true,
		answer:  &arrow{label: "nothing saved", badge: badge{"{status}", views.ToneBad}},
		outcome: &badge{"{status} refused", views.ToneBad},
		effect:  countRejected}},
	live.Dropped: {line: line{row: "request",
		arrows: []arrow{{from: B, to: S, lost: true, label: "connection dropped before the server did anything",
			badge: badge{"never happened", views.ToneBad}}},
		outcome: &badge{"network error", views.ToneBad}}},
	live.Claimed: {line: line{row: "request",
		arrows: []arrow{{from: S, to: D, label: "INSERT key: started", badge: badge{"claimed", views.ToneOK}}},
		effect: keyStarted}},
	live.Delayed: {line: line{row: "request", explain: true,
		arrows: []arrow{{from: S, to: S, label: "{message}", badge: badge{"delay", views.ToneWarn}}}}},
	live.GatewayCall: {line: line{row: "request",
		arrows: []arrow{{from: S, to: G, label: "charge(key)"}}}},
	live.GatewayReply: {by: func(e live.Event) string { return strconv.Itoa(e.Status) }, cases: map[string]line{
		"200": {row: "request", explain: true,
			arrows: []arrow{{from: G, to: S, label: "charged", badge: badge{"ok", views.ToneOK}}}},
		"504": {row: "request", explain: true,
			arrows:  []arrow{{from: G, to: S, lost: true, label: "no answer", badge: badge{"timeout", views.ToneWarn}}},
			outcome: &badge{"outcome unknown", views.ToneWarn}},
		"402": {row: "request", explain: true,
			arrows: []arrow{{from: G, to: S, label: "card declined", badge: badge{"declined", views.ToneBad}}}},
		"": {row: "request", explain: true,
			arrows: []arrow{{from: G, to: S, label: "gateway failed", badge: badge{"{status}", views.ToneBad}}}},
	}},
	live.Charged: {line: line{row: "request",
		arrows: []arrow{{from: S, to: D, label: "INSERT charge", badge: badge{"charged", views.ToneOK}}},
		effect: chargeAdded}},
	live.Completed: {by: func(e live.Event) string { return strconv.Itoa(e.Status) }, cases: map[string]line{
		"201": {row: "request",
			arrows:  []arrow{{from: S, to: D, label: "key done: {status} saved"}},
			answer:  &arrow{label: "{statusText}", badge: badge{"{status}", toneOfStatus}},
			outcome: &badge{"{status} paid", toneOfStatus},
			effect:  keyDone},
		"": {row: "request",
			arrows:  []arrow{{from: S, to: D, label: "key done: {status} saved"}},
			answer:  &arrow{label: "{statusText}", badge: badge{"{status}", toneOfStatus}},
			outcome: &badge{"{statusLine}, saved", toneOfStatus},
			effect:  keyDone},
	}},
	live.ResponseLost: {line: line{row: "request", draw: (*update).loseAnswer,
		outcome: &badge{"response lost", views.ToneBad},
		effect:  countLost}},
	live.Replayed: {line: line{row: "request",
		arrows:  []arrow{{from: S, to: D, label: "key done: read saved answer"}},
		answer:  &arrow{label: "{status} again", badge: badge{"replayed", views.ToneInfo}},
		outcome: &badge{"{status} replayed", views.ToneInfo},
		effect:  countReplay | keyHit}},
	live.Conflict: {line: line{row: "request",
		arrows:  []arrow{{from: S, to: D, label: "key still started"}},
		answer:  &arrow{label: "Conflict", badge: badge{"409", views.ToneWarn}},
		outcome: &badge{"409 in progress", views.ToneWarn},
		effect:  countConflict | keyHit}},
	live.Mismatch: {line: line{row: "request",
		arrows:  []arrow{{from: S, to: D, label: "other fingerprint"}},
		answer:  &arrow{label: "key reused", badge: badge{"422", views.ToneBad}},
		outcome: &badge{"422 key reused", views.ToneBad},
		effect:  countMismatch | keyHit}},
	live.Released: {line: line{row: "request", explain: true,
		arrows:  []arrow{{from: S, to: D, label: "DELETE key", badge: badge{"released", views.ToneMute}}},
		answer:  &arrow{label: "retry", badge: badge{"{status}", views.ToneWarn}},
		outcome: &badge{"released", views.ToneMute},
		effect:  keyGone}},
	live.Crashed: {line: line{row: "request", explain: true,
		arrows: []arrow{{from: S, to: S, label: "stopped after the gateway call", badge: badge{"crash", views.ToneBad}},
			{from: S, to: B, lost: true, label: "no response"}},
		outcome: &badge{"crashed: key left started", views.ToneBad}}},
	live.RolledBack: {line: line{row: "request", explain: true,
		arrows:  []arrow{{from: S, to: D, label: "transaction rolled back", badge: badge{"failed halfway", views.ToneBad}}},
		outcome: &badge{"failed halfway", views.ToneBad}}},
	live.Swept: {by: func(e live.Event) string { return string(e.Sweep) }, cases: map[string]line{
		string(live.SweepFailed): {row: "Sweeper", explain: true,
			arrows:  []arrow{lookupArrow, {from: S, to: S, label: "{message}", badge: badge{"sweep failed", views.ToneBad}}},
			outcome: &badge{"still started", views.ToneWarn}},
		string(live.SweepCharged): {row: "Sweeper", explain: true,
			arrows: []arrow{lookupArrow, {from: G, to: S, label: "yes"},
				{from: S, to: D, label: "INSERT charge, key done", badge: badge{"swept", views.ToneWarn}}},
			outcome: &badge{"swept: charged", views.ToneOK},
			effect:  chargeAdded | keyDoneCreated},
		"": {row: "Sweeper", explain: true,
			arrows: []arrow{lookupArrow, {from: G, to: S, label: "no"},
				{from: S, to: D, label: "DELETE key", badge: badge{"swept", views.ToneWarn}}},
			outcome: &badge{"swept: released", views.ToneMute},
			effect:  keyGone},
	}},
	live.Delivered:   {line: line{draw: (*update).delivered}},
	live.Undelivered: {line: line{draw: (*update).delivered}},
	live.LookedUp: {by: lookupCase, cases: map[string]line{
		// What the look-up answered, as the server's books said then: a
		// key claimed with its outcome unknown is not "not paid".
		string(pay.OrderPending): {row: "Look-up",
			arrows:  []arrow{{from: B, to: S, label: "GET ?order_id={order}"}, {from: S, to: D, label: "SELECT the order's charges and keys"}},
			answer:  &arrow{label: "pending: outcome unknown", badge: badge{"200", views.ToneWarn}},
			outcome: &badge{"pending", views.ToneWarn}},
		string(pay.OrderNeverSeen): {row: "Look-up",
			arrows:  []arrow{{from: B, to: S, label: "GET ?order_id={order}"}, {from: S, to: D, label: "SELECT the order's charges and keys"}},
			answer:  &arrow{label: "never seen", badge: badge{"200", views.ToneInfo}},
			outcome: &badge{"never seen", views.ToneInfo}},
		"true": {row: "Look-up",
			arrows:  []arrow{{from: B, to: S, label: "GET ?order_id={order}"}, {from: S, to: D, label: "SELECT the order's charges"}},
			answer:  &arrow{label: "paid", badge: badge{"200", views.ToneOK}},
			outcome: &badge{"found paid", views.ToneOK}},
		"": {row: "Look-up",
			arrows:  []arrow{{from: B, to: S, label: "GET ?order_id={order}"}, {from: S, to: D, label: "SELECT the order's charges"}},
			answer:  &arrow{label: "not paid", badge: badge{"200", views.ToneInfo}},
			outcome: &badge{"not paid", views.ToneInfo}},
	}},
	live.Pruned: {line: line{row: "Retention",
		arrows: []arrow{{from: S, to: D, label: "{message}", badge: badge{"pruned", views.ToneMute}}}}},
	live.Switched: {line: line{row: "Switches",
		arrows: []arrow{{from: S, to: S, label: "{message}", badge: badge{"switch", views.ToneInfo}}}}},
	live.Reset: {line: line{row: "Reset",
		arrows: []arrow{{from: S, to: D, label: "{message}", badge: badge{"reset", views.ToneMute}}}}},
	live.Gap: {line: line{row: gapRow,
		arrows: []arrow{{from: S, to: S, label: "{message}", badge: badge{"gap", views.ToneWarn}}}}},

	// Step mode: a paused request shows where it waits, in its own row,
	// until it goes on; the step bar is redrawn.
	step.KindHeld: {line: line{row: "request", stepBar: true,
		arrows: []arrow{{id: "-held", from: S, to: S, label: "paused at “{message}”", badge: badge{"held", views.ToneWarn}}}}},
	step.KindResumed: {line: line{draw: (*update).resumed, stepBar: true}},
	step.KindAimed: {line: line{row: "request", stepBar: true,
		arrows: []arrow{{from: S, to: S, label: "{message}", badge: badge{"aimed", views.ToneBad}}}}},
	step.KindMode: {line: line{row: "Step mode", stepBar: true,
		arrows: []arrow{{from: S, to: S, label: "{message}", badge: badge{"step", views.ToneInfo}}}}},
	// A "Watch for" item ticked: the step bar's redraw is only there to
	// make a frame, which makes every page ask for its lesson.
	lesson.WatchKind: {line: line{stepBar: true}},
	// The class's vote changed: no row; the frame's room mark makes every
	// page ask for the vote (static/predict.js).
	lesson.PollKind: {},
	// The workshop's scoreboard changed: no row; the frame's workshop mark
	// makes the board ask for the scoreboard (static/board.js).
	WorkshopKind:      {},
	WorkshopSavedKind: {},
	// Another server's held list changed: the bar shows it.
	step.KindHeldList: {line: line{stepBar: true}},
}

// gapRow is the title of the row of a gap: the other servers' events this
// server missed.
const gapRow = "Other servers"

// lookupCase picks a look-up's line: by the state it answered, or, for an
// event without one (an older server's), by whether it found a charge.
func lookupCase(e live.Event) string {
	switch pay.OrderState(e.Lookup) {
	case pay.OrderPending, pay.OrderNeverSeen:
		return e.Lookup
	}
	return strconv.FormatBool(e.Charge != "")
}

// unknown is the line of a kind the narrator has none for.
var unknown = line{row: "{kind}", arrows: []arrow{{from: S, to: S, label: "{message}"}}}

// lineOf is what the narrator says of e.
func lineOf(e live.Event) line {
	n, ok := narrator[e.Kind]
	switch {
	case !ok:
		return unknown
	case n.by == nil:
		return n.line
	}
	if l, ok := n.cases[n.by(e)]; ok {
		return l
	}
	return n.cases[""]
}
