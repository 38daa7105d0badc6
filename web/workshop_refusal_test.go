package web

import (
	"bufio"
	"bytes"
	"encoding/json"
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
// names a charge id, which is no charge all the same) and bodies of their own that
// are no payment. Both answer each the same way, as problem+json, with
// the gateway asked as often, and release the key: the same key again
// asks the gateway again. Python's used to raise on a refusal that was
// no JSON object, answered nothing and kept the key claimed, so every
// retry got a 409 for ever.
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
		"number-201": {http.StatusCreated, "application/json", `{"id": 5}`},
		"html-503":   {http.StatusServiceUnavailable, "text/html", "<h1>Service Unavailable</h1>"},
		// An id in a refusal or an outage is no charge: a real gateway may
		// name the attempt it refused.
		"id-402": {http.StatusPaymentRequired, "application/json", `{"id": "gw_declined", "error": "card declined"}`},
		"id-409": {http.StatusConflict, "application/json", `{"id": "gw_earlier"}`},
		"id-503": {http.StatusServiceUnavailable, "application/json", `{"id": "gw_maybe"}`},
		// A redirect is not followed (the room follows none either): what
		// it points at is not the gateway the workshop page named.
		"redirect-307": {http.StatusTemporaryRedirect, "application/json", `{"error": "moved"}`},
	}
	var followed atomic.Int64 // requests that followed a redirect
	var mu sync.Mutex
	asked := map[string]int{} // by order
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var charge struct {
			OrderID string `json:"order_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&charge)
		if r.URL.Path != "/charges" { // a redirect followed: it charges
			followed.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id": "gw_redirected"}`)
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
		if a.status/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
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
		order      string
		status     int
		title      string
		retryAfter bool
		asks       int // the gateway asked, per try
	}{
		{"text-402", http.StatusPaymentRequired, "the gateway refused the charge", false, 1},
		{"list-400", http.StatusBadRequest, "the gateway refused the charge", false, 1},
		{"number-422", http.StatusUnprocessableEntity, "the gateway refused the charge", false, 1},
		{"text-200", http.StatusBadGateway, "the gateway did not confirm the charge: retry with the same key", true, 1},
		{"number-201", http.StatusBadGateway, "the gateway did not confirm the charge: retry with the same key", true, 1},
		{"html-503", http.StatusBadGateway, "the gateway did not confirm the charge: retry with the same key", true, 2},
		{"id-402", http.StatusPaymentRequired, "the gateway refused the charge", false, 1},
		{"id-409", http.StatusConflict, "the gateway refused the charge", false, 1},
		{"id-503", http.StatusBadGateway, "the gateway did not confirm the charge: retry with the same key", true, 2},
		{"redirect-307", http.StatusBadGateway, "the gateway did not confirm the charge: retry with the same key", true, 1},
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
					if res.status != c.status || res.problem.Title != c.title || res.problem.Status != c.status {
						t.Errorf("%s, try %d: %d %s, want %d with the title %q", c.order, try, res.status, res.body, c.status, c.title)
					}
					if res.contentType != "application/problem+json" {
						t.Errorf("%s, try %d: Content-Type %q, want application/problem+json", c.order, try, res.contentType)
					}
					if res.retryAfter != c.retryAfter {
						t.Errorf("%s, try %d: Retry-After given: %v, want %v", c.order, try, res.retryAfter, c.retryAfter)
					}
				}
				if n := askedFor(c.order) - before; n != 2*c.asks {
					t.Errorf("%s: the gateway was asked %d times in two tries, want %d", c.order, n, 2*c.asks)
				}
			}
			if n := followed.Swap(0); n != 0 {
				t.Errorf("%d requests followed the gateway's redirect: a redirect is not followed", n)
			}
			// Bodies that are no payment: a 400 each, the gateway never asked.
			for _, body := range []string{"", "not json", "[1, 2]", `{"order_id": "text-402", "amount_satang": "500"}`, `{"order_id": "text-402", "amount_satang": 1.5}`} {
				before := askedFor("text-402")
				res := postReference(t, addr, "text/plain", name+"-body", body)
				if res.status != http.StatusBadRequest || res.contentType != "application/problem+json" {
					t.Errorf("the body %q: %d %s %s, want a 400 as problem+json", body, res.status, res.contentType, res.body)
				}
				if askedFor("text-402") != before {
					t.Errorf("the body %q reached the gateway", body)
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
	problem     struct {
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
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
	a := referenceAnswer{status: res.StatusCode, contentType: res.Header.Get("Content-Type"), retryAfter: res.Header.Get("Retry-After") != "", body: string(b)}
	_ = json.Unmarshal(b, &a.problem)
	return a
}
