package views

// ProxyView is what the proxy's live page shows: each client's grade on
// every rule, and its latest actions with their attempts. It is plain
// data; the command fills it from the proxy's record.
type ProxyView struct {
	Target string
	Faults string
	// Clients are the clients seen, in the order they first came.
	Clients []ProxyClient
	// StreamURL is where the page's live updates come from.
	StreamURL string
}

// ProxyClient is one client on the page.
type ProxyClient struct {
	Name     string
	Attempts int
	Rules    []ProxyRule
	// Actions are the latest actions, newest first; Older counts those
	// left out.
	Actions []ProxyAction
	Older   int
}

// ProxyRule is a client's verdict on one rule.
type ProxyRule struct {
	Num               int
	Name, Asks        string
	Verdict           string // passed, broken, not exercised, unknown
	Exercised, Broken int
	Detail            string
}

// ProxyAction is one action: its fault, its attempts and the rules it
// broke.
type ProxyAction struct {
	ID        int
	Order     string
	Fault     string
	FaultSays string
	Attempts  []ProxyAttempt
	Broken    []string
	Books     string
}

// ProxyAttempt is one attempt of an action.
type ProxyAttempt struct {
	Number int
	Key    string
	// Wait is the time since the previous answer ("" on the first).
	Wait   string
	Fault  string
	Answer string // what the client got: a status, "no answer", or "in flight"
	// Bad marks an answer that is an error or none.
	Bad bool
}

// verdictClass is the badge class of a verdict: the word is always shown
// too.
func verdictClass(v string) string {
	switch v {
	case "passed":
		return "badge ok"
	case "broken":
		return "badge bad"
	case "unknown":
		return "badge warn"
	}
	return "badge mute"
}

// faultClass marks an injected fault; "none" stays quiet.
func faultClass(f string) string {
	if f == "none" {
		return "badge mute"
	}
	return "badge warn"
}

// shortKey shortens a long key for a table cell; the report has it whole.
func shortKey(k string) string {
	if k == "" {
		return "(no key)"
	}
	if len(k) > 13 {
		return k[:8] + "…" + k[len(k)-4:]
	}
	return k
}
