package lesson

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// Predict, then observe: every chapter asks the class what the server
// will do at its key moment, before it happens; the mistake chapters ask
// before the mistake shows and again after the fix. Each choice says
// which event of the server shows it (the answer's status, a replay, the
// charges the order or the key has by then): the first event after the
// vote closes that shows one of the choices grades the question. So the
// right answer is what the server did this time, never a line of a
// script; where a race can go either way, it is the way it went.

// Question is one question of a chapter, with its choices.
type Question struct {
	// When tells the presenter at which point of the chapter to ask.
	When    string   `json:"when"`
	Text    string   `json:"text"`
	Choices []Choice `json:"choices"`
}

// Choice is one possible answer, and the event that shows it happened.
type Choice struct {
	Text  string             `json:"text"`
	Shows func(*seeing) bool `json:"-"`
}

// The outcomes the questions' choices are made of, each read from one
// event and what the narration remembers of the events before it.
var (
	chargedAgain = func(w *seeing) bool {
		return w.is(live.Charged) && (w.orderCharges() >= 2 || w.keyCharges() >= 2)
	}
	chargedFirst = func(w *seeing) bool { return w.is(live.Charged) && w.orderCharges() == 1 && w.keyCharges() <= 1 }
	replayed201  = func(w *seeing) bool { return w.is(live.Replayed) && w.e.Status == http.StatusCreated }
	replayed500  = func(w *seeing) bool {
		return w.is(live.Replayed) && w.e.Status == http.StatusInternalServerError
	}
	conflict = func(w *seeing) bool { return w.is(live.Conflict) }
	mismatch = func(w *seeing) bool { return w.is(live.Mismatch) }
	// refusedOnce: every request of the key has been answered, the key
	// has one charge, and the others were refused (409, a replay, or the
	// 500 of an INSERT the constraint stopped). Until the last request of
	// a burst is answered, one charge so far says nothing: a request
	// still running may charge again.
	refusedOnce = func(w *seeing) bool {
		return answers(w.e) && w.keyDone() && w.keyCharges() == 1 && w.keyEvents(refusedKind) > 0
	}
	// burstDone: the event answers the last request of its key still
	// running, so what the key's books hold now is the burst's outcome.
	burstDone    = func(w *seeing) bool { return answers(w.e) && w.keyDone() }
	lookedUpPaid = func(w *seeing) bool { return w.is(live.LookedUp) && w.e.Charge != "" && w.orderCharges() == 1 }
)

