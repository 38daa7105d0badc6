package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Case 4: storms of requests with one key, released together.
//
// A race between requests of one key is found by design, not by chance:
// every connection is opened and every request sent but its last byte,
// then the last bytes go at once, so that the server starts them all
// within a fraction of a millisecond; and -rounds storms, each with a
// key of its own, leave a race window of a millisecond nowhere to hide.
// With -gateway, the storm's charge is held at the gateway: a server
// that looks its key up, charges, then writes its key holds the window
// open for as long.
func caseStorm(ctx context.Context, r *run) Result {
	var last Result
	for round := 1; round <= r.cfg.Rounds; round++ {
		res, failed := stormRound(ctx, r)
		if failed || res.Verdict != Pass {
			if r.cfg.Rounds > 1 {
				res.Detail = fmt.Sprintf("round %d of %d: %s", round, r.cfg.Rounds, res.Detail)
			}
			return res
		}
		last = res
	}
	if r.cfg.Rounds > 1 {
		last.Detail = fmt.Sprintf("%d rounds, each with a key of its own; the last: %s", r.cfg.Rounds, last.Detail)
	}
	return last
}

// stormHold is how long the gateway holds a storm's charge.
const stormHold = 300 * time.Millisecond

// stormRound sends one storm; failed says it showed a failure.
func stormRound(ctx context.Context, r *run) (Result, bool) {
	q := r.action(4)
	n := r.cfg.Storm
	if r.gatewayUsed {
		if err := r.gatewaySwitches(ctx, map[string]any{"latency_ms": stormHold.Milliseconds(), "latency_order_id": q.action}); err != nil {
			return fail(false, "setting the gateway's latency: %v", err), true
		}
		defer r.gatewaySwitches(context.WithoutCancel(ctx), map[string]any{})
	}
	conns := make([]*rawConn, 0, n)
	defer func() {
		for _, c := range conns {
			c.conn.Close()
		}
	}()
	for range n {
		c, err := r.dialRaw(ctx, q)
		if err != nil {
			r.alive(ctx, fmt.Sprintf("opening a connection for case 4 failed: %v", err))
			return fail(false, "opening %d connections: %v", n, err), true
		}
		conns = append(conns, c)
	}
	// The last byte of every request at once: each goroutine waits at
	// the barrier, then writes.
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	sent := make([]time.Time, n)
	for i, c := range conns {
		wg.Go(func() {
			ready.Done()
			<-start
			_ = c.release()
			sent[i] = time.Now()
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	spread := slices.MaxFunc(sent, time.Time.Compare).Sub(slices.MinFunc(sent, time.Time.Compare))
	answers := make([]answer, n)
	for i, c := range conns {
		wg.Go(func() {
			hr, _, _ := r.newRequest(ctx, q)
			answers[i] = c.read(r, hr)
		})
	}
	wg.Wait()
	conns = nil
	for _, a := range answers {
		r.record(a.Record)
	}
	statuses := map[int]int{}
	bodies := map[string]bool{}
	var ok answer
	noRetryAfter, other, lost := 0, 0, 0
	for _, a := range answers {
		switch {
		case a.NoAnswer:
			lost++
			continue
		case a.ok():
			bodies[a.BodySHA256] = true
			ok = a
		case a.Status == http.StatusConflict || a.Status == http.StatusTooManyRequests:
			if _, has := a.retryAfter(); !has {
				noRetryAfter++
			}
		default:
			other++
		}
		statuses[a.Status]++
	}
	tally := tallyStatuses(statuses, lost)
	head := fmt.Sprintf("%d requests released within %s: %s", n, spread.Round(10*time.Microsecond), tally)
	if len(bodies) > 1 {
		return fail(true, "%s; %d different successful bodies for one key: %d payments", head, len(bodies), len(bodies)), true
	}
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		bad.Detail = head + "; " + bad.Detail
		return *bad, true
	}
	if len(bodies) == 0 {
		r.alive(ctx, fmt.Sprintf("no request of a storm succeeded (%s)", tally))
		return fail(false, "%s; none succeeded", head), true
	}
	again := r.send(ctx, q)
	if !again.same(ok) {
		return fail(true, "%s; a replay afterwards was answered %s, not the storm's success", head, again), true
	}
	switch {
	case lost > 0:
		return fail(false, "%s; %d got no answer", head, lost), true
	case other > 0:
		return differs("%s; the others should be 409 (or 429) with Retry-After", head), false
	case noRetryAfter > 0:
		return differs("%s; %d of the refusals had no Retry-After", head, noRetryAfter), false
	}
	return pass("%s", head), false
}

func tallyStatuses(statuses map[int]int, lost int) string {
	var parts []string
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", statuses[c], c))
	}
	if lost > 0 {
		parts = append(parts, fmt.Sprintf("%d× no answer", lost))
	}
	return strings.Join(parts, ", ")
}

// Case 5: a request with the key while the first is still running.
func caseWhileRunning(ctx context.Context, r *run) Result {
	q := r.action(5)
	slowed := false
	if r.gatewayUsed {
		if err := r.gatewaySwitches(ctx, map[string]any{"latency_ms": 1500, "latency_order_id": q.action}); err != nil {
			return fail(false, "setting the gateway's latency: %v", err)
		}
		defer r.gatewaySwitches(context.WithoutCancel(ctx), map[string]any{})
		slowed = true
	}
	c, err := r.dialRaw(ctx, q)
	if err != nil {
		r.alive(ctx, fmt.Sprintf("opening a connection failed: %v", err))
		return fail(false, "opening a connection: %v", err)
	}
	if err := c.release(); err != nil {
		c.conn.Close()
		return fail(false, "sending the first request: %v", err)
	}
	firstDone := make(chan answer, 1)
	go func() {
		hr, _, _ := r.newRequest(ctx, q)
		firstDone <- c.read(r, hr)
	}()
	if slowed && !r.waitPending(ctx, q.action, r.cfg.Timeout) {
		first := <-firstDone
		r.record(first.Record)
		return fail(false, "the first request never reached the gateway (answered %s)", first)
	}
	second := r.send(ctx, q)
	first := <-firstDone
	r.record(first.Record)
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		return *bad
	}
	// Without a slow gateway the second may overtake the first: either
	// one may be the one that runs.
	ran, other := first, second
	if !first.ok() && second.ok() {
		ran, other = second, first
	}
	switch {
	case !ran.ok():
		return fail(false, "neither request succeeded: %s and %s%s", first, second, excerpt(first))
	case other.ok() && !other.sameBody(ran):
		return fail(true, "two requests with one key, the second sent while the first was running, were both charged%s", diffNote(ran, other))
	case other.ok():
		how := "the second waited for the first one, then got its answer"
		if !slowed {
			how = "the second got the first one's answer (the first may have finished already: -gateway makes it slow)"
		}
		return pass("%s", how)
	case other.Status == http.StatusConflict || other.Status == http.StatusTooManyRequests:
		if d, ok := other.retryAfter(); ok {
			return pass("answered %d with Retry-After %s while the other was running", other.Status, d)
		}
		return differs("answered %d without Retry-After: a client does not know when to retry", other.Status)
	}
	if other.NoAnswer {
		return fail(false, "got no answer while the other was running: %s", other.Error)
	}
	return differs("answered %s while the other was running%s; want 409 with Retry-After, or the same answer", other, excerpt(other))
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

// Case 9: the response is lost, the client retries with the key.
//
// With -gateway the client hangs up at the worst moment, and always the
// same one: the gateway has charged and holds its answer back, so the
// endpoint is cut off after the charge and before it learns of it.
// Without it, the hang-up comes right after the last byte, wherever the
// endpoint's work has got to by then.
func caseLostResponse(ctx context.Context, r *run) Result {
	q := r.action(9)
	charged := false
	if r.gatewayUsed {
		hold := min(r.cfg.Timeout/2, 5*time.Second)
		if err := r.gatewaySwitches(ctx, map[string]any{"hold_answer_ms": hold.Milliseconds(), "latency_order_id": q.action}); err != nil {
			return fail(false, "setting the gateway to hold its answer: %v", err)
		}
		defer r.gatewaySwitches(context.WithoutCancel(ctx), map[string]any{})
	}
	c, err := r.dialRaw(ctx, q)
	if err != nil {
		r.alive(ctx, fmt.Sprintf("opening a connection failed: %v", err))
		return fail(false, "opening a connection: %v", err)
	}
	if err := c.release(); err != nil {
		c.conn.Close()
		return fail(false, "sending the request: %v", err)
	}
	if r.gatewayUsed {
		charged = r.waitCharged(ctx, q.action, r.cfg.Timeout)
	}
	r.record(c.hangUp().Record)
	if r.gatewayUsed {
		if err := r.gatewaySwitches(ctx, map[string]any{}); err != nil {
			return fail(false, "turning the gateway's hold off: %v", err)
		}
		if !charged {
			return fail(false, "the request never reached the gateway within %s", r.cfg.Timeout)
		}
	}
	retry, tries := r.retryUntilAnswered(ctx, q)
	if !retry.ok() {
		return fail(false, "the retry was answered %s after %d tries in %s (-patience)%s", retry, tries, r.cfg.Patience, excerpt(retry))
	}
	again := r.send(ctx, q)
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		bad.Detail = "the connection was dropped before the answer and the request retried with its key: " + bad.Detail
		return *bad
	}
	if !again.same(retry) {
		return fail(true, "the retry after a lost answer got %s, a replay then %s%s", retry, again, diffNote(retry, again))
	}
	when := "hung up before the answer"
	if charged {
		when = "hung up once the gateway had charged, before the endpoint heard of it"
	}
	return pass("%s; the retry with the key got %d (after %d %s), and so does every replay", when, retry.Status, tries, plural(tries, "try", "tries"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Case 10: a slow key does not hold other keys back.
//
// With -gateway, one payment is held at the gateway while another key is
// sent. An answer that comes while the slow one is still held there
// proves the keys do not queue. One that comes only after it left may
// have queued, or the endpoint may just be slow at the moment: the case
// is tried again with a longer hold, at least ten times what a payment
// alone took just before, and fails only if the other key waits every
// time.
func caseNoQueue(ctx context.Context, r *run) Result {
	if !r.gatewayUsed {
		return noQueueWhileArriving(ctx, r)
	}
	hold := 2 * time.Second
	maxHold := min(r.cfg.Timeout/2, time.Duration(maxGatewayLatencyMS)*time.Millisecond)
	var res Result
	var alone time.Duration
	for try := 1; try <= noQueueTries; try++ {
		var done bool
		if res, alone, done = noQueueAtGateway(ctx, r, hold); done {
			return res
		}
		if try < noQueueTries {
			hold = max(hold, min(max(2*hold, 10*alone), maxHold))
		}
	}
	if 10*alone > hold {
		return skip("a payment alone took %s: too slow to tell, within -timeout %s, whether another key waits for one held at the gateway for %s", alone.Round(time.Millisecond), r.cfg.Timeout, hold)
	}
	return res
}

// noQueueTries bounds how often case 10 holds a payment at the gateway.
const noQueueTries = 2

// maxGatewayLatencyMS is the longest latency the gateway's switch takes.
const maxGatewayLatencyMS = 60_000

// noQueueAtGateway holds one payment at the gateway for hold while
// another key is sent. done says the verdict is final; when it is not,
// alone is how long a payment with nothing held took and res the verdict
// should the other key wait every time.
func noQueueAtGateway(ctx context.Context, r *run, hold time.Duration) (res Result, alone time.Duration, done bool) {
	slow, fast := r.action(10), r.action(10)
	if err := r.gatewaySwitches(ctx, map[string]any{"latency_ms": hold.Milliseconds(), "latency_order_id": slow.action}); err != nil {
		return fail(false, "setting the gateway's latency: %v", err), 0, true
	}
	defer r.gatewaySwitches(context.WithoutCancel(ctx), map[string]any{})
	slowDone := make(chan answer, 1)
	go func() { slowDone <- r.send(ctx, slow) }()
	if !r.waitPending(ctx, slow.action, r.cfg.Timeout) {
		a := <-slowDone
		return fail(false, "the slow request never reached the gateway (answered %s)", a), 0, true
	}
	b := r.send(ctx, fast)
	n, err := r.gatewayPending(ctx, slow.action)
	stillHeld := err == nil && n > 0
	<-slowDone
	took := b.End.Sub(b.Start)
	switch {
	case !b.ok():
		return fail(false, "another key, sent while the slow one was at the gateway, was answered %s%s", b, excerpt(b)), 0, true
	case stillHeld:
		return pass("another key was answered in %s while the slow one was still held at the gateway (%s)", took.Round(100*time.Microsecond), hold), 0, true
	}
	// Answered only after the slow one left the gateway: how long does a
	// payment take with nothing held?
	if err := r.gatewaySwitches(ctx, map[string]any{}); err != nil {
		return fail(false, "turning the gateway's latency off: %v", err), 0, true
	}
	base := r.send(ctx, r.action(10))
	if !base.ok() {
		return fail(false, "a payment with nothing held at the gateway was answered %s%s", base, excerpt(base)), 0, true
	}
	alone = base.End.Sub(base.Start)
	res = fail(false, "another key waited for the slow one: answered only once it had left the gateway, with holds of up to %s, %s after it was sent, where a payment alone takes %s (the keys queue behind one lock)",
		hold, took.Round(time.Millisecond), alone.Round(time.Millisecond))
	return res, alone, false
}

// noQueueWhileArriving is case 10 without a gateway to slow the work: a
// request whose body has not all arrived holds its connection open while
// a request with another key is sent. A server that takes one lock for
// every request before it reads the body makes the second one wait.
//
// The slow request asks for "100 Continue", which a server sends when it
// starts reading the body: only then is the request surely in its hands,
// so the other key is sent after it, not before a busy server has even
// taken the slow one's headers. A server that never sends it gets the
// other key after limit.
func noQueueWhileArriving(ctx context.Context, r *run) Result {
	slow, fast := r.action(10), r.action(10)
	slow.expectContinue = true
	c, err := r.dialRaw(ctx, slow)
	if err != nil {
		r.alive(ctx, fmt.Sprintf("opening a connection failed: %v", err))
		return fail(false, "opening a connection: %v", err)
	}
	limit := min(r.cfg.Timeout, 5*time.Second)
	reading := c.awaitContinue(limit)
	fastCtx, cancel := context.WithTimeout(ctx, limit)
	b := r.send(fastCtx, fast)
	cancel()
	if err := c.release(); err != nil {
		c.conn.Close()
	} else {
		hr, _, _ := r.newRequest(ctx, slow)
		r.record(c.read(r, hr).Record)
	}
	held := "while a request was still sending its body"
	if reading {
		held = "while the server was reading the body of a request still being sent"
	}
	switch {
	case b.NoAnswer:
		return fail(false, "another key got no answer within %s %s: the keys queue behind one lock", limit, held)
	case !b.ok():
		return fail(false, "another key, sent %s, was answered %s%s", held, b, excerpt(b))
	}
	return pass("another key was answered in %s %s (-gateway also holds one at the gateway)", b.End.Sub(b.Start).Round(100*time.Microsecond), held)
}

// policyInfo is what case 11 read of the endpoint's published policy.
type policyInfo struct {
	url       string
	retention time.Duration // 0 when it names none
}

// maxPolicyBytes bounds the policy document read.
const maxPolicyBytes = 256 << 10

// Case 11: the key policy is published (informational). A document
// counts as a policy only if it names how long keys are kept.
func casePolicy(ctx context.Context, r *run) Result {
	u, _ := urlOrigin(r.cfg.URL)
	var seen []string
	for _, path := range []string{"/v1/idempotency-policy", "/.well-known/idempotency-policy", "/idempotency-policy"} {
		hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u+path, nil)
		if err != nil {
			break
		}
		res, err := r.client.Do(hr)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxPolicyBytes))
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			continue
		}
		if d, field, ok := retentionOf(b); ok {
			r.policy = &policyInfo{url: u + path, retention: d}
			return Result{Verdict: Info, Detail: fmt.Sprintf("published at %s: keys kept %s (%s)", u+path, d, field)}
		}
		seen = append(seen, fmt.Sprintf("%s answers 200%s but names no retention", u+path, excerptOf(string(b))))
	}
	if len(seen) > 0 {
		return Result{Verdict: Info, Detail: strings.Join(seen, "; ") + ": not a policy the draft asks for (how long keys are kept)"}
	}
	return Result{Verdict: Info, Detail: "no policy found at " + u + "/v1/idempotency-policy or /.well-known/idempotency-policy; the draft asks servers to publish how long keys are kept"}
}

