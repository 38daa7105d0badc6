package proxy

import (
	"fmt"
	"time"
)

// Attempt is one request of an action as the proxy saw it.
type Attempt struct {
	// Number counts the action's attempts from 1.
	Number int       `json:"number"`
	At     time.Time `json:"at"`
	// Key is the Idempotency-Key sent ("" with HasKey false: none).
	Key    string `json:"key"`
	HasKey bool   `json:"has_key"`
	// Body is a digest of the canonical body.
	Body string `json:"body_digest"`
	// Fault is what the proxy did to this attempt.
	Fault Fault `json:"fault"`
	// Status is the status the client received; 0 when it received no
	// answer (a refused, reset or lost connection), or while the attempt
	// is in flight (Done false).
	Status int `json:"status"`
	// APIStatus is what the API answered, when the request reached it
	// (0 when it did not).
	APIStatus int  `json:"api_status,omitempty"`
	Replayed  bool `json:"replayed,omitempty"`
	// RetryAfter is the Retry-After of the answer, in seconds.
	RetryAfter int `json:"retry_after_seconds,omitempty"`
	// WaitMS is the time between the end of the previous attempt's
	// answer and this attempt, in milliseconds (0 on the first).
	WaitMS float64 `json:"wait_ms"`
	// Overlapped is true when this attempt came before the previous one
	// was answered (a double-click, say): it has no wait to judge.
	Overlapped bool      `json:"overlapped,omitempty"`
	Done       bool      `json:"done"`
	Ended      time.Time `json:"ended"`
}

// Violation is one time a client broke a rule.
type Violation struct {
	Rule    Rule   `json:"rule"`
	Attempt int    `json:"attempt"`
	Detail  string `json:"detail"`
}