// questions are the chapters' questions, by slug: Build puts each list
// beside its chapter's steps (Chapter.Ask).
var questions = map[string][]Question{
	"connection-never-happens": {{
		When: "After the first Pay, once the fault is off.",
		Text: "The first Pay got no answer at all. The phone pays again with the same key. What happens?",
		Choices: []Choice{
			{Text: "It is charged once: the first try left nothing behind.", Shows: chargedFirst},
			{Text: "A 409: the key is still in use.", Shows: conflict},
			{Text: "The first try's answer is sent again.", Shows: func(w *seeing) bool { return w.is(live.Replayed) }},
			{Text: "A second charge for the order.", Shows: chargedAgain},
		},
	}},
	"fails-halfway": {{
		When: "After the first Pay, before the second.",
		Text: "The gateway took the money, then our database rolled back and answered 500. The phone pays again at once with the same key. What does it get?",
		Choices: []Choice{
			{Text: "A new charge: the key was rolled back too.", Shows: chargedAgain},
			{Text: "A 409: the key stays started until someone finds out.", Shows: conflict},
			{Text: "The saved 500 again.", Shows: replayed500},
			{Text: "The saved 201.", Shows: replayed201},
		},
	}},
	"response-lost": {{
		When: "Before Pay.",
		Text: "The response was lost. The phone pays again with the same key. What will it get?",
		Choices: []Choice{
			{Text: "A new 201 and a second charge.", Shows: chargedAgain},
			{Text: "The saved 201, one charge.", Shows: func(w *seeing) bool { return w.replayAfterLost() && w.orderCharges() == 1 }},
			{Text: "A 409.", Shows: conflict},
			{Text: "A 422.", Shows: mismatch},
		},
	}},
	"crash-midway": {{
		When: "After the first Pay, before the second.",
		Text: "The server stopped right after the gateway charged, before it saved anything. The phone pays again with the same key. What does it get?",
		Choices: []Choice{
			{Text: "A new charge: nothing was saved.", Shows: chargedAgain},
			{Text: "A 409: the key stays started.", Shows: conflict},
			{Text: "The saved 201.", Shows: replayed201},
		},
	}},
	"no-key": {
		{
			When:    "Before the double-click.",
			Text:    "The server ignores the key and the first click takes 800 ms. Double-click Pay: what happens?",
			Choices: noKeyChoices,
		},
		{
			When:    "After “Put the key back”, before the new order's double-click.",
			Text:    "The key is back. New order, double-click again: what happens?",
			Choices: noKeyChoices,
		},
	},
	"new-key-per-retry": {
		{
			When:    "Before Pay.",
			Text:    "The response is lost, and the page makes a new key for each retry. What happens to the order?",
			Choices: newKeyChoices,
		},
		{
			When:    "After “Keep one key per order”, before the new order's Pay.",
			Text:    "One key per order now, and the response is still lost. What does the retry get?",
			Choices: newKeyChoices,
		},
	},
	"check-then-insert": {
		{
			When:    "Before the first burst.",
			Text:    "Ten requests at once with one key, to a server that looks the key up before it inserts it, into tables with no constraints. How many charges?",
			Choices: burstChoices,
		},
		{
			When:    "After “Put the constraints back”, before the second burst.",
			Text:    "The same burst, with the primary key back on the key table. How many charges?",
			Choices: burstChoices,
		},
	},
	"lock-in-memory": {
		{
			When:    "Before the double-click on one server.",
			Text:    "One server locks the key in its own memory. Double-click Pay: what happens?",
			Choices: lockChoices,
		},
		{
			When:    "On three servers, before the double-click.",
			Text:    "Three servers behind one address, each with its own lock. Double-click Pay: what happens?",
			Choices: lockChoices,
		},
		{
			When:    "After “Let the database decide”, before the burst.",
			Text:    "The database decides now. Ten at once with one key: what happens?",
			Choices: lockChoices,
		},
	},
	"retry-every-4xx": {
		{
			When:    "After the first Pay, before “Pay again with another amount”.",
			Text:    "The same key, another amount. What does the server answer?",
			Choices: amountChoices,
		},
		{
			When:    "After “Retry only what can change”, before the new order's second amount.",
			Text:    "4xx are no longer retried. The same key, another amount: what does the server answer?",
			Choices: amountChoices,
		},
	},
	"new-key-after-500": {
		{
			When: "Before Pay.",
			Text: "The server charges, then fails with a 500; the page pays again under a new key. What happens to the order?",
			Choices: []Choice{
				{Text: "Charged twice.", Shows: chargedAgain},
				{Text: "The saved 500 again, one charge.", Shows: replayed500},
				{Text: "A 409.", Shows: conflict},
			},
		},
		{
			When: "After “Switch the mistake off”, before the new order's Pay.",
			Text: "After the 500 the page now looks the order up instead. What does it find?",
			Choices: []Choice{
				{Text: "The order paid, once.", Shows: lookedUpPaid},
				{Text: "The order not paid.", Shows: func(w *seeing) bool { return w.is(live.LookedUp) && w.e.Charge == "" }},
				{Text: "The order charged twice.", Shows: chargedAgain},
			},
		},
	},
	"personal-data-key": {
		{
			When: "After the first order's Pay, before “New order”.",
			Text: "The key is the customer's e-mail address. The same customer pays a second order: what does it get?",
			Choices: []Choice{
				{Text: "A new charge for the new order.", Shows: func(w *seeing) bool { return w.is(live.Charged) && w.keyCharges() >= 2 }},
				{Text: "A 422: that key already belongs to the first order.", Shows: mismatch},
				{Text: "The first order's 201.", Shows: func(w *seeing) bool { return w.is(live.Replayed) }},
			},
		},
		{
			When: "After “Use a random key”, before the new order's Pay.",
			Text: "Every order now gets a random key of its own. The same customer pays another order: what does it get?",
			Choices: []Choice{
				{Text: "A charge for the new order, under its own key.", Shows: func(w *seeing) bool {
					return w.is(live.Charged) && !w.personalKey() && w.keyCharges() <= 1
				}},
				{Text: "A 422: the customer's key already belongs to an order.", Shows: mismatch},
				{Text: "The first order's 201.", Shows: func(w *seeing) bool { return w.is(live.Replayed) }},
			},
		},
	},
	"prune-too-soon": {
		{
			When:    "After the warp and prune, before the late retry.",
			Text:    "The key was pruned after a minute. A late retry with the same key: what happens?",
			Choices: pruneChoices,
		},
		{
			When:    "After “Keep keys 24 hours”, the warp and prune, before the late retry.",
			Text:    "Keys are kept 24 hours now. The same late retry: what happens?",
			Choices: pruneChoices,
		},
	},
}