// retentionOf finds how long keys are kept in a policy document: a
// top-level member whose name speaks of retention, expiry or a TTL,
// holding seconds or a duration ("24h", "PT24H").
func retentionOf(doc []byte) (time.Duration, string, bool) {
	var obj map[string]any
	if json.Unmarshal(doc, &obj) != nil {
		return 0, "", false
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		lower := strings.ToLower(name)
		if !strings.Contains(lower, "retention") && !strings.Contains(lower, "ttl") && !strings.Contains(lower, "expir") {
			continue
		}
		switch v := obj[name].(type) {
		case float64:
			if v > 0 {
				unit := time.Second
				if strings.Contains(lower, "ms") || strings.Contains(lower, "milli") {
					unit = time.Millisecond
				} else if strings.Contains(lower, "hour") {
					unit = time.Hour
				}
				// Past what a Duration holds it is no retention to test.
				if d := v * float64(unit); d < float64(1<<62) {
					return time.Duration(d), name, true
				}
			}
		case string:
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				return d, name, true
			}
			if d, ok := isoDuration(v); ok {
				return d, name, true
			}
		}
	}
	return 0, "", false
}

// isoDuration reads the ISO 8601 durations policies use: PnDTnHnMnS.
func isoDuration(s string) (time.Duration, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(s, "P") || len(s) < 3 {
		return 0, false
	}
	var d time.Duration
	inTime := false
	num := ""
	for _, c := range s[1:] {
		switch {
		case c == 'T':
			inTime = true
		case c >= '0' && c <= '9':
			num += string(c)
		default:
			n, err := strconv.Atoi(num)
			if err != nil {
				return 0, false
			}
			num = ""
			switch {
			case c == 'D' && !inTime:
				d += time.Duration(n) * 24 * time.Hour
			case c == 'H' && inTime:
				d += time.Duration(n) * time.Hour
			case c == 'M' && inTime:
				d += time.Duration(n) * time.Minute
			case c == 'S' && inTime:
				d += time.Duration(n) * time.Second
			default:
				return 0, false
			}
		}
	}
	return d, d > 0 && num == ""
}

