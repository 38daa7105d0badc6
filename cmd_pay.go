package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
func runPay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pay", "Pays once through POST /v1/payments with one idempotency key, retrying network failures,\n"+
		"409, 429 and 5xx with full-jitter backoff, and prints each attempt.", stderr)
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
	unquoted := fs.Bool("unquoted", false, "send the key bare, as Stripe does, instead of as a quoted structured-field string")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	switch {
	case *order == "":
		return errors.New("-order must not be empty")
	case *amount <= 0:
		return errors.New("-amount must be a positive number of satang")
	case !strings.HasPrefix(*baseURL, "http://") && !strings.HasPrefix(*baseURL, "https://"):
		return fmt.Errorf("-url must start with http:// or https://, not %q", *baseURL)
	case *timeout <= 0:
		return errors.New("-timeout must be positive")
	}
	policy := sim.Policy{Base: *base, Cap: *maxWait, MaxRetries: *retries, Strategy: sim.FullJitter}
	if err := policy.Validate(); err != nil {
		return flagError(err)
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	client := &sim.RetryClient{
		BaseURL:        *baseURL,
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
		replayed := ""
		if res.Replayed {
			replayed = ", replayed from the saved response"
		}
		fmt.Fprintf(stdout, "result: %s%s\n%s\n", statusText(res.Status), replayed, strings.TrimSpace(res.Body))
	}
	if res.GaveUp {
		fmt.Fprintf(stdout, "gave up after %d attempts: the outcome is unknown, so keep the key and retry later with -key %s\n",
			len(res.Attempts), res.Key)
	}
	var fe *sim.ParamError
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
