package pay

import (
	"slices"
	"strings"
	"time"
)

// This file answers "what happened to this order?": the question a shop
// asks after a time-out, a 500 or a dropped connection, before it does
// anything else. The answer is what the books say at that moment, and
// where they do not know yet (a key claimed, its outcome not saved) it
// says so, with when to look again. It never says "not paid" for an order
// whose money may be moving.

// OrderState is what the server knows of one order of one caller.
type OrderState string

// The states of an order, from the most certain to the least.
const (
	// OrderPaid: at least one charge is recorded for the order. Pay
	// nothing more.
	OrderPaid OrderState = "paid"
	// OrderPending: a key for the order is claimed and its outcome is not
	// known yet (its request is running, or stopped before saving and
	// waits for the sweeper). Money may have moved: pay nothing with a
	// new key; look again after the wait given, or retry with the same key.
	OrderPending OrderState = "pending"
	// OrderNotCharged: every attempt the server kept ended without a
	// charge; NotChargedReason says why.
	OrderNotCharged OrderState = "not_charged"
	// OrderNeverSeen: the server keeps nothing of the order: no charge, no
	// key, no release. Sending the request with the key already chosen for
	// it is safe, whether or not an earlier send is still on its way.
	OrderNeverSeen OrderState = "never_seen"
)

// NotChargedReason says why an attempt ended without a charge.
type NotChargedReason string

// The reasons an attempt ends without a charge.
const (
	// ReasonDeclined: the gateway refused the card (a saved 402). The key
	// replays the refusal: pay again only with another card and a new key.
	ReasonDeclined NotChargedReason = "declined"
	// ReasonGatewayFailed: the gateway failed before charging (a saved
	// 502). The key replays the failure: pay again with a new key.
	ReasonGatewayFailed NotChargedReason = "gateway_failed"
	// ReasonValidation: the request was refused after its claim (a saved
	// 4xx, such as a key whose charge is for another order). Correct the
	// request and pay with a new key. (A request refused at parsing, a
	// 400, is never kept: its order reads never_seen.)
	ReasonValidation NotChargedReason = "validation"
	// ReasonReleased: the claim was released with nothing charged, so the
	// same key runs afresh: send the request again with it.
	ReasonReleased NotChargedReason = "released"
	// ReasonAwaitingConfirmation: a payment was created for the order to
	// be confirmed later (a PaymentIntent of the Stripe-shaped sandbox,
	// created with confirm=false, a saved 200), and nothing is charged
	// until it is: confirm it rather than pay again.
	ReasonAwaitingConfirmation NotChargedReason = "awaiting_confirmation"
)

// ReleaseCause says who released a claim, with nothing charged.
type ReleaseCause string

// The causes of a release.
const (
	// ReleasedBeforeWork: the request stopped before any side effect (the
	// gateway was not called, or refused and the refusal was not saved).
	ReleasedBeforeWork ReleaseCause = "interrupted"
	// ReleasedBySweeper: the sweeper asked the gateway about a stuck key
	// and the gateway had not charged it.
	ReleasedBySweeper ReleaseCause = "sweeper"
)

// Valid reports whether c is one of the causes.
func (c ReleaseCause) Valid() bool { return c == ReleasedBeforeWork || c == ReleasedBySweeper }

// ReleasedKey is the trace a released claim leaves: its key row is gone
// (a retry runs afresh), but the order's look-up still says what became
// of it.
type ReleasedKey struct {
	Key        string       `json:"key"`
	Cause      ReleaseCause `json:"cause"`
	ReleasedAt time.Time    `json:"released_at"`
}

// OrderRecord is everything a store keeps about one order of one scope,
// read in one snapshot.
type OrderRecord struct {
	// Charges are the charges of the charge table, oldest first: the
	// protocol's, and the lab's own under LabKeyPrefix.
	Charges []Charge
	// Unguarded are the charges of the lab's unguarded table: money the
	// customer paid all the same.
	Unguarded []Charge
	// Keys are the idempotency keys claimed for the order, started or
	// done, with their saved status (their bodies are not read).
	Keys []KeyRow
	// Released are the claims released for the order with nothing charged.
	Released []ReleasedKey
}

