package check

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"paytwice/pay/check/bodies"
)

// The cases of the draft's conformance vectors (13–19).

// reusedKey is a key paid with before case 1 waited -replay-after.
type reusedKey struct {
	q     req
	first answer
	at    time.Time
}

// Case 13: a key on a safe method is ignored: two GETs with one key are
// two reads. The read is -count-url's listing of one action, taken
// before and after that action is paid for: a server that saved the
// first GET's answer under its key hands back the empty listing.
func caseSafeMethod(ctx context.Context, r *run) Result {
	if r.cfg.CountURL == "" {
		return skip("needs -count-url, a read whose answer changes")
	}
	pay := r.action(13)
	read := req{group: pay.group, action: pay.action, key: r.newKey(), method: http.MethodGet, noBody: true, noRecord: true,
		url: strings.ReplaceAll(r.cfg.CountURL, "{{id}}", url.QueryEscape(pay.action)), caseNum: 13}
	before := r.send(ctx, read)
	if !before.ok() {
		return fail(false, "GET %s with a key was answered %s%s", read.url, before, excerpt(before))
	}
	if _, bad := r.firstPayment(ctx, pay); bad != nil {
		return *bad
	}
	after := r.send(ctx, read)
	switch {
	case !after.ok():
		return fail(false, "the second GET %s with the same key was answered %s%s", read.url, after, excerpt(after))
	case after.same(before):
		return differs("two GETs of %s with one key, a payment between them, got the same %d bytes%s: the key was honoured on a read, which the draft says to ignore", read.url, after.BodyBytes, markerNote(after))
	case after.Replayed != "":
		return differs("the second GET with the same key was marked %s: the key was honoured on a read", after.Replayed)
	}
	return pass("two GETs with one key, a payment between them, were two reads (%d then %d bytes)", before.BodyBytes, after.BodyBytes)
}

// Case 14: the key's header name is case-insensitive, as every header
// name is: the key sent under "idempotency-key", then under
// "Idempotency-Key", is one key.
func caseHeaderCase(ctx context.Context, r *run) Result {
	q := r.action(14)
	lower := q
	lower.lowerHeader = true
	first := r.send(ctx, lower)
	name := strings.ToLower(r.cfg.KeyHeader)
	if !first.ok() {
		if first.Status == http.StatusBadRequest {
			return differs("a payment with its key under %q was refused with %s%s: the header name was read in one case only", name, first, excerpt(first))
		}
		r.alive(ctx, fmt.Sprintf("a payment with its key under %q was answered %s", name, first))
		return fail(false, "a payment with its key under %q was answered %s%s", name, first, excerpt(first))
	}
	second := r.send(ctx, q)
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		bad.Detail = fmt.Sprintf("the key under %q, then under %q: %s", name, r.cfg.KeyHeader, bad.Detail)
		return *bad
	}
	switch {
	case second.same(first):
		return pass("the key under %q, then under %q: one key (the same %d and bytes)", name, r.cfg.KeyHeader, second.Status)
	case second.ok():
		return fail(true, "the key under %q, then under %q: two payments (%s, then %s)%s", name, r.cfg.KeyHeader, first, second, diffNote(first, second))
	}
	return differs("the key under %q was taken (%s), the same request under %q then answered %s%s", name, first, r.cfg.KeyHeader, second, excerpt(second))
}

// Case 15: the same JSON with its members reordered is the same request:
// a replay, never a second payment. A server that compares bytes and
// refuses it is safe (DIFFERS); one that charges it again is not.
func caseReordered(ctx context.Context, r *run) Result {
	q := r.action(15)
	flipped, ok := bodies.Reorder(r.body(q), r.cfg.Form)
	if !ok {
		return skip("the body has fewer than two members to reorder")
	}
	first, bad := r.firstPayment(ctx, q)
	if bad != nil {
		return *bad
	}
	hr, _, _ := r.newRequest(ctx, q)
	rq := q
	rq.fingerprintAs = first.Fingerprint
	rq.noRecord = true
	a := r.sendBody(ctx, rq, hr, flipped)
	r.record(a.Record)
	if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
		bad.Detail = fmt.Sprintf("the same body with its members reordered (%s), with the same key: %s", short(flipped, 80), bad.Detail)
		return *bad
	}
	switch {
	case a.same(first):
		return pass("the same body with its members reordered got the first answer again (%d, the same bytes)", a.Status)
	case a.ok():
		return fail(true, "the same body with its members reordered (%s), with the same key, got another success%s", short(flipped, 80), diffNote(first, a))
	case a.NoAnswer || a.Status >= 500:
		return fail(false, "the same body with its members reordered was answered %s%s", a, excerpt(a))
	}
	return differs("the same body with its members reordered (%s) was refused with %s%s: the server compares bytes, not the request (safe, but a client that re-encodes its body cannot retry)", short(flipped, 80), a, excerpt(a))
}

