package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"paytwice/pay"
)

// PaymentsPath is the endpoint the retrying client posts to.
const PaymentsPath = "/v1/payments"

// DefaultAttemptTimeout bounds one attempt when RetryClient.AttemptTimeout is
// zero. It is separate from the caller's context: a hung attempt is abandoned
// and retried (with the same key), while the caller's deadline ends everything.
const DefaultAttemptTimeout = 10 * time.Second

// maxResponseBody caps what the client reads of one response; payment
// responses are tiny, and a runaway server must not exhaust memory.
const maxResponseBody = 1 << 20

// PaymentRequest is the JSON body of POST /v1/payments. The amount is an
// integer number of satang (1/100 baht), never a float.
type PaymentRequest struct {
	OrderID      string `json:"order_id"`
	AmountSatang int64  `json:"amount_satang"`
}

// RetryClient pays through POST /v1/payments the safe way: one idempotency
// key per payment, reused on every attempt, and polite retries (full jitter
// by default) only where a retry can help. The zero value plus BaseURL is
// ready to use; the other fields exist so tests and the teaching pages can
// make it deterministic. A RetryClient may be used by several goroutines at
// once; do not copy it after first use.
//
// Note that net/http's Transport treats a request carrying Idempotency-Key
// as replayable: if a kept-alive connection turns out to be dead before any
// response, it may resend the request once by itself. The server then sees
// one attempt more than Attempts records, under the same key, which is
// harmless precisely because of the key. An HTTPClient whose transport
// opens a fresh connection per request (FreshConnections) makes that
// resend impossible, so Attempts is every attempt the server saw.
type RetryClient struct {
	// BaseURL is the server, e.g. "http://127.0.0.1:8080"; PaymentsPath is
	// appended.
	BaseURL string
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>"; the
	// server scopes keys per token.
	Token string
	// Policy is the retry policy; the zero Policy means DefaultPolicy().
	Policy Policy
	// Budget, when positive, bounds the whole payment, waits included, and
	// lets the server's Retry-After hint lengthen a wait beyond
	// Policy.Cap: a server that knows when the answer will be ready (a 504
	// or a 409 on a key only the sweeper can close) is then asked again
	// at that time, if that time falls within the budget. A retry whose
	// wait would end past the budget is not made (GaveUp).
	Budget time.Duration
	// AttemptTimeout bounds each attempt; zero means DefaultAttemptTimeout.
	AttemptTimeout time.Duration
	// UnquotedKey sends the key bare, as Stripe does, instead of as the
	// quoted Structured Field String of the IETF draft (the default).
	UnquotedKey bool
	// Rand, when set, supplies the jitter (guarded by a mutex); nil uses the
	// global source.
	Rand *rand.Rand
	// Sleep waits between attempts; it must return early with an error when
	// ctx is done. Nil means a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock used for HTTP-date Retry-After values and attempt
	// durations; nil means time.Now.
	Now func() time.Time
	// NewKey makes the key of each new payment; nil means NewIdempotencyKey.
	NewKey func() string
	// OnAttempt, when set, is called after each attempt (with its Wait
	// already decided, before sleeping), so a CLI or a page can show the
	// attempts as they happen.
	OnAttempt func(Attempt)

	// attemptContext derives the context of attempt n, bounded by timeout;
	// nil means context.WithTimeout. Tests replace it so that whether an
	// attempt timed out is decided by the test, not by a busy machine's
	// scheduler.
	attemptContext func(ctx context.Context, n int, timeout time.Duration) (context.Context, context.CancelFunc)

	mu sync.Mutex // guards Rand
}

// Attempt records one try of a payment, for display.
type Attempt struct {
	// Number counts attempts from 1; attempt k+1 is retry k.
	Number int    `json:"number"`
	Key    string `json:"key"`
	// Status is the HTTP status, or 0 if no response arrived.
	Status int `json:"status"`
	// Error describes the network failure or attempt time-out when Status
	// is 0.
	Error string `json:"error,omitempty"`
	// Replayed is true when the server answered with Idempotent-Replayed:
	// true, i.e. from its saved response instead of running again.
	Replayed bool `json:"replayed"`
	// RetryAfter is the server's Retry-After hint (0 when absent).
	RetryAfter time.Duration `json:"retry_after_ns"`
	// Wait is the time slept before the next attempt; 0 on the last one.
	Wait time.Duration `json:"wait_ns"`
	// Elapsed is how long the attempt took by the client's clock.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Body is the response body (possibly a problem+json document).
	Body string `json:"body,omitempty"`
}

