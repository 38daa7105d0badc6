package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Report is a run's record and grades: the JSON that -report writes
// (docs/proxy.md documents it field by field).
type Report struct {
	Target           string         `json:"target"`
	Started          time.Time      `json:"started"`
	Ended            time.Time      `json:"ended"`
	Faults           []Fault        `json:"faults"`
	Random           float64        `json:"random,omitempty"`
	Seed             uint64         `json:"seed"`
	BudgetSeconds    float64        `json:"budget_seconds"`
	MaxAttempts      int            `json:"max_attempts"`
	RetentionSeconds float64        `json:"retention_seconds,omitempty"`
	Rules            []RuleInfo     `json:"rules"`
	Clients          []ClientReport `json:"clients"`
	// Unrecorded counts requests forwarded without being recorded,
	// past the bounds of clients and actions.
	Unrecorded int `json:"unrecorded,omitempty"`
	// Broken is true when any client broke any rule: the exit status 1.
	Broken bool `json:"broken"`
}

// ClientReport is one client's grades and actions.
type ClientReport struct {
	// Client is its address and User-Agent (or its name in a room).
	Client    string       `json:"client"`
	Address   string       `json:"address"`
	UserAgent string       `json:"user_agent"`
	Grades    []Grade      `json:"grades"`
	Actions   []Action     `json:"actions"`
	Waits     []WaitSample `json:"waits,omitempty"`
}

// Grade is a client's verdict on one rule.
type Grade struct {
	Rule    Rule    `json:"rule"`
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	// Exercised counts the times the run put the rule to the test;
	// Broken the times the client broke it.
	Exercised int `json:"exercised"`
	Broken    int `json:"broken"`
	// Detail says the first time it was broken, or why it was not
	// judged, or, on a rule passed, what part of it was not judged.
	Detail string `json:"detail,omitempty"`
}

// WaitSample is one wait the jitter rule judged: before the retry with
// this index (0: the first retry) of an action.
type WaitSample struct {
	Action int     `json:"action"`
	Retry  int     `json:"retry"`
	WaitMS float64 `json:"wait_ms"`
}

// Books reads how many charges the API holds for an order, in the scope
// of the given credentials (an Authorization header, a Cookie header).
type Books func(ctx context.Context, auth, cookie, order string) (int, error)

