package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web"
)

// The article's own Python client, as it is described, against a real
// server with the response-lost switch on: the headline case of the
// article. python3 is required (CI installs it); without it the test
// skips locally and fails with CI=true.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is required with CI=true")
		}
		t.Skip("python3 not found")
	}
	return p
}

func runPython(t *testing.T, py string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = append(os.Environ(), "CLIENT_BACKOFF_SPEEDUP=50")
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out), code
}

func TestTheArticlesClientOnALostResponse(t *testing.T) {
	waitsSideBySide(t) // on the clients' waits for an answer the server never sends
	py := python3(t)
	// Nothing here waits for the sweeper: the work's bound is a minute,
	// so that a loaded machine's slow payment is not answered 504 and
	// then 409 on the client's retries (six attempts ending in HTTPError,
	// where one attempt and a dropped connection are expected).
	target := newPayTargetWithLock(t, 2*time.Minute)
	url := target.url + "/v1/payments"
	charges := func(order string) int {
		t.Helper()
		cs, err := target.db.ChargesByOrder(context.Background(), web.AnonymousScope, order)
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}

	t.Run("as written: the lost response is an exception, and calling it again pays twice", func(t *testing.T) {
		target.setFaults(`{"server":{"response_lost":true}}`)
		out, code := runPython(t, py, "web/clients/article_client.py", url, "ART-1", "129900")
		// urllib raises http.client's RemoteDisconnected, which its
		// except clauses do not name: no retry, one attempt.
		if code != 3 || !strings.Contains(out, "exception RemoteDisconnected") || strings.Count(out, "attempt ") != 1 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if n := charges("ART-1"); n != 1 {
			t.Fatalf("%d charges after the lost response, want 1: the money moved", n)
		}
		// The caller retries the only way the function allows: it calls
		// it again, and a new key is made inside.
		target.setFaults(`{}`)
		again, code := runPython(t, py, "web/clients/article_client.py", url, "ART-1", "129900")
		if code != 0 || !strings.Contains(again, "result 201") {
			t.Fatalf("second call: exit %d:\n%s", code, again)
		}
		if n := charges("ART-1"); n != 2 {
			t.Fatalf("%d charges, want 2: the second call paid under a new key", n)
		}
	})

	t.Run("corrected: the key belongs to the payment and a lost response is retried", func(t *testing.T) {
		target.setFaults(`{"server":{"response_lost":true}}`)
		key := pay.NewID("py-")
		out, code := runPython(t, py, "web/clients/keyed_client.py", url, "ART-2", "129900", key)
		if code != 0 || !strings.Contains(out, "result 201") || strings.Count(out, "attempt ") != 2 || strings.Count(out, "key "+key) != 2 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		target.setFaults(`{}`)
		if n := charges("ART-2"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("corrected: a saved 500 is final, not sent six times", func(t *testing.T) {
		target.setFaults(`{"server":{"server_error":true}}`)
		defer target.setFaults(`{}`)
		out, code := runPython(t, py, "web/clients/keyed_client.py", url, "ART-3", "129900", pay.NewID("py-"))
		if code != 0 || !strings.Contains(out, "result 500") || strings.Count(out, "attempt ") != 1 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}
