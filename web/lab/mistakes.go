// Package lab is the common-mistakes lab as a table: one entry per
// mistake, with its name, the server mode or the browsers' switch that
// makes it, what the panel says of it, how it is fixed, the controls its
// card shows, and how its measured outcome reads. The templates draw the
// cards from the table, the checkout page's script reads what it says of
// a storm of one key from it, and the checker names the mistake it met
// from it. Adding a mistake the server or the browsers already know how
// to make is one entry here and its case in the table's test.
package lab

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"paytwice/web/room"
)

// Mistake is one common mistake.
type Mistake struct {
	// N is its number on the page (the article's list, then the lock in
	// memory); Name its name in the API (the field of Outcomes).
	N    int
	Name string
	// Title heads its card.
	Title string
	// Modes are the server modes that make it, each with what the
	// panel's summary says while it is on; a client mistake has none.
	Modes []Mode
	// Client is the browsers' switch that makes it (a field of
	// room.LabClient, as JSON names it), with Summary what the panel's
	// summary says while it is on; "" for a server mistake.
	Client, Summary string
	// Why says what goes wrong; Try how to see it; Fix what to do instead.
	Why, Try, Fix string
	// Controls are the presenter's switches on its card; Extras the
	// buttons and inputs any student may use.
	Controls, Extras []Control
	// Outcome reads what the lab measured for it.
	Outcome func(Outcomes) Outcome
}

// Mode is a server mode that makes a mistake.
type Mode struct {
	Mode room.LabMode
	// Summary is the panel's badge while the mode is on; {retention} is
	// how long the lab keeps keys.
	Summary string
	// Storm is what a checkout card says when one key was charged more
	// than once in this mode ("" when the mode cannot do it).
	Storm string
}

// ControlKind is a kind of control a card shows.
type ControlKind int

// The controls.
const (
	// ModeBox is a checkbox that turns a server mode on (Mode).
	ModeBox ControlKind = iota + 1
	// ClientBox is a checkbox that sets the browsers' switch Field.
	ClientBox
	// Select chooses among Options the value of Field.
	Select
	// GapSelect chooses the pause between the check and the insert.
	GapSelect
	// RetentionSelect chooses how long the lab keeps keys.
	RetentionSelect
	// Burst sends a burst of requests with one key; Result shows it.
	Burst
	// SendNoKey sends one payment without a key; Result shows it.
	SendNoKey
	// Email is the customer's address that the personal-data key uses.
	Email
	// WarpPrune warps the clock and prunes; Result shows it.
	WarpPrune
)

// Control is one control of a card.
type Control struct {
	Kind    ControlKind
	ID      string
	Label   string
	Mode    room.LabMode // ModeBox
	Field   string       // ClientBox, Select: the field of the lab's settings, "client.new_key_per_retry"
	Options []Option     // Select
	Result  string       // Burst, SendNoKey, WarpPrune: the id of the paragraph that shows the result
}

// Option is one choice of a Select.
type Option struct {
	Value, Label string
}

// DefaultEmail is the customer whose address the personal-data mistake
// uses until a learner types another.
const DefaultEmail = "somchai.j@example.com"

