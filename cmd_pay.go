package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"paytwice/sim"
	"paytwice/views"
)

// runPay is "paytwice pay": one payment through sim.RetryClient against a
// running server, printing every attempt as it happens. The same key goes
// with every attempt; -key resumes a payment whose outcome is unknown
// instead of starting a new one. Ctrl-C stops it between attempts.
//
// It does what the README asks of every client: it stops at a replayed
// answer or Stripe-Should-Retry: false, waits as long as Retry-After says
// within its -budget, and after a 500 or an outcome it could not learn it
// looks the order up and prints what the server recorded. Each attempt
// goes on a connection of its own, so Go's transport cannot resend one by
// itself: the attempts printed are the attempts the server saw.
func runPay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pay", "Pays once through POST /v1/payments with one idempotency key, retrying network failures,\n"+
		"409, 429 and 5xx with full-jitter backoff, and prints each attempt.", stdout, stderr)
	def := sim.DefaultPolicy()
	baseURL := fs.String("url", "http://127.0.0.1:8080", "the paytwice server")
	order := fs.String("order", "A-1001", "order id")
	amount := fs.Int64("amount", 129900, "amount in satang (100 satang = 1 baht)")
	token := fs.String("token", "", "bearer token: your own demo account (keys are scoped per token)")
	key := fs.String("key", "", "idempotency key to reuse (default: a new random UUID)")
	retries := fs.Int("retries", def.MaxRetries, "retries after the first attempt")
	base := fs.Duration("base", def.Base, "backoff base (first ceiling)")
	maxWait := fs.Duration("cap", def.Cap, "backoff cap (longest wait)")
	timeout := fs.Duration("timeout", sim.DefaultAttemptTimeout, "time-out of each attempt")
	budget := fs.Duration("budget", defaultPayBudget, "longest the whole payment may take, waits included; Retry-After is waited in full within it")
	unquoted := fs.Bool("unquoted", false, "send the key bare, as Stripe does, instead of as a quoted structured-field string")
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	switch {
	case *order == "":
		return badValue("-order must not be empty")
	case *amount <= 0:
		return badValue("-amount must be a positive number of satang")
	case !strings.HasPrefix(*baseURL, "http://") && !strings.HasPrefix(*baseURL, "https://"):
		return badValue("-url must start with http:// or https://, not %q", *baseURL)
	case *timeout <= 0:
		return badValue("-timeout must be positive")
	case *budget <= 0:
		return badValue("-budget must be positive")
	}
	policy := sim.Policy{Base: *base, Cap: *maxWait, MaxRetries: *retries, Strategy: sim.FullJitter}
	if err := policy.Validate(); err != nil {
		return flagError(err)
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	client := &sim.RetryClient{
		BaseURL:        *baseURL,
		HTTPClient:     sim.FreshConnections(),
		Budget:         *budget,
		Token:          *token,
		Policy:         policy,
		AttemptTimeout: *timeout,
		UnquotedKey:    *unquoted,
		OnAttempt:      func(a sim.Attempt) { printAttempt(stdout, a) },
	}
	k := *key
	if k == "" {
		k = sim.NewIdempotencyKey()
	}
	fmt.Fprintf(stdout, "paying order %s, %s baht (%d satang), at %s\n", *order, views.Baht(*amount), *amount, *baseURL)
	fmt.Fprintf(stdout, "idempotency key %s (the same on every attempt)\n", k)
	res, err := client.PayWithKey(ctx, k, sim.PaymentRequest{OrderID: *order, AmountSatang: *amount})
	if res.Status != 0 {
		final := ""
		if res.Replayed {
			final = ", replayed from the saved response: final, sending it again changes nothing"
		} else if !res.GaveUp && res.Status >= 400 {
			final = ": final, sending it again would get the same answer"
		}
		fmt.Fprintf(stdout, "result: %s%s\n%s\n", statusText(res.Status), final, strings.TrimSpace(res.Body))
	}
	var fe *sim.ParamError
	unknown := res.GaveUp || (err != nil && !errors.As(err, &fe) && ctx.Err() == nil) || res.Status == http.StatusInternalServerError || res.Status == http.StatusGatewayTimeout
	if unknown {
		if res.GaveUp {
			fmt.Fprintf(stdout, "stopped after %d attempts without a final answer; looking the order up\n", len(res.Attempts))
		} else {
			fmt.Fprintln(stdout, "the answer does not say whether the order was charged; looking the order up")
		}
		printLookup(ctx, stdout, *baseURL, *token, *order, res.Key)
	}
	switch {
	case errors.As(err, &fe):
		return flagError(err)
	case err != nil:
		return err
	case res.Status < 200 || res.Status > 299:
		return fmt.Errorf("the payment did not succeed: %s", statusText(res.Status))
	}
	return nil
}

