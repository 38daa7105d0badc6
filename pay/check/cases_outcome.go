package check

import (
	"context"
	"fmt"
	"time"
)

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
