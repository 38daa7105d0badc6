package check

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// aCase is one test of the endpoint.
type aCase struct {
	num  int
	name string
	// counts says the verdict rests on counting effects: without an
	// oracle it comes from the answers alone, and is weak.
	counts bool
	run    func(ctx context.Context, r *run) Result
}

var cases = []aCase{
	{1, "replay", true, caseReplay},
	{2, "same key, another body", true, caseOtherBody},
	{3, "same key, another method", false, caseOtherMethod},
	{4, "storm of one key", true, caseStorm},
	{5, "while the first is running", true, caseWhileRunning},
	{6, "key forms", false, caseKeyForms},
	{7, "two callers, one key", false, caseTwoCallers},
	{8, "invalid body not saved", true, caseInvalidBody},
	{9, "lost response", true, caseLostResponse},
	{10, "keys do not queue", false, caseNoQueue},
	{11, "key policy published", false, casePolicy},
	{12, "time-out after the charge", true, caseGatewayTimeout},
	{13, "a key on a GET is ignored", false, caseSafeMethod},
	{14, "header name in any case", true, caseHeaderCase},
	{15, "reordered JSON, one request", true, caseReordered},
	{16, "replays say so", false, caseReplayMarker},
	{17, "4xx and 5xx under a key", true, caseFailurePolicy},
	{18, "key reused after retention", true, caseReuseAfterRetention},
	// Last: it reads the refusals every case before it provoked.
	{19, "409 and 422 are problem+json", false, caseProblemJSON},
}

// CaseCount is how many cases a run has, numbered 1 to CaseCount.
func CaseCount() int { return len(cases) }

func pass(format string, args ...any) Result {
	return Result{Verdict: Pass, Detail: fmt.Sprintf(format, args...)}
}

func fail(safety bool, format string, args ...any) Result {
	return Result{Verdict: Fail, Safety: safety, Detail: fmt.Sprintf(format, args...)}
}

func differs(format string, args ...any) Result {
	return Result{Verdict: Differs, Detail: fmt.Sprintf(format, args...)}
}

func skip(format string, args ...any) Result {
	return Result{Verdict: Skip, Detail: fmt.Sprintf(format, args...)}
}

// action starts a group of requests for one fresh action.
func (r *run) action(caseNum int) req {
	id := r.newID()
	return req{group: fmt.Sprintf("case %d %s", caseNum, id), action: id, key: r.newKey(), amount: r.newAmount(), caseNum: caseNum}
}

// firstPayment sends q and explains an answer that is not a success. An
// endpoint that takes no fresh payment either any more stops the run.
func (r *run) firstPayment(ctx context.Context, q req) (answer, *Result) {
	a := r.send(ctx, q)
	if !a.ok() {
		r.alive(ctx, fmt.Sprintf("the first request of case %d, a plain payment, was answered %s", q.caseNum, a))
		res := fail(false, "the first request, a plain payment, was answered %s%s, though the endpoint took one at the start", a, excerpt(a))
		return a, &res
	}
	return a, nil
}

// excerpt quotes the start of an answer's body, for a hint about it.
func excerpt(a answer) string {
	if a.NoAnswer {
		return ""
	}
	return excerptOf(a.Response)
}

func excerptOf(body string) string {
	if body == "" {
		return ""
	}
	return ": " + short(strings.Join(strings.Fields(body), " "), 160)
}

// checkEffects counts action's effects; want is how many there should
// be. It returns a failure, or "" and a note on how they were counted.
func (r *run) checkEffects(ctx context.Context, q req, want int) (bad *Result, note string) {
	n, ok, why := r.effects(ctx, q.group, q.action)
	if !ok {
		return nil, why
	}
	if n != want {
		r.effectFail = true
		res := fail(n > want, "%d effects for one action (counted by %s), want %d", n, r.oracle, want)
		return &res, ""
	}
	return nil, fmt.Sprintf("%d effect (counted by %s)", n, r.oracle)
}

// Case 1: the same request twice → the same status and bytes, one effect.
func caseReplay(ctx context.Context, r *run) Result {
	q := r.action(1)
	first, bad := r.firstPayment(ctx, q)
	if bad != nil {
		return *bad
	}
	if r.cfg.ReplayAfter > 0 {
		// A second key is paid with now, for case 19 to reuse once the
		// wait is over.
		reuse := r.action(19)
		if a := r.send(ctx, reuse); a.ok() {
			r.reuse = &reusedKey{q: reuse, first: a, at: time.Now()}
		}
		if err := r.cfg.Wait(ctx, r.cfg.ReplayAfter); err != nil {
			return fail(false, "waiting before the replay: %v", err)
		}
	}
	second := r.send(ctx, q)
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		bad.Detail = "the replay ran the payment again: " + bad.Detail
		return *bad
	}
	switch {
	case second.NoAnswer:
		return fail(false, "the replay got %s", second)
	case second.Status != first.Status:
		return fail(true, "the replay was answered %s, the first request %s%s", second, first, excerpt(second))
	case !second.sameBody(first):
		return fail(true, "the replay's body is not the first answer's bytes: a second payment, or a saved answer changed%s", diffNote(first, second))
	}
	marker := ""
	if second.Replayed != "" {
		marker = ", marked " + second.Replayed
	}
	after := ""
	if r.cfg.ReplayAfter > 0 {
		after = fmt.Sprintf(" %s later", r.cfg.ReplayAfter)
	}
	return pass("the replay%s got the same %s and the same %d bytes%s", after, statusOnly(second), len(second.Response), marker)
}