// LookedUpCharge is one charge of an order as the look-up shows it.
type LookedUpCharge struct {
	Charge
	// Guarded says the charge went through the idempotency protocol with
	// the client's key; a charge one of the lab's mistaken handlers made
	// is not.
	Guarded bool `json:"guarded"`
}

// PendingKey is a key whose outcome is not known yet.
type PendingKey struct {
	Key      string    `json:"key"`
	LockedAt time.Time `json:"locked_at"`
	// Running says its request is at work on this server.
	Running bool `json:"running"`
	// SettledBy is when the outcome will be known at the latest: the
	// sweeper closes a key whose request stopped one sweep period after
	// the lock timeout.
	SettledBy time.Time `json:"settled_by"`
}

// NotCharged says why an order has no charge.
type NotCharged struct {
	Reason NotChargedReason `json:"reason"`
	// Key is the attempt's key; Status its saved HTTP status (0 for a
	// release); Cause who released it.
	Key    string       `json:"key"`
	Status int          `json:"status,omitempty"`
	Cause  ReleaseCause `json:"cause,omitempty"`
	At     time.Time    `json:"at"`
}

// OrderLookup is the answer to "what happened to this order?".
type OrderLookup struct {
	OrderID string     `json:"order_id"`
	State   OrderState `json:"state"`
	// Paid is State == OrderPaid, kept for clients that read only it.
	Paid    bool             `json:"paid"`
	Charges []LookedUpCharge `json:"charges"`
	// Pending lists the keys whose outcome is unknown (State pending).
	Pending []PendingKey `json:"pending,omitempty"`
	// NotCharged is the latest attempt's end (State not_charged).
	NotCharged *NotCharged `json:"not_charged,omitempty"`
	// RetryAfter is when to look again (State pending): the headers'
	// Retry-After, and retry_after_seconds in the body.
	RetryAfter        time.Duration `json:"-"`
	RetryAfterSeconds int64         `json:"retry_after_seconds,omitempty"`
	// Advice is what a shop does now, in a sentence.
	Advice string `json:"advice"`
}

// LookupTimes are the server's timings a look-up needs to say when a
// pending order will be settled.
type LookupTimes struct {
	// Now is the server's clock.
	Now time.Time
	// Settle is how long after its lock a stopped key is closed at the
	// latest: the lock timeout plus one sweep period.
	Settle time.Duration
	// Work is how long a running request may still work after its claim
	// (the gateway time-out): within it, the answer may come any moment.
	Work time.Duration
	// Poll is the wait to suggest while the answer may come any moment.
	Poll time.Duration
	// Running reports whether a claim's request is at work on this server.
	Running func(claim string) bool
	// Alone says no other server shares the store: a key whose request is
	// not running here has stopped, whatever its age, and only the
	// sweeper will settle it.
	Alone bool
}

