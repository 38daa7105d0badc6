package web

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
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
	waitsOnRealClocks(t) // on the reference servers' start, with a gateway of its own
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

	servers := referenceServers(gateway.URL)
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

// referenceServers start the workshop's reference servers, charging
// through gateway, by language: Python's only where python3 is installed
// (CI installs it, and fails without it).
func referenceServers(gateway string) map[string]func(t *testing.T, addr string) {
	return map[string]func(t *testing.T, addr string){
		"Go": func(t *testing.T, addr string) { startGoReference(t, addr, gateway) },
		"Python": func(t *testing.T, addr string) {
			py, err := exec.LookPath("python3")
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatal("python3 is missing: .ci/run installs it")
				}
				t.Skip("python3 is not installed")
			}
			startProgram(t, addr, gateway, py, "../docs/workshop/server.py")
		},
	}
}

// TestWorkshopReferenceServersAnswerOddAnswersAsOne gives the reference
// servers a gateway whose answers are not what they expect (a refusal
// whose body is no JSON, or JSON of another shape; a success with no
// charge in it; an HTML page from a proxy; a refusal or an outage that
// names a charge id, which is no charge all the same) and bodies of their
// own that are no payment. Whatever the gateway says, a server answers,
// charges nothing it cannot name, and releases the key: the same key
// again asks the gateway again, where a key left claimed would answer
// 409 for ever (Python's once did, raising on a refusal that was no JSON
// object). A refusal (a 4xx) is answered as one, with no Retry-After and
// one question to the gateway; no answer or a 5xx is a 5xx with
// Retry-After, after asking once more. What the answers' bodies say is
// left to the servers: the checker reads statuses and Retry-After.
func TestWorkshopReferenceServersAnswerOddAnswersAsOne(t *testing.T) {
	waitsOnRealClocks(t) // on the reference servers' start, with a gateway of its own
	// Each order's answer, whatever the key.
	answers := map[string]struct {
		status      int
		contentType string
		body        string
	}{
		"text-402":   {http.StatusPaymentRequired, "text/plain", "card declined\n"},
		"list-400":   {http.StatusBadRequest, "application/json", `["no"]`},
		"number-422": {http.StatusUnprocessableEntity, "application/json", `{"error": 7}`},
		"text-200":   {http.StatusOK, "text/plain", "OK"},
		"html-503":   {http.StatusServiceUnavailable, "text/html", "<h1>Service Unavailable</h1>"},
		// An id in a refusal or an outage is no charge: a real gateway may
		// name the attempt it refused.
		"id-402": {http.StatusPaymentRequired, "application/json", `{"id": "gw_declined", "error": "card declined"}`},
		"id-503": {http.StatusServiceUnavailable, "application/json", `{"id": "gw_maybe"}`},
		// The one order that charges: after a body that is no payment.
		"good": {http.StatusCreated, "application/json", `{"id": "gw_good"}`},
	}
	var mu sync.Mutex
	asked := map[string]int{} // by order
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var charge struct {
			OrderID string `json:"order_id"`
			Amount  int64  `json:"amount"`
		}
		if json.NewDecoder(r.Body).Decode(&charge) != nil || charge.Amount <= 0 {
			// As the room's gateway refuses what is no charge.
			http.Error(w, `{"error": "not a charge"}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		asked[charge.OrderID]++
		mu.Unlock()
		a, ok := answers[charge.OrderID]
		if !ok {
			http.Error(w, "no such order in this test", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(gateway.Close)
	askedFor := func(order string) int {
		mu.Lock()
		defer mu.Unlock()
		return asked[order]
	}
	want := []struct {
		order          string
		refusal        bool // a 4xx with no Retry-After, else a 5xx with it
		asks, asksUpTo int  // the gateway asked, per try
	}{
		{"text-402", true, 1, 1},
		{"list-400", true, 1, 1},
		{"number-422", true, 1, 1},
		// A success with no charge in it: asking again with the same key
		// is as safe as not.
		{"text-200", false, 1, 2},
		{"html-503", false, 2, 2},
		{"id-402", true, 1, 1},
		{"id-503", false, 2, 2},
	}

	servers := referenceServers(gateway.URL)
	for _, name := range []string{"Go", "Python"} {
		t.Run(name, func(t *testing.T) {
			addr := freeAddr(t, "127.0.0.4")
			servers[name](t, addr)
			for _, c := range want {
				key := name + "-" + c.order
				before := askedFor(c.order)
				for try := 1; try <= 2; try++ { // the key released, the retry asks again
					res := postReference(t, addr, "application/json", key, `{"order_id": "`+c.order+`", "amount_satang": 500}`)
					switch {
					case c.refusal && res.status/100 != 4:
						t.Errorf("%s, try %d: %d %s, want the gateway's refusal, a 4xx", c.order, try, res.status, res.body)
					case !c.refusal && res.status/100 != 5:
						t.Errorf("%s, try %d: %d %s, want a 5xx: nothing was charged", c.order, try, res.status, res.body)
					}
					if res.retryAfter == c.refusal {
						t.Errorf("%s, try %d: Retry-After given: %v, want %v", c.order, try, res.retryAfter, !c.refusal)
					}
				}
				if n := askedFor(c.order) - before; n < 2*c.asks || n > 2*c.asksUpTo {
					t.Errorf("%s: the gateway was asked %d times in two tries, want %d to %d: a key left claimed asks it no more", c.order, n, 2*c.asks, 2*c.asksUpTo)
				}
			}
			// Bodies that are no payment: a 4xx each, and nothing saved: the
			// same key with a good payment then charges (the checker's case 8).
			for i, body := range []string{"", "not json", "[1, 2]", `{"order_id": "good", "amount_satang": "500"}`, `{"order_id": "good"`} {
				key := fmt.Sprintf("%s-body-%d", name, i)
				if res := postReference(t, addr, "text/plain", key, body); res.status/100 != 4 {
					t.Errorf("the body %q: %d %s, want a 4xx", body, res.status, res.body)
				}
				if res := postReference(t, addr, "application/json", key, `{"order_id": "good", "amount_satang": 500}`); res.status != http.StatusCreated {
					t.Errorf("a good payment with the key of the body %q: %d %s, want 201: the refusal was saved", body, res.status, res.body)
				}
			}
			// A Content-Length that is no number: a 400, not a dropped connection.
			conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(time.Minute))
			if _, err := io.WriteString(conn, "POST /v1/payments HTTP/1.1\r\nHost: "+addr+"\r\nIdempotency-Key: k\r\nContent-Length: twelve\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(conn).ReadString('\n')
			if _, status, _ := strings.Cut(line, " "); err != nil || !strings.HasPrefix(status, "400 ") {
				t.Errorf("a Content-Length of twelve: %q %v, want a 400", line, err)
			}
		})
	}
}

// referenceAnswer is a reference server's answer as the test reads it.
type referenceAnswer struct {
	status      int
	contentType string
	retryAfter  bool
	body        string
}

func postReference(t *testing.T, addr, contentType, key, body string) referenceAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Idempotency-Key", key)
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("POST %q with the key %s: %v", body, key, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("POST %q with the key %s: reading the answer: %v", body, key, err)
	}
	return referenceAnswer{status: res.StatusCode, contentType: res.Header.Get("Content-Type"), retryAfter: res.Header.Get("Retry-After") != "", body: string(b)}
}
