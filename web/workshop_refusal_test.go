package web

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/sim"
)

// TestWorkshopReferenceServersAnswerARefusalAsOne sends the reference
// servers a payment the gateway declines. A declined card stays declined
// however often it is asked: the answer is the refusal itself, with no
// Retry-After and no advice to send it again, after one question to the
// gateway, and nothing is charged.
func TestWorkshopReferenceServersAnswerARefusalAsOne(t *testing.T) {
	books := sim.NewGatewayHandler(time.Now)
	var asked atomic.Int64
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/charges" {
			asked.Add(1)
		}
		books.ServeHTTP(w, r)
	}))
	t.Cleanup(gateway.Close)
	put, err := http.NewRequest(http.MethodPut, gateway.URL+"/switches", strings.NewReader(`{"refuse": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := http.DefaultClient.Do(put); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("declining every card: %v %v", r, err)
	} else {
		r.Body.Close()
	}

	servers := map[string]func(t *testing.T, addr string){
		"Go": func(t *testing.T, addr string) { startGoReference(t, addr, gateway.URL) },
		"Python": func(t *testing.T, addr string) {
			py, err := exec.LookPath("python3")
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatal("python3 is missing: .ci/run installs it")
				}
				t.Skip("python3 is not installed")
			}
			startProgram(t, addr, gateway.URL, py, "../docs/workshop/server.py")
		},
	}
	for _, name := range []string{"Go", "Python"} {
		t.Run(name, func(t *testing.T) {
			addr := freeAddr(t, "127.0.0.4")
			servers[name](t, addr)
			before := asked.Load()
			for try := 1; try <= 2; try++ { // the client's retry gets the same refusal
				req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/payments",
					strings.NewReader(`{"order_id": "declined-`+name+`", "amount_satang": 500}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "declined-"+name)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body bytes.Buffer
				_, _ = body.ReadFrom(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusPaymentRequired {
					t.Errorf("try %d: %d %s, want the gateway's 402", try, res.StatusCode, body.String())
				}
				if ra := res.Header.Get("Retry-After"); ra != "" {
					t.Errorf("try %d: a declined card answered with Retry-After: %s", try, ra)
				}
				if strings.Contains(body.String(), "retry") {
					t.Errorf("try %d: a declined card's answer advises a retry: %s", try, body.String())
				}
			}
			if n := asked.Load() - before; n != 2 {
				t.Errorf("the gateway was asked %d times for two tries, want once each: a refusal is not retried", n)
			}
			if l := books.Ledger(); l.Charges != 0 {
				t.Errorf("the gateway holds %d charges after declining every card", l.Charges)
			}
		})
	}
}