func urlOrigin(raw string) (string, error) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw, fmt.Errorf("no scheme")
	}
	rest := raw[i+3:]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	return raw[:i+3] + rest, nil
}

// Case 12: the gateway times out after charging; the key is not run again.
func caseGatewayTimeout(ctx context.Context, r *run) Result {
	if !r.gatewayUsed {
		return skip("needs -gateway, the simulated gateway the endpoint charges through")
	}
	q := r.action(12)
	if err := r.gatewaySwitches(ctx, map[string]any{"timeout": true}); err != nil {
		return fail(false, "setting the gateway's time-out: %v", err)
	}
	first := r.send(ctx, q)
	if err := r.gatewaySwitches(context.WithoutCancel(ctx), map[string]any{}); err != nil {
		return fail(false, "turning the gateway's time-out off: %v", err)
	}
	if first.ok() {
		return fail(false, "the gateway charged and never answered, yet the endpoint answered %s", first)
	}
	wait, ok := first.retryAfter()
	if !ok {
		wait = time.Second
	}
	if wait > maxRetryWait {
		wait = maxRetryWait
	}
	if err := r.cfg.Wait(ctx, wait); err != nil {
		return fail(false, "waiting: %v", err)
	}
	retry, tries := r.retryUntilAnswered(ctx, q)
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		bad.Detail = fmt.Sprintf("the gateway charged, then timed out (the endpoint answered %s); the retry with the same key, %s later, charged again: %s", first, wait, bad.Detail)
		return *bad
	}
	if !retry.ok() && retry.same(first) && first.Status >= 500 {
		// Saved: one charge, and the client is told of a failure for
		// good. Stripe does so with its 500s; the draft frees the key.
		detail := fmt.Sprintf("the gateway charged, then timed out: the endpoint answered %s%s and saved it (%d tries got it again); the gateway holds one charge", first, excerpt(first), tries)
		if r.cfg.Profile == ProfileStripe {
			return pass("%s, as Stripe saves its 5xx", detail)
		}
		return differs("%s; the draft frees a 5xx's key for a retry (Stripe saves it: -profile stripe)", detail)
	}
	if !retry.ok() {
		return fail(false, "after the gateway's time-out (answered %s) the retry got %s after %d tries%s", first, retry, tries, excerpt(retry))
	}
	return pass("the gateway timed out after charging (answered %s); the retry with the key got %d and the gateway holds one charge", first, retry.Status)
}