// LookUpOrder reads an order's record into its state. The rules, in order:
// a recorded charge means paid, whatever else is pending (the shop must
// not pay again, and a pending key for the order can at most add a charge
// the shop already knows it must refund); a claimed key whose outcome is
// unknown means pending; otherwise the latest attempt that ended without
// a charge says why; and no trace at all means never seen.
func LookUpOrder(orderID string, rec OrderRecord, t LookupTimes) OrderLookup {
	l := OrderLookup{OrderID: orderID, Charges: make([]LookedUpCharge, 0, len(rec.Charges)+len(rec.Unguarded))}
	for _, c := range rec.Charges {
		l.Charges = append(l.Charges, LookedUpCharge{Charge: c, Guarded: !strings.HasPrefix(c.Key, LabKeyPrefix)})
	}
	for _, c := range rec.Unguarded {
		l.Charges = append(l.Charges, LookedUpCharge{Charge: c})
	}
	slices.SortStableFunc(l.Charges, func(a, b LookedUpCharge) int { return a.CreatedAt.Compare(b.CreatedAt) })

	for _, k := range rec.Keys {
		if k.Status != StatusStarted {
			continue
		}
		p := PendingKey{Key: k.Key, LockedAt: k.LockedAt, SettledBy: k.LockedAt.Add(t.Settle)}
		p.Running = t.Running != nil && t.Running(k.Claim)
		l.Pending = append(l.Pending, p)
	}

	switch {
	case len(l.Charges) > 0:
		l.State, l.Paid = OrderPaid, true
		l.Pending = nil
		l.Advice = "The order is paid. Do not pay it again."
		return l
	case len(l.Pending) > 0:
		l.State = OrderPending
		l.RetryAfter = pendingWait(l.Pending, t)
		l.RetryAfterSeconds = int64((l.RetryAfter + time.Second - 1) / time.Second)
		l.Advice = "A payment for this order is in progress and its outcome is not known yet: money may have moved. Do not pay with a new key. Look the order up again after Retry-After seconds, or send the same request again with the same key."
		return l
	}

	l.NotCharged = latestEnd(rec)
	if l.NotCharged == nil {
		l.State = OrderNeverSeen
		l.Advice = "The server has no trace of this order. Send the payment with the key chosen for it; if an earlier send is still on its way, the key keeps the two from charging twice."
		return l
	}
	l.State = OrderNotCharged
	switch l.NotCharged.Reason {
	case ReasonDeclined:
		l.Advice = "The card was declined and nothing was charged. Ask for another card and pay with a new key: the old key replays the refusal."
	case ReasonGatewayFailed:
		l.Advice = "The gateway failed before charging and nothing was charged. Pay again with a new key: the old key replays the failure."
	case ReasonValidation:
		l.Advice = "The request was refused and nothing was charged. Correct it and pay with a new key."
	case ReasonAwaitingConfirmation:
		l.Advice = "A payment was created for this order and waits for its confirmation: nothing was charged. Confirm that payment rather than create another."
	default:
		l.Advice = "The attempt was released with nothing charged. Send the same request again with the same key: it runs afresh."
	}
	return l
}

// pendingWait is when to look again at a pending order: soon while an
// answer may come any moment (a request at work, or within its work's
// time), else when the sweeper will have closed the earliest stopped key.
func pendingWait(pending []PendingKey, t LookupTimes) time.Duration {
	poll := max(t.Poll, time.Second)
	wait := time.Duration(-1)
	for _, p := range pending {
		w := poll
		if !p.Running && (t.Alone || !t.Now.Before(p.LockedAt.Add(t.Work))) {
			w = max(p.SettledBy.Sub(t.Now), poll)
		}
		if wait < 0 || w < wait {
			wait = w
		}
	}
	return wait
}

// latestEnd is the latest attempt that ended without a charge, nil when
// there is none.
func latestEnd(rec OrderRecord) *NotCharged {
	var last *NotCharged
	consider := func(n NotCharged) {
		if last == nil || n.At.After(last.At) {
			last = &n
		}
	}
	for _, k := range rec.Keys {
		if k.Status == StatusDone && k.ResponseStatus == 200 {
			// A creation to be confirmed later: the only answer saved
			// with a 200, and never with a charge.
			consider(NotCharged{Reason: ReasonAwaitingConfirmation, Key: k.Key, Status: k.ResponseStatus, At: cmpOr(k.CompletedAt, k.LockedAt)})
			continue
		}
		if k.Status != StatusDone || k.ResponseStatus < 400 {
			continue
		}
		at := k.CompletedAt
		if at.IsZero() {
			at = k.LockedAt
		}
		consider(NotCharged{Reason: reasonFor(k.ResponseStatus), Key: k.Key, Status: k.ResponseStatus, At: at})
	}
	for _, r := range rec.Released {
		consider(NotCharged{Reason: ReasonReleased, Key: r.Key, Cause: r.Cause, At: r.ReleasedAt})
	}
	return last
}

// reasonFor names the saved refusal of a done key that has no charge.
func reasonFor(status int) NotChargedReason {
	switch {
	case status == 402:
		return ReasonDeclined
	case status >= 500:
		return ReasonGatewayFailed
	default:
		return ReasonValidation
	}
}

// cmpOr is t, or otherwise when t is the zero time.
func cmpOr(t, otherwise time.Time) time.Time {
	if t.IsZero() {
		return otherwise
	}
	return t
}