// PayResult is the whole story of one payment.
type PayResult struct {
	Key      string    `json:"key"`
	Attempts []Attempt `json:"attempts"`
	// Status and Body are those of the last response received (0 and empty
	// if none arrived); Replayed is that response's Idempotent-Replayed.
	Status   int    `json:"status"`
	Body     string `json:"body"`
	Replayed bool   `json:"replayed"`
	// GaveUp is true when the last attempt still failed in a retryable way
	// and the policy had no retries left, or its wait would have passed
	// the Budget. The charge may or may not have
	// happened, so the caller should keep the key and check or retry later
	// rather than pay anew under a new key.
	GaveUp bool `json:"gave_up"`
}

// NewIdempotencyKey returns a fresh random (version 4) UUID string, the kind
// of key the IETF draft recommends: unique and free of personal data.
func NewIdempotencyKey() string { return uuid.NewString() }

// Retryable reports whether a response status is worth retrying with the
// same key: 409 (the first request is still running), 429 (rate limited) and
// every 5xx (the outcome is unknown or the server is briefly unwell). Every
// other 4xx is the caller's mistake and would fail again however often it is
// sent; 2xx and 3xx are final.
func Retryable(status int) bool {
	return status == http.StatusConflict || status == http.StatusTooManyRequests || (status >= 500 && status <= 599)
}

// Final reports whether an error answer ends the payment however it could
// be retried: a replay of the saved answer, or an answer the server says a
// retry cannot change (Stripe-Should-Retry: false). hdr may be nil.
func Final(replayed bool, hdr http.Header) bool {
	return replayed || (hdr != nil && strings.EqualFold(strings.TrimSpace(hdr.Get("Stripe-Should-Retry")), "false"))
}

// FreshConnections is an HTTP client that opens a new connection for every
// request and never keeps one, so its transport has no reused connection
// on which to resend a request by itself: each attempt reaches the server
// once or not at all.
func FreshConnections() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}}
}

