package lesson

import (
	"net/http"

	"paytwice/web/live"
	"paytwice/web/room/step"
)

// Step mode's questions: while the presenter holds a request at a
// checkpoint, the board can ask the class what the request's next step
// will do. The question depends only on where the request is held; the
// choices are the steps the protocol can take from there, each shown by
// the request's own next event. So, as for the chapters' questions, the
// right answer is what the request then did, whatever the faults, the
// lab's mistake or the other requests made of it.
//
// A request held at "saved" or "answered" is not asked about: the step
// bar already says what it will answer, so there is nothing to predict.

// stepQuestions are the questions by the name of the checkpoint the
// request is held at (step.Checkpoint's String).
var stepQuestions = map[string]Question{
	"received": {
		When: "Held at “received”: next it tries to claim its key.",
		Text: "This request arrived and was parsed. What will its next step do?",
		Choices: []Choice{
			{Text: "Claim the key: a new row, started.", Shows: func(w *seeing) bool { return w.is(live.Claimed) }},
			{Text: "A 409: another request holds the key, still started.", Shows: conflict},
			{Text: "Replay the answer saved for the key.", Shows: func(w *seeing) bool { return w.is(live.Replayed) }},
			{Text: "A 422: the key was used with another request.", Shows: mismatch},
			{Text: "Drop the connection before any claim.", Shows: func(w *seeing) bool { return w.is(live.Dropped) }},
		},
	},
	"key looked up": {
		When: "Held at “key looked up”: its SELECT found no row; the INSERT is next.",
		Text: "This request looked for its key and found no row. What will its next step do?",
		Choices: []Choice{
			{Text: "Insert its key row and go on: nothing refuses it.", Shows: func(w *seeing) bool { return w.is(live.Claimed) || toGateway(w) }},
			{Text: "Be refused: the key table's primary key stops its INSERT (500).", Shows: func(w *seeing) bool {
				return (w.is(labNote) || w.is(live.Rejected)) && w.e.Status == http.StatusInternalServerError
			}},
		},
	},
	"key claimed": {
		When: "Held at “key claimed”: the key's row is started.",
		Text: "This request holds its key. What will its next step do?",
		Choices: []Choice{
			{Text: "Go on to call the gateway, passing the key on.", Shows: toGateway},
			{Text: "Give the key back: released, nothing charged.", Shows: func(w *seeing) bool { return w.is(live.Released) }},
			{Text: "Fail with an error, saving nothing.", Shows: func(w *seeing) bool { return w.is(live.Rejected) }},
		},
	},
	"before the gateway": {
		When: "Held at “before the gateway”: the call is next.",
		Text: "This request is about to call the gateway. What will come back?",
		Choices: []Choice{
			{Text: "The gateway takes the money (200).", Shows: func(w *seeing) bool {
				return w.is(live.GatewayReply) && w.e.Status == http.StatusOK
			}},
			{Text: "The gateway declines or fails: no money moves.", Shows: func(w *seeing) bool {
				return w.is(live.GatewayReply) && w.e.Status != http.StatusOK && w.e.Status != http.StatusGatewayTimeout
			}},
			{Text: "No answer in time: nobody knows whether the money moved.", Shows: func(w *seeing) bool {
				return w.is(live.GatewayReply) && w.e.Status == http.StatusGatewayTimeout
			}},
			{Text: "Our server stops right after the call.", Shows: func(w *seeing) bool { return w.is(live.Crashed) }},
		},
	},
	"gateway answered": {
		When: "Held at “gateway answered”: the save is next.",
		Text: "The gateway has answered this request. What will its next step do?",
		Choices: []Choice{
			{Text: "Record the charge and save the 201 on the key.", Shows: func(w *seeing) bool { return w.is(live.Charged) }},
			{Text: "Save the gateway's refusal on the key: no charge.", Shows: func(w *seeing) bool {
				return w.is(live.Completed) && w.e.Status >= http.StatusBadRequest
			}},
			{Text: "Fail halfway: the save rolls back.", Shows: func(w *seeing) bool { return w.is(live.RolledBack) }},
		},
	},
}

// toGateway: the request went on to its gateway call. Held "before the
// gateway", it has not called yet (the call's event comes once it goes
// on); let run to the end, the call itself shows it.
func toGateway(w *seeing) bool {
	return w.is(live.GatewayCall) || (w.is(step.KindHeld) && w.e.Message == step.CheckBeforeGateway.String())
}

// StepQuestion is the question to ask about a request held at the
// checkpoint named at; false where step mode asks nothing.
func StepQuestion(at string) (Question, bool) {
	q, ok := stepQuestions[at]
	return q, ok
}