// Action is one thing a client meant to do once: its attempts, grouped by
// key, or by body when the key changed or is missing.
type Action struct {
	ID     int    `json:"id"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Order is the body's order_id ("" when it has none); the API's
	// books are asked about it after a lost response.
	Order string `json:"order_id,omitempty"`
	// Fault is the fault the plan gave the action.
	Fault      Fault       `json:"fault"`
	Started    time.Time   `json:"started"`
	Attempts   []Attempt   `json:"attempts"`
	Violations []Violation `json:"violations,omitempty"`
	// Charges is what the API's books hold for the order after a lost
	// response, read with the client's own credentials (nil: not asked,
	// or unreadable: see Books).
	Charges *int `json:"charges,omitempty"`
	// Books says what the look-up on the API's books found, or why it
	// could not be made.
	Books string `json:"books,omitempty"`

	body string
	// auth and cookie are the client's credentials, kept in memory only
	// to ask the books in the client's own scope; never reported.
	auth, cookie string
	final        bool
	// stopped is set once the action broke the budget rule: from then
	// on its requests are forwarded untouched, so a client that never
	// gives up still ends.
	stopped bool
	// judged marks what was put to the test on this action.
	judged map[Rule]int
}

func (a *Action) broke(r Rule, attempt int, format string, args ...any) {
	a.Violations = append(a.Violations, Violation{Rule: r, Attempt: attempt, Detail: fmt.Sprintf(format, args...)})
}

func (a *Action) exercise(r Rule) {
	if a.judged == nil {
		a.judged = map[Rule]int{}
	}
	a.judged[r]++
}

func (a *Action) brokeRule(r Rule) bool {
	for _, v := range a.Violations {
		if v.Rule == r {
			return true
		}
	}
	return false
}

// last is the action's latest attempt.
func (a *Action) last() *Attempt { return &a.Attempts[len(a.Attempts)-1] }

// client is everything one client did: its actions, and where to find
// them by key.
type client struct {
	id, addr, userAgent string
	actions             []*Action
	byKey               map[string]*Action
	lastLookup          time.Time
	nextID              int
}

// maxActionsPerClient bounds what is kept of one client: past it, its
// requests are forwarded untouched and not recorded.
const maxActionsPerClient = 5000

// maxClients bounds how many clients are told apart.
const maxClients = 1000

// bodyWindow is how many of a client's latest actions a request with a
// new key or none is compared with, by body.
const bodyWindow = 64

// group finds the action a POST belongs to, or starts one. reused names
// the action whose key a new action took, if any.
func (c *client) group(req clientRequest, now time.Time, budget time.Duration) (a *Action, isNew bool, reused *Action) {
	if req.HasKey {
		if prev := c.byKey[req.Key]; prev != nil {
			if prev.body == req.Body || !prev.final {
				return prev, false, nil
			}
			reused = prev
		}
	}
	if reused == nil {
		// An unseen key, or none: a client that changes keys is still
		// seen retrying the same request.
		for i := len(c.actions) - 1; i >= 0 && i >= len(c.actions)-bodyWindow; i-- {
			prev := c.actions[i]
			if prev.body == req.Body && prev.Method == req.Method && now.Sub(prev.last().At) <= budget {
				return prev, false, nil
			}
		}
	}
	return nil, true, reused
}

// msBetween is b-a in milliseconds.
func msBetween(a, b time.Time) float64 { return float64(b.Sub(a)) / float64(time.Millisecond) }

// judgeRetry applies the rules an attempt can break the moment it
// arrives, given the attempt before it.
func (c *client) judgeRetry(a *Action, at *Attempt, prev *Attempt, req clientRequest, budget time.Duration, maxAttempts int, retention time.Duration) {
	n := at.Number
	a.exercise(RuleSameKey)
	a.exercise(RuleSameBody)
	if req.Body != a.body {
		a.broke(RuleSameBody, n, "attempt %d sent another body than attempt 1", n)
	}
	if !prev.Done {
		at.Overlapped = true
	}
	switch {
	case prev.HasKey && !at.HasKey:
		// Rule 1 says it for this attempt.
	case at.HasKey && prev.HasKey && at.Key != prev.Key:
		if prev.Done && prev.Status == 500 {
			a.exercise(RuleAfter500)
			if c.lastLookup.After(prev.Ended) {
				break // checked first, then a new key: what Stripe advises
			}
			a.broke(RuleAfter500, n, "after a 500 on key %q, attempt %d used the new key %q without looking the order up", prev.Key, n, at.Key)
			break
		}
		a.broke(RuleSameKey, n, "attempt %d used the new key %q; attempt %d sent %q", n, at.Key, prev.Number, prev.Key)
	case prev.Done && prev.Status == 500:
		a.exercise(RuleAfter500)
	}
	if prev.Done {
		if prev.Status >= 400 && prev.Status < 500 && !retryableStatus(prev.Status) {
			a.broke(RuleNo4xxRetry, n, "attempt %d retried a %d, which fails however often it is sent", n, prev.Status)
		}
		if prev.RetryAfter > 0 && !at.Overlapped {
			if want := float64(prev.RetryAfter) * 1000; at.WaitMS < want-retryAfterSlackMS {
				a.broke(RuleRetryAfter, n, "attempt %d came %.0f ms after a Retry-After of %d s", n, at.WaitMS, prev.RetryAfter)
			}
		}
	}
	if a.stopped {
		return
	}
	switch {
	case maxAttempts > 0 && n > maxAttempts:
		a.broke(RuleBudget, n, "attempt %d: more than the %d attempts stated", n, maxAttempts)
		a.stopped = true
	case budget > 0 && at.At.Sub(a.Started) > budget:
		a.broke(RuleBudget, n, "attempt %d came %.1f s after the first, past the %v budget", n, at.At.Sub(a.Started).Seconds(), budget)
		a.stopped = true
	case retention > 0 && at.At.Sub(a.Started) > retention:
		a.broke(RuleBudget, n, "attempt %d came %.1f s after the first, past the key's retention of %v: the key may be forgotten", n, at.At.Sub(a.Started).Seconds(), retention)
		a.stopped = true
	}
}

// retryAfterSlackMS forgives a retry that comes this much early: the
// proxy measures from the end of its answer, the client from when it
// read it, and clocks tick coarsely.
const retryAfterSlackMS = 50
