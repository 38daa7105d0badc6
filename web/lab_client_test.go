package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/sim"
)

// labClient is a Go client that can make the lab's client-side mistakes,
// exactly as pay.js does when the lab's switches are on: a new key for
// each retry, retrying every 4xx, paying again under a new key after a
// 500. With every mistake off it is a correct client: one key per
// payment, retries only where they can help, and a look-up by order after
// a 500. It does not wait between attempts (the tests need no backoff)
// and uses a connection per request, so that a lost response is seen as
// lost rather than quietly re-sent by Go's transport.
type labClient struct {
	base    string
	token   string
	retries int

	newKeyPerRetry bool
	retryEvery4xx  bool
	newKeyAfter500 bool
}

type labAttempt struct {
	Key      string
	Status   int // 0: no response
	Replayed bool
	Body     string
}

type labPayResult struct {
	Attempts []labAttempt
	// Reconciled is set when the client looked the order up after a 500
	// and found it paid.
	Reconciled bool
}

var labHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func (c *labClient) send(key string, req sim.PaymentRequest) labAttempt {
	body, _ := json.Marshal(req)
	r, _ := http.NewRequest(http.MethodPost, c.base+paymentsPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Authorization", "Bearer "+c.token)
	res, err := labHTTP.Do(r)
	if err != nil {
		return labAttempt{Key: key}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return labAttempt{Key: key, Status: res.StatusCode, Replayed: res.Header.Get("Idempotent-Replayed") == "true", Body: string(b)}
}

func (c *labClient) retryable(a labAttempt) bool {
	if a.Status == 0 || sim.Retryable(a.Status) {
		return true
	}
	return c.retryEvery4xx && a.Status >= 400 && a.Status < 500
}

// run sends one payment and its retries.
func (c *labClient) run(key string, req sim.PaymentRequest, out *labPayResult) labAttempt {
	var last labAttempt
	for attempt := 0; ; attempt++ {
		if attempt > 0 && c.newKeyPerRetry {
			key = uuid.NewString() // the mistake
		}
		last = c.send(key, req)
		out.Attempts = append(out.Attempts, last)
		if !c.retryable(last) || attempt >= c.retries {
			return last
		}
	}
}

// pay is one customer action, as the page's Pay button makes it.
func (c *labClient) pay(t *testing.T, key string, req sim.PaymentRequest) labPayResult {
	t.Helper()
	var res labPayResult
	last := c.run(key, req, &res)
	if last.Status != http.StatusInternalServerError {
		return res
	}
	if c.newKeyAfter500 {
		c.run(uuid.NewString(), req, &res) // the mistake: a new key, once
		return res
	}
	res.Reconciled = c.reconcile(t, req.OrderID)
	return res
}

// reconcile looks the order up, as a client should after a 500.
func (c *labClient) reconcile(t *testing.T, order string) bool {
	t.Helper()
	r, _ := http.NewRequest(http.MethodGet, c.base+paymentsPath+"?order_id="+order, nil)
	r.Header.Set("Authorization", "Bearer "+c.token)
	res, err := labHTTP.Do(r)
	if err != nil {
		t.Fatalf("reconciling: %v", err)
	}
	defer res.Body.Close()
	var body struct {
		Paid bool `json:"paid"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("reconciling: %v", err)
	}
	return body.Paid
}

func statuses(as []labAttempt) string {
	var out []string
	for _, a := range as {
		s := "network"
		if a.Status != 0 {
			s = http.StatusText(a.Status)
			if a.Replayed {
				s += " (replayed)"
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func distinctKeys(as []labAttempt) int {
	seen := map[string]bool{}
	for _, a := range as {
		seen[a.Key] = true
	}
	return len(seen)
}

// goodClient is the project's own retrying client with no waiting, on a
// connection per request.
func goodClient(env *testEnv, token string, retries int) *sim.RetryClient {
	return &sim.RetryClient{BaseURL: env.URL, Token: token, HTTPClient: labHTTP,
		Policy: sim.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxRetries: retries, Strategy: sim.FullJitter},
		Sleep:  func(context.Context, time.Duration) error { return nil }}
}

// TestLabMistakeNewKeyOnEveryRetry: with the response lost, a client that
// makes a new key for each retry pays once per attempt; the same client
// keeping its key is replayed and pays once.
func TestLabMistakeNewKeyOnEveryRetry(t *testing.T) {
	t.Parallel()
	req := sim.PaymentRequest{OrderID: "A-2002", AmountSatang: 129900}

	t.Run("a new key per retry charges on every attempt", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		setFaults(t, env, pay.ServerFaults{ResponseLost: true})
		c := &labClient{base: env.URL, token: "retry-newkey", retries: 2, newKeyPerRetry: true}
		res := c.pay(t, uuid.NewString(), req)
		if len(res.Attempts) != 3 || distinctKeys(res.Attempts) != 3 {
			t.Fatalf("attempts %s with %d keys, want 3 attempts with 3 keys", statuses(res.Attempts), distinctKeys(res.Attempts))
		}
		if n := env.charges(); n != 3 {
			t.Fatalf("%d charges, want 3: every retry under a new key is a new payment", n)
		}
		o := env.outcomes()
		if o.NewKeyPerRetry.ChargedTwice != 1 || o.NewKeyPerRetry.ExtraCharges != 2 {
			t.Fatalf("the lab measured %+v, want 1 order charged twice with 2 extra charges", o.NewKeyPerRetry)
		}
	})
	t.Run("the same key on every retry is replayed and charges once", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		setFaults(t, env, pay.ServerFaults{ResponseLost: true})
		res, err := goodClient(env, "retry-samekey", 2).Pay(context.Background(), req)
		if err != nil || res.Status != http.StatusCreated || !res.Replayed {
			t.Fatalf("the retrying client ended with %d (replayed %v), err %v; want the replayed 201", res.Status, res.Replayed, err)
		}
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
		if o := env.outcomes(); o.NewKeyPerRetry.ChargedTwice != 0 {
			t.Fatalf("the lab measured %+v, want no order charged twice", o.NewKeyPerRetry)
		}
	})
}

// TestLabMistakeRetryingEvery4xx: a 422 (and a 400) is the same answer
// every time; a client that retries it wastes every retry, and the server
// counts them. The correct client sends it once.
func TestLabMistakeRetryingEvery4xx(t *testing.T) {
	t.Parallel()
	first := sim.PaymentRequest{OrderID: "A-4004", AmountSatang: 129900}
	changed := sim.PaymentRequest{OrderID: "A-4004", AmountSatang: 135000}

	t.Run("retrying a 422 wastes every retry", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		c := &labClient{base: env.URL, token: "retry-4xx", retries: 5, retryEvery4xx: true}
		key := uuid.NewString()
		c.pay(t, key, first)
		res := c.pay(t, key, changed)
		if len(res.Attempts) != 6 {
			t.Fatalf("attempts %s, want 6 (1 + 5 retries)", statuses(res.Attempts))
		}
		for _, a := range res.Attempts {
			if a.Status != http.StatusUnprocessableEntity {
				t.Fatalf("attempts %s: every one should be 422", statuses(res.Attempts))
			}
		}
		o := env.outcomes()
		if o.RetryEvery4xx.WastedAttempts != 5 || o.RetryEvery4xx.Refusals != 6 {
			t.Fatalf("the lab counted %+v, want 6 refusals of which 5 wasted", o.RetryEvery4xx)
		}
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("retrying a 400 wastes every retry too", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		c := &labClient{base: env.URL, token: "retry-400", retries: 3, retryEvery4xx: true}
		var res labPayResult
		c.run(uuid.NewString(), sim.PaymentRequest{OrderID: "", AmountSatang: 100}, &res) // an empty order id is a 400
		if len(res.Attempts) != 4 || res.Attempts[0].Status != http.StatusBadRequest {
			t.Fatalf("attempts %s, want four 400s", statuses(res.Attempts))
		}
		if o := env.outcomes(); o.RetryEvery4xx.WastedAttempts != 3 {
			t.Fatalf("the lab counted %+v, want 3 wasted", o.RetryEvery4xx)
		}
	})
	t.Run("the correct client sends a 422 once", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		gc := goodClient(env, "no-retry-4xx", 5)
		key := uuid.NewString()
		if _, err := gc.PayWithKey(context.Background(), key, first); err != nil {
			t.Fatal(err)
		}
		res, err := gc.PayWithKey(context.Background(), key, changed)
		if err != nil || len(res.Attempts) != 1 || res.Status != http.StatusUnprocessableEntity {
			t.Fatalf("%d attempts ending %d (err %v), want one 422", len(res.Attempts), res.Status, err)
		}
		if o := env.outcomes(); o.RetryEvery4xx.WastedAttempts != 0 || o.RetryEvery4xx.Refusals != 1 {
			t.Fatalf("the lab counted %+v, want 1 refusal and nothing wasted", o.RetryEvery4xx)
		}
	})
}

// TestLabMistakeNewKeyAfter500: the 500 is saved after the charge. A client
// that pays again under a new key charges twice; one that looks the order
// up finds it paid and charges once.
func TestLabMistakeNewKeyAfter500(t *testing.T) {
	t.Parallel()
	req := sim.PaymentRequest{OrderID: "A-5005", AmountSatang: 129900}

	t.Run("a new key after the 500 charges twice", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		setFaults(t, env, pay.ServerFaults{ServerError: true})
		c := &labClient{base: env.URL, token: "newkey-500", retries: 0, newKeyAfter500: true}
		res := c.pay(t, uuid.NewString(), req)
		if len(res.Attempts) != 2 || distinctKeys(res.Attempts) != 2 || res.Attempts[0].Status != http.StatusInternalServerError {
			t.Fatalf("attempts %s with %d keys, want a 500 then a second payment under another key", statuses(res.Attempts), distinctKeys(res.Attempts))
		}
		if n := env.charges(); n != 2 {
			t.Fatalf("%d charges, want 2", n)
		}
		if o := env.outcomes(); o.NewKeyAfter500.ChargedTwice != 1 || o.NewKeyPerRetry.ChargedTwice != 0 {
			t.Fatalf("the lab measured %+v (and %+v for new keys per retry), want this order counted once, here", o.NewKeyAfter500, o.NewKeyPerRetry)
		}
	})
	t.Run("looking the order up finds it paid", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		setFaults(t, env, pay.ServerFaults{ServerError: true})
		c := &labClient{base: env.URL, token: "reconcile-500", retries: 2}
		res := c.pay(t, uuid.NewString(), req)
		if !res.Reconciled {
			t.Fatalf("attempts %s; the look-up did not find the order paid", statuses(res.Attempts))
		}
		for _, a := range res.Attempts[1:] {
			if a.Status != http.StatusInternalServerError || !a.Replayed {
				t.Fatalf("attempts %s: retries with the same key should replay the saved 500", statuses(res.Attempts))
			}
		}
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
		if o := env.outcomes(); o.NewKeyAfter500.ChargedTwice != 0 || o.NewKeyAfter500.Reconciliations != 1 {
			t.Fatalf("the lab measured %+v, want 1 look-up and no order charged twice", o.NewKeyAfter500)
		}
	})
}