// APIBooks asks a paytwice-shaped API: GET /v1/payments?order_id=, with
// the client's own credentials, so that it reads the client's scope.
func APIBooks(target *url.URL, hc *http.Client) Books {
	return func(ctx context.Context, auth, cookie, order string) (int, error) {
		u := *target
		u.Path = strings.TrimRight(u.Path, "/") + "/v1/payments"
		u.RawQuery = url.Values{"order_id": {order}}.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return 0, err
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s answered %d", u.Path, resp.StatusCode)
		}
		var body struct {
			Charges []json.RawMessage `json:"charges"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
			return 0, fmt.Errorf("the look-up's body: %w", err)
		}
		return len(body.Charges), nil
	}
}

// Jitter rule's thresholds.
const (
	// minWaitSamples is how many waits before the same retry index the
	// jitter rule needs: with six waits drawn by full jitter, the
	// chance that the shortest four (see herdSpread) fall within
	// herdSpread of the fourth is 0.1^3. The growth of the waits needs
	// as many before the first retry, and as many again before the
	// later ones.
	minWaitSamples = 6
	// herdSpread: when the shortest two thirds of the waits (herdPart)
	// lie within this fraction of the longest of them, the waits are a
	// herd. Not all of them: a wait is measured on real clocks, and a
	// client scheduled late (a busy machine) only ever lengthens it, so
	// a client without jitter keeps most of its waits next to its
	// shortest while a few come late. Jitter spreads the shortest ones
	// too: of k waits drawn by full jitter, the shortest k-1 all lie
	// within 10 % of the k-th with a chance of 0.1^(k-1).
	herdSpread = 0.10
	// immediateMS: a wait shorter than this is no wait at all.
	immediateMS = 2.0
	// growthFrom is the retry index (0: the first retry) from which
	// waits count as later ones: the third retry, whose full-jitter
	// ceiling, base·2², is four times the first's unless the cap stops
	// it sooner.
	growthFrom = 2
	// minGrowth is how many times the mean wait before the first retry
	// the mean of the later waits must exceed, both less the lateness
	// the shortest wait shows and each without its longest (see
	// judgeJitter). Full jitter's mean wait is
	// half its ceiling, so its later waits average four times the first
	// ones or more (until the cap); waits under a ceiling that never
	// grows average the same at every retry. Two lies between, where
	// the few waits of one run tell the two apart (see docs/proxy.md).
	minGrowth = 2.0
	// cappedGrowth is how many times the first waits' ceiling the later
	// waits' must reach for waits whose average grew too little to be
	// judged capped rather than not growing: a ceiling that never grows
	// stays near 1, a doubled one that a cap stopped comes near 2.
	cappedGrowth = 1.75
)

// herdPart is the waits a herd is judged on, sorted: all but the longest
// third (rounded down) of them, so four of six, nine of thirteen.
func herdPart(xs []float64) []float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[:len(s)-len(s)/3]
}

// ceiling estimates the ceiling the waits xs were drawn under: the
// second longest, so that one wait lengthened by a stall does not raise
// it.
func ceiling(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)-2]
}

// Snapshot is the record as it stands, graded without asking the API's
// books: what the live page shows. Rule 10 stays unjudged until Grade.
func (p *Proxy) Snapshot() Report {
	return p.report(nil, 0)
}

// GradeSettled grades a run that goes on, as a classroom's does: rule 10
// is judged, on the books, only on the actions that are over (a final
// answer, or a client quiet for longer than settle); one whose client may
// still be about to ask again is left unjudged.
func (p *Proxy) GradeSettled(ctx context.Context, books Books, settle time.Duration) Report {
	return p.report(p.booksAsker(ctx, books), settle)
}

// Grade is the run's final report: every rule judged, rule 10 checked on
// the API's books with each client's own credentials.
func (p *Proxy) Grade(ctx context.Context, books Books) Report {
	return p.report(p.booksAsker(ctx, books), 0)
}

func (p *Proxy) booksAsker(ctx context.Context, books Books) func(a *Action) {
	return func(a *Action) {
		if books == nil || a.Order == "" {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := books(cctx, a.auth, a.cookie, a.Order)
		if err != nil {
			a.Books = "the API's books could not be read: " + err.Error()
			return
		}
		a.Charges = &n
		a.Books = fmt.Sprintf("%d charge(s) for order %q on the API's books", n, a.Order)
	}
}

// report builds the report; askBooks, when set, fills in the books of
// every action that lost a response. The lock is not held while the
// books are asked.
func (p *Proxy) report(askBooks func(a *Action), settle time.Duration) Report {
	if askBooks != nil {
		p.mu.Lock()
		var lost []*Action
		for _, c := range p.order {
			for _, a := range c.actions {
				if a.lostAttempt() != nil && a.Charges == nil && a.over(p.cfg.Now(), settle) {
					lost = append(lost, a)
				}
			}
		}
		p.mu.Unlock()
		for _, a := range lost {
			cp := &Action{Order: a.Order, auth: a.auth, cookie: a.cookie}
			askBooks(cp)
			p.mu.Lock()
			a.Charges, a.Books = cp.Charges, cp.Books
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rep := Report{
		Target: p.cfg.Target.String(), Started: p.started, Ended: p.cfg.Now(), Faults: p.cfg.Schedule,
		Random: p.cfg.Random, Seed: p.cfg.Seed, BudgetSeconds: p.cfg.Budget.Seconds(), MaxAttempts: p.cfg.MaxAttempts,
		RetentionSeconds: p.cfg.Retention.Seconds(), Rules: Rules, Unrecorded: p.dropped,
	}
	for _, c := range p.order {
		cr := c.grade(askBooks != nil, rep.Ended, settle)
		for _, g := range cr.Grades {
			if g.Verdict == Broken {
				rep.Broken = true
			}
		}
		rep.Clients = append(rep.Clients, cr)
	}
	return rep
}

// over reports whether the action has ended: a final answer, or a
// client quiet for longer than settle; with settle 0, every action is.
func (a *Action) over(now time.Time, settle time.Duration) bool {
	if settle <= 0 || a.final {
		return true
	}
	last := a.last()
	return last.Done && now.Sub(last.Ended) > settle
}

// lostAttempt is the attempt whose answer the proxy dropped, if any.
func (a *Action) lostAttempt() *Attempt {
	for i := range a.Attempts {
		if a.Attempts[i].Fault == Lost && a.Attempts[i].Done {
			return &a.Attempts[i]
		}
	}
	return nil
}

// keysChanged reports whether the action's retries changed keys.
func (a *Action) keysChanged() bool {
	return a.brokeRule(RuleSameKey) || a.brokeRule(RuleAfter500)
}

// grade judges one client. final says the run is over: rule 10 is then
// judged, and an action still waiting for its client counts as given up.
func (c *client) grade(final bool, now time.Time, settle time.Duration) ClientReport {
	cr := ClientReport{Client: c.id, Address: c.addr, UserAgent: c.userAgent}
	exercised := map[Rule]int{}
	var violations []Violation
	// A client that changes keys on every retry changes them after a
	// 500 too: that is the one mistake, rule 2's, not also rule 5's.
	changesKeys := false
	for _, a := range c.actions {
		if a.brokeRule(RuleSameKey) {
			changesKeys = true
		}
	}
	notes := map[Rule]string{}
	unknownLost := 0
	movedAfter500 := false
	for _, a := range c.actions {
		for r, n := range a.judged {
			exercised[r] += n
		}
		for _, v := range a.Violations {
			if v.Rule == RuleAfter500 && changesKeys {
				v.Rule = RuleSameKey
				v.Detail += " (this client changes keys on every retry)"
				movedAfter500 = true
			}
			violations = append(violations, v)
		}
		if !final {
			continue
		}
		lost := a.lostAttempt()
		if lost == nil || !a.over(now, settle) {
			continue
		}
		exercised[RuleLostResponse]++
		if a.keysChanged() {
			// The second charge, if any, is the changed key's doing.
			notes[RuleLostResponse] = fmt.Sprintf("action %d not judged: its retries changed keys (rule 2 or 5)", a.ID)
			exercised[RuleLostResponse]--
			continue
		}
		if v, ok := a.judgeLost(lost); !ok {
			violations = append(violations, v)
		} else if a.Charges == nil && lost.APIStatus >= 200 && lost.APIStatus < 300 {
			// The client asked again, but whether the order was paid
			// once is the books' to say, and they did not.
			why := a.Books
			if a.Order == "" {
				why = "the body names no order_id to look up"
			}
			notes[RuleLostResponse] = fmt.Sprintf("action %d: %s", a.ID, why)
			unknownLost++
		}
	}
	samples, jitterV, jitterNote, jitterPartial, judged := c.judgeJitter()
	cr.Waits = samples
	exercised[RuleJitter] += judged
	violations = append(violations, jitterV...)
	if jitterNote != "" {
		notes[RuleJitter] = jitterNote
	}
	// What a passed rule leaves unjudged, said beside its verdict.
	partial := map[Rule]string{RuleJitter: jitterPartial}
	for _, info := range Rules {
		g := Grade{Rule: info.Rule, Name: info.Name, Exercised: exercised[info.Rule]}
		for _, v := range violations {
			if v.Rule == info.Rule {
				if g.Broken == 0 {
					g.Detail = v.Detail
				}
				g.Broken++
			}
		}
		switch {
		case g.Broken > 0:
			g.Verdict = Broken
		case info.Rule == RuleAfter500 && movedAfter500:
			g.Verdict, g.Detail = NotExercised, "not judged apart from rule 2: this client changes keys on every retry, after a 500 too"
		case info.Rule == RuleLostResponse && unknownLost > 0:
			g.Verdict, g.Detail = Unknown, notes[info.Rule]
		case g.Exercised > 0:
			g.Verdict, g.Detail = Passed, partial[info.Rule]
		default:
			g.Verdict, g.Detail = NotExercised, notes[info.Rule]
		}
		cr.Grades = append(cr.Grades, g)
	}
	for _, a := range c.actions {
		cp := *a
		cp.Attempts = slices.Clone(a.Attempts)
		cp.Violations = slices.Clone(a.Violations)
		for i, v := range cp.Violations {
			if v.Rule == RuleAfter500 && changesKeys {
				cp.Violations[i].Rule = RuleSameKey
			}
		}
		cr.Actions = append(cr.Actions, cp)
	}
	return cr
}

// judgeLost judges rule 10 on an action whose answer was dropped: the
// client must ask again with the key of the lost attempt and get an
// answer, and the API's books must hold one charge when the lost answer
// was a success.
func (a *Action) judgeLost(lost *Attempt) (Violation, bool) {
	answered := false
	for _, at := range a.Attempts[lost.Number:] {
		if at.Key == lost.Key && at.Done && at.Status != 0 {
			answered = true
		}
	}
	if !answered {
		return Violation{Rule: RuleLostResponse, Attempt: lost.Number, Detail: fmt.Sprintf(
			"action %d: the answer to attempt %d (the API said %d) was lost, and the client never asked again with its key: it does not know the order was paid",
			a.ID, lost.Number, lost.APIStatus)}, false
	}
	if a.Charges != nil && lost.APIStatus >= 200 && lost.APIStatus < 300 && *a.Charges != 1 {
		return Violation{Rule: RuleLostResponse, Attempt: lost.Number, Detail: fmt.Sprintf(
			"action %d: %d charges for order %q on the API's books after a lost response, want 1", a.ID, *a.Charges, a.Order)}, false
	}
	return Violation{}, true
}

// judgeJitter judges rule 7 on every wait that followed an answer
// without Retry-After (those waits are the client's own policy), against
// full jitter's shape at the client's own scale: at each retry index
// with enough waits, the shortest two thirds of them must not be about
// equal (a herd: every client of this kind comes back at one instant),
// nor immediate (no backoff at all) — the rest may be late wake-ups,
// which only lengthen a wait; and the waits before the third retry and later must
// be longer than those before the first, as a ceiling that doubles makes
// them (a client whose waits never grow keeps hammering an API that is
// down). partial says what could not be judged when the rest was.
func (c *client) judgeJitter() (samples []WaitSample, vs []Violation, note, partial string, judged int) {
	byRetry := map[int][]float64{}
	for _, a := range c.actions {
		for i := 1; i < len(a.Attempts); i++ {
			at, prev := a.Attempts[i], a.Attempts[i-1]
			if at.Overlapped || !prev.Done || prev.RetryAfter > 0 || prev.Fault == Slow {
				continue
			}
			if prev.Status != 0 && !retryableStatus(prev.Status) {
				continue // rule 6's business, not a backoff
			}
			samples = append(samples, WaitSample{Action: a.ID, Retry: i - 1, WaitMS: at.WaitMS})
			byRetry[i-1] = append(byRetry[i-1], at.WaitMS)
		}
	}
	indexes := make([]int, 0, len(byRetry))
	for n := range byRetry {
		indexes = append(indexes, n)
	}
	slices.Sort(indexes)
	counted := map[int]bool{}
	for _, n := range indexes {
		w := byRetry[n]
		if len(w) < minWaitSamples {
			continue
		}
		counted[n] = true
		part := herdPart(w)
		lo, hi := part[0], part[len(part)-1]
		switch {
		case hi < immediateMS:
			vs = append(vs, Violation{Rule: RuleJitter, Detail: fmt.Sprintf(
				"%d of the %d waits before retry %d were under %.0f ms: no backoff at all", len(part), len(w), n+1, immediateMS)})
		case hi-lo <= herdSpread*hi:
			vs = append(vs, Violation{Rule: RuleJitter, Detail: fmt.Sprintf(
				"%d of the %d waits before retry %d lay between %.0f and %.0f ms (the longest %.0f): no jitter, so clients that failed together retry together", len(part), len(w), n+1, lo, hi, slices.Max(w))})
		}
	}
	first := byRetry[0]
	var later []float64
	for _, n := range indexes {
		if n >= growthFrom {
			later = append(later, byRetry[n]...)
		}
	}
	if len(first) >= minWaitSamples && len(later) >= minWaitSamples {
		for _, n := range indexes {
			if n == 0 || n >= growthFrom {
				counted[n] = true
			}
		}
		// Every measured wait is the client's own wait plus how late it
		// woke, and on a busy machine that lateness can be longer than
		// the first waits themselves: added to both sides, it pulls their
		// ratio towards 1 whatever the client drew (a careful client's
		// later waits, woken 100 to 170 ms late, once averaged 1.9 times
		// its first ones of 0 to 50 ms). The shortest wait of all bounds
		// it: full jitter draws some wait near zero (the shortest of the
		// first six or more, from [0, base]), so that one measures the
		// lateness every wait carries at least, and it is taken off
		// every wait before they are compared. Waits that are only
		// lateness (no backoff at all) then compare as what is left of
		// the lateness, which does not grow either. The longest of each
		// group is left out of its average: one stall (a wait measured
		// 700 ms late among first waits of 5 to 40 ms) would raise the
		// first waits' average alone.
		late := slices.Min(first)
		for _, n := range indexes {
			late = min(late, slices.Min(byRetry[n]))
		}
		m0, mLater := mean(butLongest(first))-late, mean(butLongest(later))-late
		c0, cLater := ceiling(first)-late, ceiling(later)-late
		grows := mLater > minGrowth*m0
		switch {
		case !grows && cLater >= cappedGrowth*c0 && cLater > c0:
			// The ceiling grew, then stopped: a cap at most twice the base
			// averages twice the first waits at best, and the mean cannot
			// tell it from a ceiling that never grew. Not a fault.
			partial = fmt.Sprintf("growth capped, not judged: the waits before retry %d and later reach %.0f ms, %s the %.0f ms of those before the first retry, then stop growing (a cap); their average, %s, cannot tell a cap this low from a ceiling that never grows%s",
				growthFrom+1, cLater, times(cLater, c0), c0, times(mLater, m0), lateNote(late))
		case !grows:
			vs = append(vs, Violation{Rule: RuleJitter, Detail: fmt.Sprintf(
				"the waits do not grow: the %d before retry %d and later averaged %.0f ms (longest %.0f), %s the %.0f ms (longest %.0f) of the %d before the first retry%s; a ceiling that doubles makes them 4 times as long or more, until its cap (more than %.0f times wanted)",
				len(later), growthFrom+1, mLater, slices.Max(later)-late, times(mLater, m0), m0, slices.Max(first)-late, len(first), lateNote(late), minGrowth)})
		}
	} else {
		partial = fmt.Sprintf("growth not judged: %d waits before the first retry and %d before retry %d or later, %d of each wanted",
			len(first), len(later), growthFrom+1, minWaitSamples)
	}
	for n := range counted {
		judged += len(byRetry[n])
	}
	if judged == 0 {
		note = fmt.Sprintf("fewer than %d waits before any one retry (%d in all): too few to judge their spread", minWaitSamples, len(samples))
		partial = ""
	}
	return samples, vs, note, partial, judged
}

// times says how many times b a is, for a grade's detail.
func times(a, b float64) string {
	if b <= 0 {
		return "against none"
	}
	return fmt.Sprintf("%.1f times", a/b)
}

// lateNote says what lateness was taken off the waits a growth detail
// gives, when there was any to speak of.
func lateNote(late float64) string {
	if late < 1 {
		return ""
	}
	return fmt.Sprintf(" (each less %.0f ms, the shortest wait of all: how late the client woke at least)", late)
}

// butLongest is xs without its longest one: what an average is taken of
// when one late wake-up must not decide it.
func butLongest(xs []float64) []float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[:len(s)-1]
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
