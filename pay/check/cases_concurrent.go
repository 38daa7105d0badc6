package check

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

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
	// Two different successes for one key are two payments, whatever the
	// others say: told at once (Config.OnSafety), not after the slowest.
	answers := make([]answer, n)
	var early sync.Mutex
	successes, told := map[string]bool{}, false
	for i, c := range conns {
		wg.Go(func() {
			hr, _, _ := r.newRequest(ctx, q)
			a := c.read(r, hr)
			answers[i] = a
			if !a.ok() || a.bound != "" {
				return
			}
			early.Lock()
			successes[a.BodySHA256] = true
			tell := len(successes) == 2 && !told
			told = told || tell
			early.Unlock()
			if tell {
				r.notice(fail(true, "%d requests released within %s: 2 different successful bodies for one key before the storm's last answer came: at least 2 payments", n, spread.Round(10*time.Microsecond)))
			}
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