func statusOnly(a answer) string { return fmt.Sprint(a.Status) }

func diffNote(a, b answer) string {
	return fmt.Sprintf(" (first %s, then %s)", short(oneLine(a.Response), 70), short(oneLine(b.Response), 70))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Case 2: the same key with another body is refused, the original untouched.
func caseOtherBody(ctx context.Context, r *run) Result {
	if !strings.Contains(r.cfg.Body, "{{amount}}") {
		return skip("the body template has no {{amount}} to change")
	}
	q := r.action(2)
	first, bad := r.firstPayment(ctx, q)
	if bad != nil {
		return *bad
	}
	other := q
	other.amount = q.amount + 1
	sent := fmt.Sprintf("sent the amount %d where the first request had %d", other.amount, q.amount)
	a := r.send(ctx, other)
	again := r.send(ctx, q)
	badEffects, _ := r.checkEffects(ctx, q, 1)
	switch {
	case a.ok() && a.sameBody(first):
		return fail(true, "%s: answered with the first request's saved %s, as if it had been charged that amount", sent, a)
	case a.ok():
		return fail(true, "%s: accepted as a new payment (%s) under a key already used", sent, a)
	case badEffects != nil:
		return *badEffects
	case !again.same(first):
		return fail(true, "%s: refused with %s, but then the original request was answered %s, not its saved answer", sent, a, again)
	case a.Status == http.StatusUnprocessableEntity && r.cfg.Profile == ProfileDraft:
		return pass("%s: refused with 422; the original still replays", sent)
	case a.Status == http.StatusBadRequest && r.cfg.Profile == ProfileStripe && strings.Contains(a.Response, "idempotency_error"):
		return pass("%s: refused with 400 idempotency_error, as Stripe does; the original still replays", sent)
	case a.NoAnswer || a.Status >= 500:
		return fail(false, "%s: %s%s", sent, a, excerpt(a))
	case r.cfg.Profile == ProfileStripe:
		return differs("%s: refused with %s%s; Stripe answers 400 with an idempotency_error. The original still replays", sent, a, excerpt(a))
	}
	return differs("%s: refused with %s%s; the draft says 422. The original still replays", sent, a, excerpt(a))
}

// Case 3: the same key on another method is not a replay.
func caseOtherMethod(ctx context.Context, r *run) Result {
	q := r.action(3)
	first, bad := r.firstPayment(ctx, q)
	if bad != nil {
		return *bad
	}
	put := q
	put.method = http.MethodPut
	a := r.send(ctx, put)
	switch {
	case a.same(first):
		return fail(true, "PUT with the key of a POST was answered with the POST's saved %s: the key is not bound to the method", a)
	case a.Replayed != "":
		return fail(true, "PUT with the key of a POST was answered %s marked %s", a, a.Replayed)
	}
	detail := fmt.Sprintf("PUT with the same key and body was answered %s, not the POST's saved answer", a)
	if r.cfg.OtherPath == "" {
		return pass("%s (-other-path names a second POST path to send the key to as well)", detail)
	}
	other := q
	other.url = r.otherPathURL()
	b := r.send(ctx, other)
	switch {
	case b.same(first) || (b.ok() && b.sameBody(first)):
		return fail(true, "POST %s with the key and body of a payment was answered with the payment's saved %s: the key is not bound to the path", r.cfg.OtherPath, b)
	case b.Replayed != "":
		return fail(true, "POST %s with the key of a payment was answered %s marked %s", r.cfg.OtherPath, b, b.Replayed)
	}
	return pass("%s; POST %s with them was answered %s, not a replay", detail, r.cfg.OtherPath, b)
}

// Case 6: missing, empty and overlong keys; the quoted and bare forms.
func caseKeyForms(ctx context.Context, r *run) Result {
	var problems []string
	var notes []string
	check := func(what string, mod func(*req)) {
		q := r.action(6)
		mod(&q)
		a := r.send(ctx, q)
		switch {
		case a.NoAnswer || a.Status >= 500:
			problems = append(problems, fmt.Sprintf("%s: %s%s", what, a, excerpt(a)))
		case a.Status == http.StatusBadRequest:
			notes = append(notes, what+" 400")
		case a.ok():
			problems = append(problems, fmt.Sprintf("%s: accepted (%d), charged with no usable key", what, a.Status))
		default:
			problems = append(problems, fmt.Sprintf("%s: %s%s, the draft says 400", what, a, excerpt(a)))
		}
	}
	check("no key", func(q *req) { q.noKey = true })
	check("empty key", func(q *req) { q.key, q.header = "", "" })
	check("256-character key", func(q *req) { q.key = r.randomKey(256); q.header = q.key })

	// The draft's quoted form, then the same key bare. Both are legal
	// readings: one key (the draft's), or two. The server's answers say
	// which, and the history records them so.
	q := r.action(6)
	q.header = `"` + q.key + `"`
	q.noRecord = true
	quoted := r.send(ctx, q)
	bare := q
	bare.header = ""
	switch {
	case !quoted.ok():
		r.record(quoted.Record)
		problems = append(problems, fmt.Sprintf("the draft's quoted form \"…\" was answered %s%s", quoted, excerpt(quoted)))
	default:
		again := r.send(ctx, bare)
		switch {
		case again.same(quoted):
			quoted.Key = q.key // one key: the history says so
			notes = append(notes, `"key" and key are one key`)
		case again.ok():
			notes = append(notes, fmt.Sprintf("the quoted form \"%s…\" and the bare %s… are two keys here (legal, but a client that sends both pays twice)", short(q.key, 8), short(q.key, 8)))
		default:
			problems = append(problems, fmt.Sprintf("the bare form of a key first sent quoted was answered %s%s", again, excerpt(again)))
		}
		r.record(quoted.Record)
		r.record(again.Record)
	}
	// A key holding personal data: a server cannot refuse it, but the
	// client that sends one puts it in every table and log it reaches.
	pd := r.action(6)
	pd.key = "checker-" + pd.action + "@example.com"
	pd.header = pd.key
	if a := r.send(ctx, pd); a.ok() {
		notes = append(notes, "a key holding an e-mail address is accepted (as on any server: keys must be random, never personal data)")
	}
	detail := strings.Join(notes, "; ")
	if len(problems) > 0 {
		if detail != "" {
			detail = "; " + detail
		}
		return differs("%s%s", strings.Join(problems, "; "), detail)
	}
	return pass("%s", detail)
}

// Case 7: two callers with one key never see each other's answers: the
// second caller sends the first one's key with the very same body (a
// server that keys its saved answers by the key alone hands it the first
// caller's payment), then with another body.
func caseTwoCallers(ctx context.Context, r *run) Result {
	if r.cfg.OtherAuth == "" {
		return skip("needs -other-auth, a second caller's Authorization")
	}
	q := r.action(7)
	first, bad := r.firstPayment(ctx, q)
	if bad != nil {
		return *bad
	}
	same := q
	same.other = true
	s := r.send(ctx, same)
	if s.ok() && s.sameBody(first) || s.Replayed != "" && s.sameBody(first) {
		return fail(true, "the second caller, with the first caller's key and the same body, was answered the first caller's %s (the same %d bytes%s): another customer's payment", s, s.BodyBytes, markerNote(s))
	}
	// Another key of the first caller's for the other body: the second
	// caller's own use of the first key would make it refuse.
	q2 := r.action(7)
	first2, bad := r.firstPayment(ctx, q2)
	if bad != nil {
		return *bad
	}
	other := q2
	other.other = true
	other.action = r.newID()
	a := r.send(ctx, other)
	switch {
	case a.ok() && a.sameBody(first2):
		return fail(true, "the second caller, with the first caller's key and another body, was answered the first caller's %s: another customer's payment", a)
	case !s.ok() && (s.Status == http.StatusUnprocessableEntity || s.Status == http.StatusConflict):
		return differs("the second caller, with the first caller's key and the same body, was refused with %d%s: keys are shared between callers, so one caller learns that another used a key", s.Status, excerpt(s))
	case !s.ok():
		return fail(false, "the second caller, with the first caller's key and the same body, was answered %s%s (is -other-auth a valid credential?)", s, excerpt(s))
	case a.ok():
		return pass("the second caller's requests with the first caller's key are payments of its own: the same body %s, another body %s", s, a)
	case a.Status == http.StatusUnprocessableEntity || a.Status == http.StatusConflict:
		return differs("the second caller with the same body got a payment of its own (%s), but with another body was refused with %d%s: keys are shared between callers", s, a.Status, excerpt(a))
	}
	return fail(false, "the second caller, with the first caller's key and another body, was answered %s%s (is -other-auth a valid credential?)", a, excerpt(a))
}

func markerNote(a answer) string {
	if a.Replayed == "" {
		return ""
	}
	return ", marked " + a.Replayed
}

// Case 8: an invalid body is not saved: the corrected request runs.
func caseInvalidBody(ctx context.Context, r *run) Result {
	if r.cfg.Form && !strings.Contains(r.cfg.Body, "{{amount}}") {
		return skip("the form body has no {{amount}} to spoil")
	}
	q := r.action(8)
	badQ := q
	badQ.badBody = true
	a := r.send(ctx, badQ)
	if a.ok() {
		return differs("an invalid body (%s) was accepted with %s%s; the draft answers 400", short(r.body(badQ), 80), a, excerpt(a))
	}
	good := r.send(ctx, q)
	if !good.ok() {
		if good.same(a) {
			return fail(false, "the invalid body's %d was saved: the corrected request with the same key got it again%s", a.Status, excerpt(good))
		}
		return fail(false, "the corrected request was answered %s%s", good, excerpt(good))
	}
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		return *bad
	}
	return pass("the invalid body got %d; the corrected request with the same key ran (%d)", a.Status, good.Status)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