var (
	noKeyChoices = []Choice{
		{Text: "Two charges for one order.", Shows: chargedAgain},
		{Text: "One charge; the second click gets 409.", Shows: conflict},
		{Text: "One charge; the second click gets the saved 201.", Shows: replayed201},
	}
	newKeyChoices = []Choice{
		{Text: "Charged again at every retry.", Shows: chargedAgain},
		{Text: "The saved 201, one charge.", Shows: func(w *seeing) bool { return w.replayAfterLost() && w.orderCharges() == 1 }},
		{Text: "A 409.", Shows: conflict},
	}
	burstChoices = []Choice{
		{Text: "Several charges for the one key.", Shows: chargedAgain},
		{Text: "One charge; the others are refused (500, 409 or a replay).", Shows: refusedOnce},
	}
	// The lock's questions are graded once every request of the key has
	// been answered, on what the books then hold: the first replay or 409
	// says nothing while a request on another server may still charge.
	lockChoices = []Choice{
		{Text: "Two charges or more for the one key.", Shows: func(w *seeing) bool { return burstDone(w) && w.keyCharges() >= 2 }},
		{Text: "One charge; every other request waits, then gets the saved 201.", Shows: func(w *seeing) bool {
			return burstDone(w) && w.keyCharges() == 1 && w.keyEvents(live.Replayed) > 0 && w.keyEvents(live.Conflict) == 0
		}},
		{Text: "One charge; another request gets 409.", Shows: func(w *seeing) bool {
			return burstDone(w) && w.keyCharges() == 1 && w.keyEvents(live.Conflict) > 0
		}},
	}
	amountChoices = []Choice{
		{Text: "A 201: a new payment for the new amount.", Shows: chargedAgain},
		{Text: "The saved 201 of the first amount.", Shows: replayed201},
		{Text: "A 422: the key belongs to another request.", Shows: mismatch},
		{Text: "A 409.", Shows: conflict},
	}
	pruneChoices = []Choice{
		{Text: "A second charge: the server has forgotten the key.", Shows: chargedAgain},
		{Text: "The saved 201, one charge.", Shows: replayed201},
		{Text: "A 409.", Shows: conflict},
		{Text: "A 422.", Shows: mismatch},
	}
)

// grade is the choice of q that the event w shows, and what the server
// did in its words; -1 when the event shows none.
func (q Question) grade(w *seeing) (int, string) {
	for i, c := range q.Choices {
		if c.Shows(w) {
			return i, said(w)
		}
	}
	return -1, ""
}