// Mistakes are the lab's mistakes, in the page's order.
var Mistakes = []Mistake{
	{
		N: 1, Name: "no_key", Title: "No idempotency key at all",
		Modes: []Mode{{Mode: room.LabNoKey, Summary: "1 no key",
			Storm: " Every request carried the same key, but this server ignores keys, so it ran each one."}},
		Why:      "The server treats every request as a new payment: it reads no key, looks nothing up and remembers nothing. A double-click is two payments, and so is every retry after a lost response. In this mode each charge is filed under a reference of its own request (it shows as lab no-key …), so the UNIQUE constraint on the charges table has nothing to catch.",
		Try:      "set a delay of 800 ms in the fault switches, then double-click Pay.",
		Fix:      "Require an Idempotency-Key on every payment and answer 400 without one.",
		Controls: []Control{{Kind: ModeBox, ID: "lab-nokey", Mode: room.LabNoKey, Label: "The server ignores the key and executes every request"}},
		Extras:   []Control{{Kind: SendNoKey, ID: "send-no-key", Label: "Send a payment with no Idempotency-Key header", Result: "lab-nokey-result"}},
		Outcome: func(o Outcomes) Outcome {
			nk := o.NoKey
			return Outcome{N: nk.ChargedTwice, Unit: plural(nk.ChargedTwice, "order charged more than once", "orders charged more than once"),
				Tone: money(nk.ChargedTwice, nk.Charges), Extra: nk.ExtraCharges,
				Lines: append([]string{fmt.Sprintf("%d %s made without a key, %d of them extra.", nk.Charges, plural(nk.Charges, "charge", "charges"), nk.ExtraCharges)},
					list("Charged twice: ", nk.Twice)...)}
		},
	},
	{
		N: 2, Name: "new_key_per_retry", Title: "A new key on every retry",
		Client: "new_key_per_retry", Summary: "2 new key per retry",
		Why:      "The client retries, but makes a fresh key for every attempt. To the server each attempt is a different action, so the retry after a lost response is simply a second payment, and the key might as well not exist. Make the key when the customer starts paying, keep it (in storage, if a retry can outlive the page) and send that same key every time.",
		Try:      "turn on Response lost in the fault switches and press Pay once: the page retries by itself.",
		Fix:      "Make the key once per payment, keep it, and send it on every retry.",
		Controls: []Control{{Kind: ClientBox, ID: "lab-newkey-retry", Field: "client.new_key_per_retry", Label: "Every browser retries by itself, with a new key for each attempt"}},
		Outcome: func(o Outcomes) Outcome {
			nr := o.NewKeyPerRetry
			return Outcome{N: nr.ChargedTwice, Unit: plural(nr.ChargedTwice, "order paid under more than one key", "orders paid under more than one key"),
				Tone: money(nr.ChargedTwice, nr.Charges), Extra: nr.ExtraCharges,
				Lines: append([]string{fmt.Sprintf("%d extra %s: each new key looked like a new payment to the server.", nr.ExtraCharges, plural(nr.ExtraCharges, "charge", "charges"))},
					list("Charged twice: ", nr.Twice)...)}
		},
	},
	{
		N: 3, Name: "check_then_insert", Title: "Check first, then insert",
		Modes: []Mode{
			{Mode: room.LabCheckThenInsert, Summary: "3 check first, no constraints",
				Storm: " Every request carried the same key, but each looked the key up before any had written it, and nothing in the table refused the second insert."},
			{Mode: room.LabCheckThenInsertConstrained, Summary: "3 check first, constraints back"},
		},
		Why: "The server asks the database whether the key exists (a SELECT on a read connection), and inserts it a moment later if not. Requests that arrive together all hear \"not there\" and all go ahead. With no constraint on the tables, each one charges. Put the constraints back and the same code loses the same race, but the database refuses every second INSERT: the losers get an error and nobody is charged twice. The constraint saves the money; the check only saves time.",
		Try: "choose “no constraints” and send a burst; then choose “constraints back” and send another.",
		Fix: "Claim the key with one INSERT … ON CONFLICT DO NOTHING on a table whose primary key is the key.",
		Controls: []Control{
			{Kind: Select, ID: "lab-check", Field: "server.mode", Label: "How the server claims the key", Options: []Option{
				{room.LabCorrect, "INSERT … ON CONFLICT (right)"},
				{room.LabCheckThenInsert, "SELECT first, no constraints"},
				{room.LabCheckThenInsertConstrained, "SELECT first, constraints back"}}},
			{Kind: GapSelect, ID: "lab-gap"},
		},
		Extras: []Control{{Kind: Burst, ID: "burst", Result: "lab-burst-result"}},
		Outcome: func(o Outcomes) Outcome {
			ct := o.CheckThenInsert
			tone := money(ct.ChargedTwice, ct.Charges)
			if ct.ChargedTwice == 0 && ct.ConstraintRefusals > 0 {
				tone = OK
			}
			return Outcome{N: ct.ChargedTwice, Unit: plural(ct.ChargedTwice, "key charged more than once (no constraints)", "keys charged more than once (no constraints)"),
				Tone: tone, Extra: ct.ExtraCharges,
				Lines: append([]string{
					fmt.Sprintf("No constraints: %d key %s and %d %s in the unguarded tables.", ct.KeyRows, plural(ct.KeyRows, "row", "rows"), ct.Charges, plural(ct.Charges, "charge", "charges")),
					fmt.Sprintf("Constraints back: the primary key refused %d %s of a key already taken: each one a charge that did not happen.", ct.ConstraintRefusals, plural(int(ct.ConstraintRefusals), "INSERT", "INSERTs")),
				}, list("Charged more than once: ", ct.Twice)...)}
		},
	},
	{
		N: 4, Name: "retry_every_4xx", Title: "Retrying every 4xx",
		Client: "retry_every_4xx", Summary: "4 retry every 4xx",
		Why:      "A 400 (the request is malformed) or a 422 (this key belongs to a different request) is the same answer however often it is sent: nothing about the request changes between attempts. Retrying it burns the retry budget and the server's time, and keeps the customer waiting for a message that was ready the first time. Only network failures, 409, 429 and 5xx deserve another try.",
		Try:      "pay, change the amount, and pay again with the same key: the 422 is retried until the page gives up.",
		Fix:      "Retry network failures, 409, 429 and 5xx only; show a 400 or 422 at once.",
		Controls: []Control{{Kind: ClientBox, ID: "lab-retry-4xx", Field: "client.retry_every_4xx", Label: "Every browser retries 400 and 422 too, until it gives up"}},
		Outcome: func(o Outcomes) Outcome {
			rf := o.RetryEvery4xx
			tone := Mute
			if rf.WastedAttempts > 0 {
				tone = Bad
			} else if rf.Refusals > 0 {
				tone = OK
			}
			return Outcome{N: int(rf.WastedAttempts), Unit: plural(int(rf.WastedAttempts), "wasted attempt", "wasted attempts"), Tone: tone,
				Lines: []string{fmt.Sprintf("%d %s answered 400 or 422; %d of them only repeated an answer the client already had.", rf.Refusals, plural(int(rf.Refusals), "request", "requests"), rf.WastedAttempts)}}
		},
	},
	{
		N: 5, Name: "new_key_after_500", Title: "A new key after a 500",
		Client: "new_key_after_500", Summary: "5 new key after 500",
		Why:      "A 500 says the server failed after it started: money may already have moved. paytwice, like Stripe, saves that 500 on the key, so the same key gets the same 500 back. A client that gives up on the key and pays under a new one pays twice. The right move is to look the order up first (GET /v1/payments?order_id=…): it is already paid.",
		Try:      "turn on Server error (500) in the fault switches and press Pay once. Switch this off, press New order and pay again: the page reconciles instead.",
		Fix:      "After a 500, look the order up before paying under a new key.",
		Controls: []Control{{Kind: ClientBox, ID: "lab-newkey-500", Field: "client.new_key_after_500", Label: "Every browser pays again under a new key after a 500"}},
		Outcome: func(o Outcomes) Outcome {
			a5 := o.NewKeyAfter500
			return Outcome{N: a5.ChargedTwice, Unit: plural(a5.ChargedTwice, "order charged again after a 500", "orders charged again after a 500"),
				Tone: money(a5.ChargedTwice, a5.Charges), Extra: a5.ExtraCharges,
				Lines: append([]string{fmt.Sprintf("%d %s by order (GET /v1/payments?order_id=…): the safe way to learn whether a 500 had charged.", a5.Reconciliations, plural(int(a5.Reconciliations), "look-up", "look-ups"))},
					list("Charged twice: ", a5.Twice)...)}
		},
	},
	{
		N: 6, Name: "personal_data_key", Title: "Personal data as the key",
		Client: "personal_data_key", Summary: "6 e-mail as key",
		Why:      "An e-mail address or a phone number is neither unique per payment nor secret. Used as the key, it is copied wherever keys go: the key table, the charge, the gateway's ledger (another company's records), the timeline on every screen in the room, and every export of it. It also makes the customer's next order collide with this one. The server accepts such a key, as a real one would, and flags it.",
		Try:      "pay, then press New order and pay again: the same e-mail is the same key.",
		Fix:      "Make the key a random UUID, one per payment.",
		Controls: []Control{{Kind: ClientBox, ID: "lab-pii", Field: "client.personal_data_key", Label: "Every browser uses the customer's e-mail address as the key"}},
		Extras:   []Control{{Kind: Email, ID: "lab-email", Label: "The customer's e-mail address"}},
		Outcome: func(o Outcomes) Outcome {
			pd := o.PersonalDataKey
			tone := Mute
			if pd.Keys > 0 {
				tone = Bad
			}
			names := make([]string, 0, len(pd.Stored))
			for k := range pd.Stored {
				names = append(names, k)
			}
			sort.Strings(names)
			var where []string
			for _, k := range names {
				where = append(where, fmt.Sprintf("%s: %d %s", k, pd.Stored[k], plural(pd.Stored[k], "row", "rows")))
			}
			return Outcome{N: pd.Keys, Unit: plural(pd.Keys, "key made of personal data", "keys made of personal data"), Tone: tone,
				Lines: []string{"Stored in the database: " + strings.Join(where, "; ") + ".",
					fmt.Sprintf("Shown on the timeline in %d %s, on every screen in the room, and in every export of it (JSON, CSV).", pd.TimelineEvents, plural(pd.TimelineEvents, "event", "events"))}}
		},
	},
	{
		N: 7, Name: "prune_too_soon", Title: "Pruning keys sooner than clients retry",
		Modes: []Mode{{Mode: room.LabKeyTableOnly, Summary: "7 key table only, keys kept {retention}",
			Storm: " Every request carried the same key, and the server ran it once; then the key was pruned, so a later request with it was a new payment to the server."}},
		Why: "Keys are forgotten after the retention period; after that the same key is a brand-new request. If a client may still be retrying (a phone that was offline for an hour, a queue that redelivers tomorrow), the retry pays again. In this mode the key table is the server's only memory, as in many apps: the charge and the gateway call are not tied to the key. Keep keys longer than your clients retry, and publish the window.",
		Try: "keep keys for 1 minute, pay, warp the clock and prune, then press Pay again (a late retry with the same key). Repeat with 24 hours: the retry is replayed.",
		Fix: "Keep keys longer than any client retries (24 hours or more) and publish the window.",
		Controls: []Control{
			{Kind: ModeBox, ID: "lab-keyonly", Mode: room.LabKeyTableOnly, Label: "The key table is the server's only memory of a payment"},
			{Kind: RetentionSelect, ID: "lab-retention", Field: "server.retention_seconds", Label: "Keep keys for"},
		},
		Extras: []Control{{Kind: WarpPrune, ID: "warp-prune", Result: "lab-warp-result"}},
		Outcome: func(o Outcomes) Outcome {
			pt := o.PruneTooSoon
			return Outcome{N: pt.ChargedTwice, Unit: plural(pt.ChargedTwice, "order charged again after its key was pruned", "orders charged again after their key was pruned"),
				Tone: money(pt.ChargedTwice, pt.Charges), Extra: pt.ExtraCharges,
				Lines: append([]string{fmt.Sprintf("%d %s pruned by the lab (keys kept %s); %d %s made while the key table was the only memory.",
					pt.Pruned, plural(int(pt.Pruned), "key", "keys"), RetentionWords(pt.RetentionSeconds), pt.Charges, plural(pt.Charges, "charge", "charges"))},
					list("Charged again: ", pt.Twice)...)}
		},
	},
	{
		N: 8, Name: "memory_lock", Title: "A lock in memory",
		Modes: []Mode{{Mode: room.LabMemoryLock, Summary: "8 lock in memory",
			Storm: " Every request carried the same key, but each server locks keys in its own memory, so requests on different servers never waited for each other."}},
		Why: "The server fixes mistake 3 with a lock: before it looks the key up it takes a mutex for that key, held in its own memory, and lets go once the charge is saved. On one server that works: a second request with the key waits, then finds the first one's row and replays it. But a real service runs several servers behind a load balancer, on one database, and each has a lock map of its own. The two requests of a double-click land on two servers, each takes its own lock, each finds no row, and the order is charged twice. Only the database sees every server's requests: its constraint is the lock they all share.",
		Try: "switch it on and send a burst: one charge, the others wait and replay. Then choose two servers and send a burst again, or double-click Pay: several charges for one key. On this server's own database (SQLite) the two run inside this process, each with its own memory, behind this address; on a cluster (paytwice cluster -servers 3 on one PostgreSQL) the front door's servers are real.",
		Fix: "Let the database's unique constraint be the lock every server shares.",
		Controls: []Control{
			{Kind: ModeBox, ID: "lab-memlock", Mode: room.LabMemoryLock, Label: "The server locks the key in its own memory, then checks and inserts, with no constraints"},
			{Kind: Select, ID: "lab-servers", Field: "server.servers", Label: "Servers behind this address", Options: []Option{
				{"0", "one server"},
				{"2", "two servers, each with its own memory (inside this process on SQLite)"}}},
			{Kind: GapSelect, ID: "lab-lock-gap"},
		},
		Extras: []Control{{Kind: Burst, ID: "burst", Result: "lab-lock-burst-result"}},
		Outcome: func(o Outcomes) Outcome {
			ml := o.MemoryLock
			lines := []string{fmt.Sprintf("%d %s made under a lock in memory; %d %s waited for this server's lock on a key another request held.",
				ml.Charges, plural(ml.Charges, "charge", "charges"), ml.LockWaits, plural(int(ml.LockWaits), "request", "requests"))}
			if ml.ChargedTwice > 0 {
				lines = append(lines, "A key charged twice had its requests on two servers: each took a lock of its own, and neither saw the other's.")
			}
			return Outcome{N: ml.ChargedTwice, Unit: plural(ml.ChargedTwice, "key charged more than once (lock in memory)", "keys charged more than once (lock in memory)"),
				Tone: money(ml.ChargedTwice, ml.Charges), Extra: ml.ExtraCharges, Lines: append(lines, list("Charged more than once: ", ml.Twice)...)}
		},
	},
}