// printAttempt prints one attempt on one line: its number, the key, the
// status (or the network error), whether it was a replay, and the wait
// before the next attempt.
func printAttempt(w io.Writer, a sim.Attempt) {
	outcome := statusText(a.Status)
	if a.Status == 0 {
		outcome = "no response: " + a.Error
	}
	var extra []string
	if a.Replayed {
		extra = append(extra, "replayed")
	}
	if a.RetryAfter > 0 {
		extra = append(extra, "Retry-After "+views.Seconds(a.RetryAfter.Seconds())+" s")
	}
	if a.Wait > 0 {
		extra = append(extra, "waiting "+views.Seconds(a.Wait.Round(time.Millisecond).Seconds())+" s before the next attempt")
	}
	line := fmt.Sprintf("attempt %d  key %s  %s", a.Number, a.Key, outcome)
	if len(extra) > 0 {
		line += "  (" + strings.Join(extra, ", ") + ")"
	}
	fmt.Fprintln(w, line)
}

func statusText(code int) string {
	return fmt.Sprintf("%d %s", code, http.StatusText(code))
}

// defaultPayBudget covers the server's longest hint with the default
// settings: a 504's Retry-After (lock timeout plus one sweep period, 35 s)
// and the retry after it.
const defaultPayBudget = time.Minute

// printLookup asks the server for the order's charges
// (GET /v1/payments?order_id=) and says what they mean for the payment.
func printLookup(ctx context.Context, w io.Writer, baseURL, token, order, key string) {
	charges, err := lookUpOrder(ctx, baseURL, token, order)
	switch {
	case err != nil:
		fmt.Fprintf(w, "the look-up failed (%v): the outcome is unknown, so keep the key and run again later with -key %s\n", err, key)
	case len(charges) == 0:
		fmt.Fprintf(w, "order %s: no charge recorded. If the key is still open (a request that stopped midway), the sweeper closes it after the lock timeout: run again with -key %s to learn the outcome; never pay it under a new key before then.\n", order, key)
	default:
		fmt.Fprintf(w, "order %s: %d charge(s) recorded, so it is paid: do not pay it again\n", order, len(charges))
		for _, ch := range charges {
			fmt.Fprintf(w, "  %s  %s baht (%d satang)  %s\n", ch.ID, views.Baht(ch.AmountSatang), ch.AmountSatang, ch.CreatedAt)
		}
	}
}

// recordedCharge is one charge as GET /v1/payments lists it.
type recordedCharge struct {
	ID           string `json:"charge_id"`
	AmountSatang int64  `json:"amount_satang"`
	CreatedAt    string `json:"created_at"`
}

func lookUpOrder(ctx context.Context, baseURL, token, order string) ([]recordedCharge, error) {
	ctx, cancel := context.WithTimeout(ctx, lookUpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+sim.PaymentsPath+"?order_id="+url.QueryEscape(order), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := sim.FreshConnections().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s", req.URL.Path, statusText(resp.StatusCode))
	}
	var body struct {
		Charges []recordedCharge `json:"charges"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("the look-up's body: %w", err)
	}
	return body.Charges, nil
}

// lookUpTimeout bounds the order's look-up.
const lookUpTimeout = 10 * time.Second