// said is what the server did at w, as the books and the event say it:
// the answer (its status, a replay or a refusal) and the charges the
// order and the key had at that moment. The words name the moment: the
// board shows the order's charges as they are now beside it, and a burst
// that goes on charging after the event that answered the vote would
// otherwise read as the board contradicting itself (2 here, 5 there).
func said(w *seeing) string {
	what := ""
	switch w.e.Kind {
	case live.Charged:
		what = "charged the gateway"
	case live.Replayed:
		what = fmt.Sprintf("replayed the saved %d (Idempotent-Replayed: true)", w.e.Status)
	case live.Conflict:
		what = "answered 409: the key's first request is still running"
	case live.Mismatch:
		what = "answered 422: the key belongs to another request"
	case live.LookedUp:
		what = "answered the order's look-up"
	case live.Claimed:
		what = "claimed the key: its row is started"
	case live.GatewayCall:
		what = "called the gateway with the key"
	case step.KindHeld:
		what = "went on, and step mode holds it at " + pay.Truncate(w.e.Message, 40)
	case live.GatewayReply:
		what = fmt.Sprintf("heard from the gateway: %d, %s", w.e.Status, pay.Truncate(w.e.Message, 80))
	case live.Released:
		what = "released the key: nothing charged"
	case live.Dropped:
		what = "dropped the connection before any claim"
	case live.Crashed:
		what = "stopped right after the gateway call, the key left started"
	case live.RolledBack:
		what = "rolled the save back halfway"
	case live.Completed:
		what = fmt.Sprintf("saved the answer %d on the key", w.e.Status)
	default:
		what = fmt.Sprintf("answered %d", w.e.Status)
	}
	order := w.orderCharges()
	return fmt.Sprintf("The server %s; at that moment the books held %d %s for the order, %d for the key.", what, order, chargesWord(order), w.keyCharges())
}

func chargesWord(n int) string {
	if n == 1 {
		return "charge"
	}
	return "charges"
}

// labNote is the lab's explanation of a request's step (web's labKind):
// the lab's handlers say with it that the key table's constraint refused
// an INSERT, with the 500 the request got.
const labNote live.Kind = "lab"

// PollKind is the event that the class's vote changed (opened, answered,
// closed, graded, revealed): the pages ask for the vote again, and the
// timeline's export keeps what the vote stood at.
const PollKind live.Kind = "poll"

// pollGrade is the outcome an event showed for the room's vote.
type pollGrade struct {
	poll    uint64
	outcome room.PollOutcome
}

// gradeOf is the grade event w gives the vote p of the chapter narrated,
// nil when p is not this chapter's, still open, already graded, or when
// the event shows none of the choices. n.mu is held.
func (n *Narrator) gradeOf(p *room.Poll, w *seeing, row string) *pollGrade {
	if p == nil || p.Phase == room.PollOpen || p.Outcome != nil || p.Lesson != n.slug || p.Runs != n.runs {
		return nil
	}
	var q Question
	switch {
	case p.Request != "":
		// Step mode's question is about one request: its own next step
		// grades it, never another request's.
		sq, ok := StepQuestion(p.At)
		if !ok || w.e.Request != p.Request {
			return nil
		}
		q = sq
	case p.Question >= 0 && p.Question < len(n.ask):
		q = n.ask[p.Question]
	default:
		return nil
	}
	choice, words := q.grade(w)
	if choice < 0 {
		return nil
	}
	return &pollGrade{poll: p.ID, outcome: room.PollOutcome{Choice: choice, Row: row, Said: words}}
}

// errGraded is an edit of the room that found the vote graded already,
// or replaced: it changes nothing.
var errGraded = errors.New("the vote is graded already")

// grade records g in the room, unless the vote was graded already (by
// another server's narrator that saw the same event, say) or replaced.
// When the room cannot be written (its database is away), the vote stays
// ungraded and the board keeps saying the server has not shown the
// outcome: the next event that shows one grades it.
func (n *Narrator) grade(ctx context.Context, g pollGrade) {
	_, _, _ = n.room.Change(ctx, func(s *room.State) error {
		if !s.GradePoll(g.poll, g.outcome) {
			return errGraded
		}
		return nil
	})
}
