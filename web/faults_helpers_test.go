package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

// fiEnv is a testEnv with the helpers the failure-injection tests share.
type fiEnv struct {
	*testEnv
	// client never reuses a connection. Go's transport silently resends a
	// request that carries an Idempotency-Key when a reused connection
	// closes without an answer; these tests must see the dropped
	// connection itself.
	client *http.Client
}

func newFIEnv(t *testing.T, cfg Config) *fiEnv {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &fiEnv{testEnv: newTestEnv(t, cfg), client: &http.Client{Transport: conformingTransport{tr}, Timeout: 20 * time.Second}}
}

// call sends one request; body "" sends none. Extra headers come as name,
// value pairs. A dropped connection is returned as the error.
func (e *fiEnv) call(method, path, body string, headers ...string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		return response{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1] // the transport sends Request.Host, never a Host in Header
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}, err
}

// must is call that fails the test on a transport error.
func (e *fiEnv) must(method, path, body string, headers ...string) response {
	e.t.Helper()
	r, err := e.call(method, path, body, headers...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// payFI posts a payment with the key; the error is a dropped connection.
func (e *fiEnv) payFI(key, body string) (response, error) {
	return e.call(http.MethodPost, paymentsPath, body, "Idempotency-Key", key)
}

// mustPay posts a payment and fails the test if the connection drops.
func (e *fiEnv) mustPay(key, body string) response {
	e.t.Helper()
	r, err := e.payFI(key, body)
	if err != nil {
		e.t.Fatalf("payment with key %s: %v", key, err)
	}
	return r
}

// mustDrop posts a payment that must end with a dropped connection.
func (e *fiEnv) mustDrop(key, body string) {
	e.t.Helper()
	r, err := e.payFI(key, body)
	if err == nil {
		e.t.Fatalf("payment with key %s: got %d %s, want the connection dropped", key, r.Status, r.Body)
	}
}

// setFaults replaces every switch through PUT /api/faults.
func (e *fiEnv) setFaults(body string) {
	e.t.Helper()
	if r := e.must(http.MethodPut, "/api/faults", body); r.Status != http.StatusOK {
		e.t.Fatalf("PUT /api/faults %s: %d %s", body, r.Status, r.Body)
	}
}

// sweepNow runs POST /api/sweep.
func (e *fiEnv) sweepNow() SweepReport {
	e.t.Helper()
	r := e.must(http.MethodPost, "/api/sweep", "")
	if r.Status != http.StatusOK {
		e.t.Fatalf("POST /api/sweep: %d %s", r.Status, r.Body)
	}
	var rep SweepReport
	if err := json.Unmarshal(r.Body, &rep); err != nil {
		e.t.Fatalf("sweep report %s: %v", r.Body, err)
	}
	return rep
}

// pastLockTimeout ages every key beyond the lock timeout.
func (e *fiEnv) pastLockTimeout() {
	e.Clock.Advance(e.Server.cfg.LockTimeout + time.Second)
}

// keyStatus is the key's status in the anonymous scope, "" if absent.
func (e *fiEnv) keyStatus(key string) string {
	e.t.Helper()
	k, err := e.DB.GetKey(context.Background(), AnonymousScope, key)
	if pay.ErrorCode(err) == pay.ENOTFOUND {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return k.Status
}

// chargesFor counts the local charges of an order in the anonymous scope;
// every test pays each key for its own order.
func (e *fiEnv) chargesFor(order string) int {
	e.t.Helper()
	cs, err := e.DB.ChargesByOrder(context.Background(), AnonymousScope, order)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(cs)
}

// gatewayCharged reports whether the gateway holds a charge for the key.
func (e *fiEnv) gatewayCharged(key string) bool {
	e.t.Helper()
	_, ok, err := e.DB.LookupGatewayCharge(context.Background(), gatewayKey(AnonymousScope, key))
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// waitForEvent blocks, on the hub and not on a timer, until an event of
// the kind for the key has been published.
func (e *fiEnv) waitForEvent(kind live.Kind, key string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := e.Server.hub.Subscribe(0)
	for {
		entries, err := sub.Next(ctx)
		if err != nil {
			e.t.Fatalf("no %s event for key %s: %v", kind, key, err)
		}
		for _, en := range entries {
			if en.Kind == kind && en.Key == key {
				return
			}
		}
	}
}

// holdServerDelay makes the delay fault wait until release is called.
func (e *fiEnv) holdServerDelay() (release func()) {
	ch := make(chan struct{})
	e.Server.payments.sleep = func(ctx context.Context, d time.Duration) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return func() { close(ch) }
}

// isReplay reports whether r carries Idempotent-Replayed: true.
func isReplay(r response) bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// problemSlug is the last segment of a problem+json body's type.
func problemSlug(t testing.TB, r response) string {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json (body %s)", ct, r.Body)
	}
	var p Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.Body, err)
	}
	i := strings.LastIndex(p.Type, "/problems/")
	if i < 0 || p.Status != r.Status || p.Detail == "" {
		t.Fatalf("incomplete problem %s", r.Body)
	}
	return p.Type[i+len("/problems/"):]
}
