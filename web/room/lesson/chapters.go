package lesson

import (
	"net/http"
	"strconv"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// chapters are the lessons, in their order, as a table: a new chapter is
// one more entry (its "Watch for" items name the events that tick them,
// narration.go). The sweep chapters' "warp-sweep" buttons get their
// argument from Build.
var chapters = Book{
	{
		Slug: "connection-never-happens", Title: "The connection never happens", Part: partFailures,
		Faults:   pay.Faults{Server: pay.ServerFaults{ConnectionNeverHappens: true}},
		Lab:      labWith(nil),
		SwitchOn: []string{"Connection never happens: the server drops every payment before it reads a byte."},
		Do:       []string{"Press Pay once.", "Press “Turn the fault off”.", "Press Pay again: same order, same key."},
		StudentDo: []string{"Press Pay once.", "Wait for the presenter to turn the fault off.",
			"Press Pay again: same order, same key."},
		Watch: []watchFor{
			{"The first row ends in a cross: no key row, no charge.", func(w *seeing) bool { return w.is(live.Dropped) }},
			{"The second try claims the key and charges once.", func(w *seeing) bool { return w.seen(0) && w.is(live.Charged) }},
			{"On the checkout card the first failure is only “no response”.", func(w *seeing) bool { return w.is(live.Dropped) }},
		},
		Why: "Nothing reached the server, so there is nothing to undo and nothing to remember: trying again is harmless. " +
			"But all the browser knows is that no answer came, and a lost response (chapter 3) looks exactly the same. " +
			"So the client always retries with the same key, and the server is the one that remembers.",
		Actions: []Action{{ID: "faults-off", Label: "Turn the fault off", Presenter: true}},
	},
	{
		Slug: "fails-halfway", Title: "It fails halfway", Part: partFailures,
		Faults:   pay.Faults{Server: pay.ServerFaults{FailHalfway: true}},
		Lab:      labWith(nil),
		SwitchOn: []string{"Fails halfway: the transaction that records the charge rolls back after the gateway has taken the money."},
		Do: []string{"Press Pay once.", "Press Pay again: the key is still started.",
			"Press “Warp past the lock timeout and sweep”.", "Press Pay again."},
		StudentDo: []string{"Press Pay once.", "Press Pay again: the key is still started.",
			"Wait while the presenter warps the clock past the lock timeout and sweeps.", "Press Pay again."},
		Watch: []watchFor{
			{"A 500 that is not saved, and a key row left started; the second Pay gets 409.", func(w *seeing) bool { return w.is(live.Conflict) && w.keyEvents(live.RolledBack) > 0 }},
			{"The sweeper asks the gateway, finds the charge, records it and marks the key done.", func(w *seeing) bool { return w.is(live.Swept) && w.e.Sweep == live.SweepCharged }},
			{"The last Pay is a replay of that 201: one charge in all.", func(w *seeing) bool {
				return w.seen(1) && w.is(live.Replayed) && w.e.Status == http.StatusCreated && w.orderCharges() == 1
			}},
		},
		Why: "Here the answer to “may I retry?” hangs on what the failure left behind. Our database rolled back, but the gateway had already charged, " +
			"so the outcome is unknown to us. Keeping the key started (409 to every retry) until the sweeper has asked the gateway " +
			"turns the unknown into a fact before anyone can pay again.",
		Actions: []Action{{ID: "warp-sweep", Label: "Warp past the lock timeout and sweep", Presenter: true}},
	},
	{
		Slug: "response-lost", Title: "It succeeds, but the response is lost", Part: partFailures,
		Faults: pay.Faults{Server: pay.ServerFaults{ResponseLost: true}},
		Lab:    labWith(nil), Retry: true,
		SwitchOn: []string{"Response lost: the charge commits, then the connection closes with no answer.",
			"Retry automatically, on every page."},
		Do: []string{"Press Pay once, and wait."},
		Watch: []watchFor{
			{"“201 never arrives” on the first row.", func(w *seeing) bool { return w.is(live.ResponseLost) }},
			{"The page waits a random moment, sends the same key again and gets the saved 201 back (replayed).", func(w *seeing) bool { return w.replayAfterLost() }},
			{"One charge.", func(w *seeing) bool { return w.replayAfterLost() && w.orderCharges() == 1 }},
		},
		Why: "Of the three, this one costs money: the charge went through, and nothing tells the client so. " +
			"Its retry is safe only because it carries the same key, so the server answers from the key row instead of charging again.",
	},
	{
		Slug: "crash-midway", Title: "The server crashes midway", Part: partFailures,
		Faults:   pay.Faults{Server: pay.ServerFaults{CrashMidway: true}},
		Lab:      labWith(nil),
		SwitchOn: []string{"Crash midway: the server stops right after the gateway charged, before it records anything or answers."},
		Do: []string{"Press Pay once.", "Press Pay again: the key is still started.",
			"Press “Warp past the lock timeout and sweep”.", "Press Pay again."},
		StudentDo: []string{"Press Pay once.", "Press Pay again: the key is still started.",
			"Wait while the presenter warps the clock past the lock timeout and sweeps.", "Press Pay again."},
		Watch: []watchFor{
			{"The first row stops after the gateway: no answer, the key left started; the second Pay gets 409.", func(w *seeing) bool {
				return w.is(live.Conflict) && w.keyEvents(live.Crashed) > 0
			}},
			{"The sweeper asks the gateway, finds the charge, records it and marks the key done.", func(w *seeing) bool { return w.is(live.Swept) && w.e.Sweep == live.SweepCharged }},
			{"The last Pay is a replay of that 201: one charge in all.", func(w *seeing) bool {
				return w.seen(1) && w.is(live.Replayed) && w.e.Status == http.StatusCreated && w.orderCharges() == 1
			}},
		},
		Why: "Nobody is left to finish a request whose server stopped: its key stays started, so every retry gets 409 instead of a second charge. " +
			"Only the sweeper can close it, once the key is older than the lock timeout: it asks the gateway whether a charge with that key exists, " +
			"and saves the answer, so the next retry is answered from the key.",
		Actions: []Action{{ID: "warp-sweep", Label: "Warp past the lock timeout and sweep", Presenter: true}},
	},
	{
		Slug: "no-key", Title: "Mistake: no idempotency key", Part: partMistakes, Race: true,
		Puzzle: "Step mode holds requests of one order. You are the scheduler: choose which held request goes on next, " +
			"until the order is charged twice. With no key read, each request goes to the gateway on its own. " +
			"Is there an order of steps that charges it only once?",
		Faults: pay.Faults{Server: pay.ServerFaults{DelayMS: 800}},
		Lab:    labWith(func(l *room.LabSettings) { l.Server.Mode = room.LabNoKey }),
		SwitchOn: []string{"Lab: the server ignores the key and executes every request.",
			"A delay of 800 ms, so the second click arrives while the first is still running."},
		Do:        []string{"Double-click Pay.", "“Put the key back”, New order, double-click again."},
		StudentDo: []string{"Double-click Pay.", "Once the key is back: New order, double-click again."},
		Watch: []watchFor{
			{"Two rows, two trips to the gateway, two charges for one order, in red.", func(w *seeing) bool { return w.twice() }},
			{"The lab's first card counts the order charged twice.", func(w *seeing) bool { return w.twice() }},
			{"Key back: the second click gets 409 or a replay.", func(w *seeing) bool {
				return w.seen(0) && (w.is(live.Conflict) || w.is(live.Replayed))
			}},
		},
		Actions: []Action{{ID: "lab-patch", Arg: labPatchArg(map[string]any{"server": map[string]any{"mode": room.LabCorrect}}), Label: "Put the key back", Presenter: true}},
		Why: "Without a key the server cannot tell a second click from a second purchase, so it does what it is asked, twice. " +
			"Disabling the button would stop this one case, but not a retry after a lost response.",
	},
	{
		Slug: "new-key-per-retry", Title: "Mistake: a new key on every retry", Part: partMistakes,
		Faults: pay.Faults{Server: pay.ServerFaults{ResponseLost: true}},
		Lab:    labWith(func(l *room.LabSettings) { l.Client.NewKeyPerRetry = true }), Retry: true,
		SwitchOn: []string{"Lab: every browser makes a new key for each retry.", "Response lost."},
		Do:       []string{"Press Pay once, and wait for the retries to end.", "“Keep one key per order”, New order, Pay again."},
		StudentDo: []string{"Press Pay once, and wait for the retries to end.",
			"Once there is one key per order: New order, Pay again."},
		Watch: []watchFor{
			{"The key on the checkout card changes with every retry.", func(w *seeing) bool { return w.is(live.Received) && w.orderKeys() >= 2 }},
			{"Every attempt is charged: the same order again and again, in red.", func(w *seeing) bool { return w.twice() }},
			{"One key per order: the retry gets the saved 201 back.", func(w *seeing) bool {
				return w.seen(1) && w.replayAfterLost()
			}},
		},
		Actions: []Action{{ID: "lab-patch", Arg: labPatchArg(map[string]any{"client": map[string]any{"new_key_per_retry": false}}),
			Label: "Keep one key per order", Presenter: true}},
		Why: "A retry under a new key is a new payment as far as the server can tell: nothing links the two. " +
			"The key belongs to the action: made once, when the customer starts paying, and kept until it is settled.",
	},
	{
		Slug: "check-then-insert", Title: "Mistake: check first, then insert", Part: partMistakes, Race: true,
		Puzzle: "Step mode holds requests of one order. You are the scheduler: choose which held request goes on next, " +
			"until the order is charged twice. Each request looks its key up, then inserts it.",
		Lab:      labWith(func(l *room.LabSettings) { l.Server.Mode = room.LabCheckThenInsert }),
		SwitchOn: []string{"Lab: the server looks for the key with a SELECT, waits 200 ms, then INSERTs it, into tables with no constraints."},
		Do: []string{"Press “Send 10 at once with one key”.",
			"Press “Put the constraints back”, then send 10 again."},
		StudentDo: []string{"Press “Send 10 at once with one key”.",
			"Once the presenter has put the constraints back, send 10 again."},
		Watch: []watchFor{
			{"First burst: several charges for one key.", func(w *seeing) bool { return w.is(live.Charged) && w.keyCharges() == 2 }},
			{"Second burst: one charge; the others get a 500 (the key could not be inserted twice) or, once the row is there, a 409 or a replay.", func(w *seeing) bool {
				// Without the constraints a burst whose requests did not
				// overlap is answered the same way: only a burst sent
				// after "Put the constraints back" makes this point.
				return w.seen(0) && w.lab.Server.Mode == room.LabCheckThenInsertConstrained &&
					w.keyCharges() == 1 && (w.is(live.Conflict) || w.is(live.Replayed) || (w.is(live.Rejected) && w.e.Status == http.StatusInternalServerError))
			}},
		},
		Why: "Every request of a burst runs its SELECT before any of them INSERTs, so each one hears “not there”. " +
			"Only the database can decide such a race, and only with a constraint: the primary key admits one INSERT and refuses the rest. " +
			"The check may stay as a shortcut; the constraint is what keeps the money safe.",
		Actions: []Action{
			{ID: "burst", Arg: strconv.Itoa(room.LabBurstSize), Label: "Send 10 at once with one key"},
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"server": map[string]any{"mode": room.LabCheckThenInsertConstrained}}), Label: "Put the constraints back", Presenter: true},
		},
	},
	{
		Slug: "lock-in-memory", Title: "Mistake: a lock in memory", Part: partMistakes, Race: true,
		Puzzle: "Step mode holds requests of one order. You are the scheduler: choose which held request goes on next, " +
			"until the order is charged twice. Each request takes its server's lock, looks its key up, then inserts it. " +
			"On one server, can it be done? And on two?",
		Lab:      labWith(func(l *room.LabSettings) { l.Server.Mode, l.Server.CheckGapMS = room.LabMemoryLock, LockGapMS }),
		SwitchOn: []string{"Lab: the server locks the key in its own memory, looks it up, waits 1 s (room for a double-click), then INSERTs it, into tables with no constraints."},
		Do: []string{"On one server, double-click Pay or send 10 at once with one key.",
			"“Two servers” (on a cluster: paytwice cluster -servers 3), then again.",
			"“Let the database decide”, then send 10 again."},
		StudentDo: []string{"Double-click Pay, or send 10 at once with one key.",
			"Once the presenter has two servers behind the address, do it again.",
			"Once the database decides: send 10 again."},
		Watch: []watchFor{
			{"One server: the second click waits for the lock, then replays the first click's 201. One charge.", func(w *seeing) bool { return w.is(live.Replayed) && w.keyCharges() == 1 }},
			{"Two servers: the two clicks land on two servers, each takes its own lock, and the order is charged twice, in red.", func(w *seeing) bool { return w.is(live.Charged) && w.keyCharges() == 2 }},
			{"The lab's eighth card counts the key charged more than once.", func(w *seeing) bool { return w.is(live.Charged) && w.keyCharges() == 2 }},
			{"The database deciding: one charge, the others 409.", func(w *seeing) bool {
				return (w.seen(0) || w.seen(1)) && w.is(live.Conflict)
			}},
		},
		Why: "A lock only stops the requests that come to it, and this one lives in one server's memory. " +
			"Behind a load balancer the two clicks of one double-click often reach two servers: each finds its own lock free, " +
			"each looks the key up before the other has inserted it, and each charges. " +
			"Only what every server shares can decide the race: the database, with a constraint on the key.",
		Actions: []Action{{ID: "burst", Arg: strconv.Itoa(room.LabBurstSize), Label: "Send 10 at once with one key"},
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"server": map[string]any{"servers": room.MaxLabServers}}), Label: "Two servers", Presenter: true},
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"server": map[string]any{"mode": room.LabCorrect}}), Label: "Let the database decide", Presenter: true}},
	},
	{
		Slug: "retry-every-4xx", Title: "Mistake: retrying every 4xx", Part: partMistakes,
		Lab:      labWith(func(l *room.LabSettings) { l.Client.RetryEvery4xx = true }),
		SwitchOn: []string{"Lab: every browser retries 400 and 422 too."},
		Do: []string{"Press Pay.", "Press “Pay again with another amount” (the same key, a different body).",
			"Press “Retry only what can change”, then New order, Pay, and “Pay again with another amount”."},
		StudentDo: []string{"Press Pay.", "Press “Pay again with another amount” (the same key, a different body).",
			"Once the presenter has stopped the retries of 4xx, press New order, Pay, and “Pay again with another amount”."},
		Watch: []watchFor{
			{"422 after 422 in the list of attempts, until the page gives up.", func(w *seeing) bool { return w.is(live.Mismatch) && w.keyEvents(live.Mismatch) >= 2 }},
			{"The lab's fourth card counts the wasted attempts.", func(w *seeing) bool { return w.is(live.Mismatch) && w.keyEvents(live.Mismatch) >= 2 }},
			{"4xx not retried: one 422, at once.", func(w *seeing) bool {
				// Only after "Retry only what can change": before it, the
				// first 422 of another phone's key is one too.
				return w.seen(0) && !w.lab.Client.RetryEvery4xx && w.is(live.Mismatch) && w.keyEvents(live.Mismatch) == 1
			}},
		},
		Why: "A 422 says the key already belongs to another request. Sending the same request again cannot change that, " +
			"so every retry is wasted, and the customer waits for the backoff to run out before hearing what was wrong. " +
			"Only network failures, 409, 429 and 5xx can turn out differently next time.",
		Actions: []Action{{ID: "pay-other-amount", Label: "Pay again with another amount"},
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"client": map[string]any{"retry_every_4xx": false}}), Label: "Retry only what can change", Presenter: true}},
	},
	{
		Slug: "new-key-after-500", Title: "Mistake: a new key after a 500", Part: partMistakes,
		Faults: pay.Faults{Server: pay.ServerFaults{ServerError: true}},
		Lab:    labWith(func(l *room.LabSettings) { l.Client.NewKeyAfter500 = true }),
		SwitchOn: []string{"Server error (500): the server fails after charging, and saves the 500 on the key.",
			"Lab: every browser pays again under a new key after a 500."},
		Do: []string{"Press Pay once.", "Press “Switch the mistake off”, then “New order”, then Pay."},
		StudentDo: []string{"Press Pay once.",
			"Once the presenter has switched the mistake off, press “New order”, then Pay."},
		Watch: []watchFor{
			{"First order: a 500, a new key, another 500, two charges.", func(w *seeing) bool { return w.twice() }},
			{"Second order: a 500, then the page looks the order up and finds it paid. One charge.", func(w *seeing) bool {
				return w.seen(0) && w.is(live.Completed) && w.e.Status == http.StatusInternalServerError && w.order != w.st.twiceOrder && w.orderCharges() == 1
			}},
		},
		Why: "A 500 after the work started does not mean “not charged”; here it means the opposite. " +
			"The same key would only replay the same 500. Looking the order up (GET /v1/payments?order_id=…) settles the question; " +
			"paying under a new key settles it the expensive way.",
		Actions: []Action{
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"client": map[string]any{"new_key_after_500": false}}), Label: "Switch the mistake off", Presenter: true},
			{ID: "new-order", Label: "New order"},
		},
	},
	{
		Slug: "personal-data-key", Title: "Mistake: personal data as the key", Part: partMistakes,
		Lab:      labWith(func(l *room.LabSettings) { l.Client.PersonalDataKey = true }),
		SwitchOn: []string{"Lab: every browser uses the customer's e-mail address as the key."},
		Do: []string{"Press Pay.", "Press “New order”, then Pay.",
			"Press “Use a random key”, then “New order” and Pay: the new order has a key of its own."},
		StudentDo: []string{"Press Pay.", "Press “New order”, then Pay.",
			"Once the presenter uses a random key, press “New order”, then Pay."},
		Watch: []watchFor{
			{"The key table flags the key as personal data.", func(w *seeing) bool { return w.personalKey() && w.is(live.Claimed) }},
			{"The lab's sixth card lists where the address is now kept and shown.", func(w *seeing) bool { return w.personalKey() && w.is(live.Claimed) }},
			{"The second order is refused with a 422: one customer, one key.", func(w *seeing) bool { return w.personalKey() && w.is(live.Mismatch) }},
		},
		Why: "A key should be random: unique to one payment and meaningless to whoever reads it. An e-mail address is neither. " +
			"It ends up in tables, at the gateway, on screens and in exports that were never meant to hold personal data, " +
			"and one address per customer cannot tell that customer's payments apart.",
		Actions: []Action{
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"client": map[string]any{"personal_data_key": false}}), Label: "Use a random key", Presenter: true},
			{ID: "new-order", Label: "New order"},
		},
	},
	{
		Slug: "prune-too-soon", Title: "Mistake: pruning keys sooner than clients retry", Part: partMistakes,
		Lab: labWith(func(l *room.LabSettings) {
			l.Server.Mode, l.Server.RetentionSeconds = room.LabKeyTableOnly, room.LabShortRetentionSeconds
		}),
		SwitchOn: []string{"Lab: the key table is the server's only memory of a payment, and it keeps keys for 1 minute."},
		Do: []string{"Press Pay.", "Press “Warp 2 minutes, then prune”.", "Press Pay again: a late retry with the same key.",
			"Press “Keep keys 24 hours”, then “New order”, and do it all again."},
		StudentDo: []string{"Press Pay.", "Wait for the presenter to warp the clock 2 minutes and prune.",
			"Press Pay again: a late retry with the same key.",
			"Once the presenter keeps keys 24 hours, press “New order” and do it all again."},
		Watch: []watchFor{
			{"The key row disappears with the prune.", func(w *seeing) bool { return w.is(live.Pruned) }},
			{"The late retry is charged as a new payment.", func(w *seeing) bool { return w.st.pruned && w.twice() }},
			{"With keys kept 24 hours the late retry is replayed instead.", func(w *seeing) bool {
				// Only once keys are kept longer: with 1 minute, a retry
				// before the next prune is replayed too.
				return w.seen(1) && w.lab.Server.RetentionSeconds != room.LabShortRetentionSeconds && w.is(live.Replayed)
			}},
		},
		Why: "Retention is a promise to clients: retry within this window and you are safe. A key pruned while a client may still retry breaks it. " +
			"Keep keys longer than any client retries (Stripe keeps them at least 24 hours), publish the window, " +
			"and have clients stop and reconcile once it is over.",
		Actions: []Action{
			{ID: "warp-prune", Arg: strconv.Itoa(room.LabWarpSeconds), Label: "Warp 2 minutes, then prune", Presenter: true},
			{ID: "lab-patch", Arg: labPatchArg(map[string]any{"server": map[string]any{"retention_seconds": room.LabLongRetentionSeconds}}), Label: "Keep keys 24 hours", Presenter: true},
			{ID: "new-order", Label: "New order"},
		},
	},
}