// ParseRetryAfter reads a Retry-After value, either delta-seconds ("3") or
// an HTTP date, relative to now. Dates in the past give 0. ok is false for a
// missing or malformed value. Very large values saturate instead of
// overflowing.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
				return maxDuration, true
			}
			return 0, false
		}
		if secs > uint64(maxDuration/time.Second) {
			return maxDuration, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

const maxDuration = time.Duration(1<<63 - 1)

// Pay makes one payment under a fresh key; see PayWithKey.
func (c *RetryClient) Pay(ctx context.Context, req PaymentRequest) (PayResult, error) {
	newKey := c.NewKey
	if newKey == nil {
		newKey = NewIdempotencyKey
	}
	return c.PayWithKey(ctx, newKey(), req)
}

// PayWithKey makes one payment under the given key, which it sends on every
// attempt; use it to resume a payment whose outcome is unknown (after a
// restart, say) rather than risk a second charge with a new key.
//
// Network failures, attempt time-outs, 409, 429 and 5xx are retried up to
// Policy.MaxRetries times, unless the answer is final: a replay
// (Idempotent-Replayed: true) or one the server says a retry cannot change
// (Stripe-Should-Retry: false), such as a saved 500. Before retry k it
// waits Policy.Wait(k-1, ...) (full jitter: uniform(0, min(cap,
// base·2^(k-1)))). A Retry-After hint raises that wait to at least the
// hint: without a Budget never above Policy.Cap, so a server cannot park
// the client for longer than its own policy allows; with one, up to the
// hint itself, within the budget.
//
// The error is nil whenever a final response arrived, whatever its status;
// inspect Status and GaveUp. It is ctx.Err() when the caller's context ends
// (during an attempt or a wait), and wraps the last network error when no
// attempt got a response. The PayResult is filled in every case, with the
// attempts made so far.
func (c *RetryClient) PayWithKey(ctx context.Context, key string, req PaymentRequest) (PayResult, error) {
	res := PayResult{Key: key}
	pol := c.Policy
	if pol == (Policy{}) {
		pol = DefaultPolicy()
	}
	if err := pol.Validate(); err != nil {
		return res, err
	}
	if c.BaseURL == "" {
		return res, &ParamError{Field: "base_url", Msg: "must be set"}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return res, err
	}
	prev := pol.Base
	start := c.now()
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		a, hdr, netErr := c.attempt(ctx, n, key, body)
		if netErr != nil && ctx.Err() != nil {
			// The caller gave up, not the network: report that, untouched.
			a.Error = ctx.Err().Error()
			res.Attempts = append(res.Attempts, a)
			c.notify(a)
			return res, ctx.Err()
		}
		if netErr == nil {
			res.Status, res.Body, res.Replayed = a.Status, a.Body, a.Replayed
		}
		retryable := netErr != nil || (Retryable(a.Status) && !Final(a.Replayed, hdr))
		last := !retryable || n > pol.MaxRetries
		if !last {
			w := c.wait(pol, n-1, prev)
			prev = w
			if hdr != nil {
				if ra, ok := ParseRetryAfter(hdr.Get("Retry-After"), c.now()); ok {
					a.RetryAfter = ra
					if c.Budget > 0 {
						w = max(w, ra)
					} else {
						w = min(max(w, ra), pol.Cap)
					}
				}
			}
			if c.Budget > 0 && c.now().Sub(start)+w > c.Budget {
				last = true // the next answer would come too late
			} else {
				a.Wait = w
			}
		}
		if last && hdr != nil && a.RetryAfter == 0 {
			a.RetryAfter, _ = ParseRetryAfter(hdr.Get("Retry-After"), c.now())
		}
		res.Attempts = append(res.Attempts, a)
		c.notify(a)
		if last {
			res.GaveUp = retryable
			if netErr != nil {
				return res, fmt.Errorf("payment %s: no response after %d attempts: %w", key, n, netErr)
			}
			return res, nil
		}
		if err := c.sleep(ctx, a.Wait); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return res, ctxErr
			}
			return res, err
		}
	}
}

// attempt sends one request under its own time-out. It returns the record,
// the response header (nil without a response) and the network error, if any.
func (c *RetryClient) attempt(ctx context.Context, n int, key string, body []byte) (Attempt, http.Header, error) {
	a := Attempt{Number: n, Key: key}
	start := c.now()

	timeout := c.AttemptTimeout
	if timeout <= 0 {
		timeout = DefaultAttemptTimeout
	}
	withTimeout := c.attemptContext
	if withTimeout == nil {
		withTimeout = func(ctx context.Context, _ int, d time.Duration) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, d)
		}
	}
	actx, cancel := withTimeout(ctx, n, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(actx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+PaymentsPath, bytes.NewReader(body))
	if err != nil {
		a.Error = err.Error()
		a.Elapsed = c.now().Sub(start)
		return a, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("Idempotency-Key", c.keyHeader(key))
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		a.Error = err.Error()
		a.Elapsed = c.now().Sub(start)
		return a, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		// The status line came but the body did not: as unknown as no
		// response at all, so treat it as a network failure.
		a.Error = "reading response: " + err.Error()
		a.Elapsed = c.now().Sub(start)
		return a, nil, err
	}
	a.Status = resp.StatusCode
	a.Body = string(b)
	a.Replayed = strings.EqualFold(strings.TrimSpace(resp.Header.Get("Idempotent-Replayed")), "true")
	a.Elapsed = c.now().Sub(start)
	return a, resp.Header, nil
}

// keyHeader renders the key as a Structured Field String (quoted, with \ and
// " escaped) unless UnquotedKey is set.
func (c *RetryClient) keyHeader(key string) string {
	if c.UnquotedKey {
		return key
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

func (c *RetryClient) wait(p Policy, n int, prev time.Duration) time.Duration {
	if c.Rand == nil {
		return p.Wait(n, prev, nil)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.Wait(n, prev, c.Rand)
}

func (c *RetryClient) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *RetryClient) notify(a Attempt) {
	if c.OnAttempt != nil {
		c.OnAttempt(a)
	}
}

func (c *RetryClient) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	return pay.Sleep(ctx, d)
}
