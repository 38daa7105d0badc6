package proxy

// Rule numbers the ten things a client is judged on.
type Rule int

// The rules, in the order the article teaches them.
const (
	RuleKeyOnPost Rule = iota + 1
	RuleSameKey
	RuleSameBody
	RuleNoKeyReuse
	RuleAfter500
	RuleNo4xxRetry
	RuleJitter
	RuleRetryAfter
	RuleBudget
	RuleLostResponse
)

// RuleInfo names a rule and says what it asks of a client.
type RuleInfo struct {
	Rule Rule   `json:"rule"`
	Name string `json:"name"`
	Asks string `json:"asks"`
}

// Rules is the table of rules, the same in the usage, the page and the
// documentation.
var Rules = []RuleInfo{
	{RuleKeyOnPost, "key-on-every-post", "every POST carries an Idempotency-Key"},
	{RuleSameKey, "same-key-on-retry", "every retry of an action sends the key of its first attempt"},
	{RuleSameBody, "same-body-on-retry", "every retry of an action sends the same body"},
	{RuleNoKeyReuse, "no-key-reuse", "a different action never reuses a key"},
	{RuleAfter500, "after-500-same-key-or-lookup", "after a 500 the client retries with the same key, or looks the order up before it uses a new one"},
	{RuleNo4xxRetry, "no-retry-of-4xx", "no retry after a 4xx other than 408, 409, 425 and 429 (a 400 or 422 fails every time)"},
	{RuleJitter, "jittered-backoff", "waits are spread like full jitter's: not mostly equal across actions, not immediate, and growing from the first retry to the later ones"},
	{RuleRetryAfter, "retry-after-honoured", "no retry sooner than the Retry-After the answer gave"},
	{RuleBudget, "gives-up-in-budget", "an action ends within the budget and the attempts stated, and inside the key's retention"},
	{RuleLostResponse, "lost-response-one-charge", "after a lost response the client retries with the same key and gets the saved answer: one charge on the API's books"},
}

// Info returns the rule's row of Rules.
func (r Rule) Info() RuleInfo {
	if r >= 1 && int(r) <= len(Rules) {
		return Rules[r-1]
	}
	return RuleInfo{Rule: r, Name: "unknown"}
}

// Verdict is how a client did on a rule.
type Verdict string

const (
	// Passed: the rule was put to the test and held every time.
	Passed Verdict = "passed"
	// Broken: at least once the client did what the rule forbids.
	Broken Verdict = "broken"
	// NotExercised: nothing in the run put the rule to the test (too few
	// actions, or a client that never reached that case).
	NotExercised Verdict = "not exercised"
	// Unknown: the rule was put to the test but the proxy could not
	// tell the outcome (the API's books could not be read): it does not
	// guess.
	Unknown Verdict = "unknown"
)

// retryableStatus reports whether an answer invites the same request
// again: 408, 409, 425, 429 and every 5xx. Every other 4xx would fail
// again however often it is sent.
func retryableStatus(status int) bool {
	switch status {
	case 408, 409, 425, 429:
		return true
	}
	return status >= 500 && status <= 599
}

// finalStatus reports whether an answer ends its action: a success, a
// replay of the saved answer, or an error no retry can change.
func finalStatus(status int, replayed bool) bool {
	return replayed || (status >= 200 && status < 300) || (status >= 400 && status < 500 && !retryableStatus(status))
}