// sendBody sends q with body in place of its own.
func (r *run) sendBody(ctx context.Context, q req, hr *http.Request, body string) answer {
	nr, err := http.NewRequestWithContext(ctx, hr.Method, hr.URL.String(), strings.NewReader(body))
	rec := r.recordOf(q, hr.Method, hr.URL.String(), body)
	rec.Start = time.Now()
	if err != nil {
		rec.End, rec.NoAnswer, rec.Error = time.Now(), true, err.Error()
		return answer{Record: rec}
	}
	nr.Header = hr.Header.Clone()
	res, err := r.client.Do(nr)
	return r.finish(rec, res, err)
}

// Case 16: a replay says it is one (informational): the draft's
// Idempotent-Replayed, or one of the names servers use for it.
func caseReplayMarker(ctx context.Context, r *run) Result {
	q := r.action(16)
	first, bad := r.firstPayment(ctx, q)
	if bad != nil {
		return *bad
	}
	second := r.send(ctx, q)
	switch {
	case !second.same(first):
		return Result{Verdict: Info, Detail: fmt.Sprintf("the replay was answered %s, not the first answer (case 1 says more)", second)}
	case first.Replayed != "":
		return Result{Verdict: Info, Detail: fmt.Sprintf("the first answer, not a replay, was marked %s already: the marker tells nothing", first.Replayed)}
	case second.Replayed != "":
		return Result{Verdict: Info, Detail: "replays are marked " + second.Replayed + "; first answers are not"}
	}
	return Result{Verdict: Info, Detail: "replays are not marked (no " + strings.Join(replayHeaders, ", ") + "): a client cannot tell a replay from a first answer"}
}

// Case 17: what a 4xx and a 5xx leave under a key. The gateway declines
// a charge (the endpoint answers a 4xx or a 5xx), or charges and never
// answers (a 5xx); then the same request is sent again with the gateway
// well. The answer is saved and replayed (Stripe's way), or the key is
// freed and the retry runs (the draft's). Each is tried twice: a policy
// must be the same every time.
func caseFailurePolicy(ctx context.Context, r *run) Result {
	if !r.gatewayUsed {
		return skip("needs -gateway, whose switches make the endpoint fail")
	}
	type outcome struct{ what, policy string }
	try := func(sw map[string]any, what string) (outcome, *Result) {
		q := r.action(17)
		if err := r.gatewaySwitches(ctx, sw); err != nil {
			res := fail(false, "setting the gateway's switches: %v", err)
			return outcome{}, &res
		}
		a := r.send(ctx, q)
		if err := r.gatewaySwitches(context.WithoutCancel(ctx), map[string]any{}); err != nil {
			res := fail(false, "turning the gateway's switches off: %v", err)
			return outcome{}, &res
		}
		if a.ok() {
			return outcome{what: fmt.Sprintf("%s: answered %s", what, a), policy: "success"}, nil
		}
		if wait, ok := a.retryAfter(); ok {
			_ = r.cfg.Wait(ctx, min(wait, maxRetryWait))
		}
		b, _ := r.retryUntilAnswered(ctx, q)
		if bad, _ := r.checkEffects(ctx, q, 1); bad != nil && b.ok() {
			return outcome{}, bad
		}
		switch {
		case b.same(a):
			return outcome{what: fmt.Sprintf("%s: %s, saved and replayed", what, statusOnly(a)), policy: "saved"}, nil
		case b.ok():
			return outcome{what: fmt.Sprintf("%s: %s, then the retry ran (%d)", what, statusOnly(a), b.Status), policy: "freed"}, nil
		}
		return outcome{what: fmt.Sprintf("%s: %s, then the retry got %s%s", what, a, b, excerpt(b)), policy: "other " + statusOnly(b)}, nil
	}
	var lines []string
	var saved5xx bool
	for _, kind := range []struct {
		sw   map[string]any
		what string
	}{
		{map[string]any{"refuse": true}, "a declined charge"},
		{map[string]any{"timeout": true}, "a gateway that charged and never answered"},
	} {
		o1, bad := try(kind.sw, kind.what)
		if bad != nil {
			return *bad
		}
		o2, bad := try(kind.sw, kind.what)
		if bad != nil {
			return *bad
		}
		if o1.policy != o2.policy {
			return fail(false, "%s, twice: %s; then %s: a client cannot know what a retry does", kind.what, o1.what, o2.what)
		}
		lines = append(lines, o1.what)
		if kind.what != "a declined charge" && o1.policy == "saved" {
			saved5xx = true
		}
	}
	detail := "the same each of two times: " + strings.Join(lines, "; ")
	if saved5xx && r.cfg.Profile == ProfileDraft {
		return differs("%s; a saved 5xx is Stripe's way (-profile stripe), the draft frees the key for a retry", detail)
	}
	return pass("%s", detail)
}