// ByName finds a mistake by its name.
func ByName(name string) (Mistake, bool) {
	for _, m := range Mistakes {
		if m.Name == name {
			return m, true
		}
	}
	return Mistake{}, false
}

// ByMode finds the mistake a server mode makes; ok is false for the
// correct protocol.
func ByMode(mode room.LabMode) (Mistake, Mode, bool) {
	for _, m := range Mistakes {
		for _, md := range m.Modes {
			if md.Mode == mode {
				return m, md, true
			}
		}
	}
	return Mistake{}, Mode{}, false
}

// On names the mistakes switched on in s, as the panel's summary shows
// them; retention is how long the lab keeps keys, in words.
func On(s room.LabSettings, retention string) []string {
	var on []string
	if _, md, ok := ByMode(s.Server.Mode); ok {
		on = append(on, strings.ReplaceAll(md.Summary, "{retention}", retention))
	}
	client := ClientSwitches(s.Client)
	for _, m := range Mistakes {
		if m.Client != "" && client[m.Client] {
			on = append(on, m.Summary)
		}
	}
	return on
}

// ClientSwitches are the browsers' switches by their JSON names.
func ClientSwitches(c room.LabClient) map[string]bool {
	out := map[string]bool{}
	b, _ := json.Marshal(c)
	_ = json.Unmarshal(b, &out)
	return out
}