// Case 18: a key reused once the published retention is over runs again,
// as a new request (with -replay-after longer than the retention).
func caseReuseAfterRetention(ctx context.Context, r *run) Result {
	if r.cfg.ReplayAfter == 0 {
		return skip("needs -replay-after, longer than the endpoint's retention of keys")
	}
	if r.policy != nil && r.policy.retention > r.cfg.ReplayAfter {
		return skip("-replay-after %s is shorter than the published retention, %s", r.cfg.ReplayAfter, r.policy.retention)
	}
	old := r.reuse
	if old == nil {
		q := r.action(18)
		first, bad := r.firstPayment(ctx, q)
		if bad != nil {
			return *bad
		}
		if err := r.cfg.Wait(ctx, r.cfg.ReplayAfter); err != nil {
			return fail(false, "waiting -replay-after: %v", err)
		}
		old = &reusedKey{q: q, first: first, at: time.Now()}
	}
	q := r.action(18)
	q.key = old.q.key
	q.recordKey = old.q.key + " (reused after " + r.cfg.ReplayAfter.String() + ")"
	a := r.send(ctx, q)
	switch {
	case a.ok() && a.sameBody(old.first):
		return fail(true, "%s after it paid for %s, the key sent for another payment (%s) got that first payment's answer%s", r.cfg.ReplayAfter, old.q.action, q.action, markerNote(a))
	case a.ok():
		if bad, _ := r.checkEffects(ctx, q, 1); bad != nil {
			return *bad
		}
		return pass("%s later, the key ran again as a new payment (%s)", r.cfg.ReplayAfter, a)
	case a.NoAnswer || a.Status >= 500:
		return fail(false, "%s later, the key sent for another payment was answered %s%s", r.cfg.ReplayAfter, a, excerpt(a))
	}
	return differs("%s later, the key sent for another payment was refused with %s%s: it is still held (the published retention: %s)", r.cfg.ReplayAfter, a, excerpt(a), r.publishedRetention())
}

func (r *run) publishedRetention() string {
	if r.policy == nil {
		return "none found"
	}
	return r.policy.retention.String()
}

// Case 19: refusals say why in a form a program reads: 409 and 422 are
// application/problem+json with a "type" (under -profile stripe, JSON
// with an error object and its type). It reads the refusals the cases
// before it provoked; with none among them, it provokes a 422.
func caseProblemJSON(ctx context.Context, r *run) Result {
	var refusals []Record
	for _, rec := range r.records() {
		if rec.Kind == KindRequest && rec.Caller == "main" && (rec.Status == http.StatusConflict || rec.Status == http.StatusUnprocessableEntity) {
			refusals = append(refusals, rec)
		}
	}
	if len(refusals) == 0 && strings.Contains(r.cfg.Body, "{{amount}}") {
		q := r.action(19)
		if _, bad := r.firstPayment(ctx, q); bad != nil {
			return *bad
		}
		q.amount++
		if a := r.send(ctx, q); a.Status == http.StatusConflict || a.Status == http.StatusUnprocessableEntity {
			refusals = append(refusals, a.Record)
		}
	}
	if len(refusals) == 0 {
		return skip("no request was answered 409 or 422")
	}
	seen := map[int]bool{}
	for _, rec := range refusals {
		seen[rec.Status] = true
		if why := r.notProblem(rec); why != "" {
			return differs("a %d (case %d) %s%s", rec.Status, rec.Case, why, excerptOf(rec.Response))
		}
	}
	var codes []string
	for _, c := range []int{409, 422} {
		if seen[c] {
			codes = append(codes, fmt.Sprint(c))
		}
	}
	form := "application/problem+json with a type"
	if r.cfg.Profile == ProfileStripe {
		form = "JSON with an error object and its type"
	}
	return pass("%d refusals (%s), every one %s", len(refusals), strings.Join(codes, " and "), form)
}

// notProblem says what is wrong with rec as a refusal under the profile,
// "" when nothing is.
func (r *run) notProblem(rec Record) string {
	mt, _, _ := mime.ParseMediaType(rec.ContentType)
	var body map[string]json.RawMessage
	parsed := json.Unmarshal([]byte(rec.Response), &body) == nil
	if r.cfg.Profile == ProfileStripe {
		var e struct {
			Type string `json:"type"`
		}
		if !parsed || json.Unmarshal(body["error"], &e) != nil || e.Type == "" {
			return fmt.Sprintf("is %q without an error object holding a type, as Stripe's are", orDefault(rec.ContentType, "no Content-Type"))
		}
		return ""
	}
	switch {
	case mt != "application/problem+json":
		return fmt.Sprintf("is %q, not application/problem+json", orDefault(rec.ContentType, "no Content-Type"))
	case !parsed:
		return "is not a JSON object"
	}
	var typ string
	if json.Unmarshal(body["type"], &typ) != nil || typ == "" {
		return "has no \"type\""
	}
	return ""
}