// Storms is what a checkout card says, per server mode, when one key was
// charged more than once (the page's script reads it).
func Storms() map[string]string {
	out := map[string]string{}
	for _, m := range Mistakes {
		for _, md := range m.Modes {
			if md.Storm != "" {
				out[md.Mode] = md.Storm
			}
		}
	}
	return out
}

// Read draws every mistake's outcome, by name, and the extra charges of
// them all.
func Read(o Outcomes) (map[string]Outcome, int) {
	out := make(map[string]Outcome, len(Mistakes))
	extra := 0
	for _, m := range Mistakes {
		d := m.Outcome(o)
		out[m.Name] = d
		extra += d.Extra
	}
	return out, extra
}

// RetentionWords is a retention as the panel writes it.
func RetentionWords(sec int64) string {
	switch {
	case sec > 0 && sec%3600 == 0:
		return strconv.FormatInt(sec/3600, 10) + " h"
	case sec > 0 && sec%60 == 0:
		return strconv.FormatInt(sec/60, 10) + " min"
	}
	return strconv.FormatInt(sec, 10) + " s"
}

func money(n int, charges int) Tone {
	switch {
	case n > 0:
		return Bad
	case charges > 0:
		return OK
	}
	return Mute
}

// list names up to six things charged more than once.
func list(prefix string, items []string) []string {
	if len(items) == 0 {
		return nil
	}
	const show = 6
	more := ""
	if len(items) > show {
		more = fmt.Sprintf(" and %d more", len(items)-show)
		items = items[:show]
	}
	return []string{prefix + strings.Join(items, ", ") + more}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// RetentionText is the lab's key retention as the panel writes it; 0 is
// the server's own, def.
func RetentionText(sec int64, def string) string {
	if sec <= 0 {
		return def + " (the server's)"
	}
	return RetentionWords(sec)
}
