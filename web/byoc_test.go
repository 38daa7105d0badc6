package web

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/pay/proxy"
	"paytwice/sim"
)

// Bring your own client: students' clients go through /byo/<name>/ to
// this very server, and the scoreboard grades them.
//
// The scoreboard grades the careful client's waits (rule 7: they grow;
// rule 8: none shorter than a Retry-After) by the proxy's clock, and the
// client waits by moving that same manual clock instead of sleeping: each
// wait the proxy measures is the one the client chose, however late a
// loaded machine wakes its goroutines, so the test runs beside the others.
// (On the wall clock, beside the browser tests at a load of 30, rule 7 was
// once judged broken.)
func TestBringYourOwnClient(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC))
	env := newTestEnv(t, Config{BYOCClock: clock.Now})

	t.Run("a careful client paying twenty orders through its path keeps every rule", func(t *testing.T) {
		client := &sim.RetryClient{BaseURL: env.URL + "/byo/alice", HTTPClient: sim.FreshConnections(), Budget: 10 * time.Second,
			Policy: sim.Policy{Base: 50 * time.Millisecond, Cap: 400 * time.Millisecond, MaxRetries: 5, Strategy: sim.FullJitter},
			Rand:   rand.New(rand.NewPCG(35, 7)), // the same waits every run
			Now:    clock.Now,
			Sleep: func(ctx context.Context, d time.Duration) error {
				clock.Advance(d)
				return ctx.Err()
			}}
		for i := range proxy.DefaultSchedule {
			client.Pay(context.Background(), sim.PaymentRequest{OrderID: "BYO-A-" + string(rune('a'+i)), AmountSatang: 100})
		}
		body := get(t, env.URL+"/byo/-/scores")
		row := rowOf(t, body, "alice")
		if !strings.Contains(row, "10 / 10") || strings.Contains(row, "broke") {
			t.Fatalf("alice's row:\n%s", row)
		}
	})

	t.Run("a client without a key is seen breaking rule 1, under its own name", func(t *testing.T) {
		res, err := http.Post(env.URL+"/byo/bob/v1/payments", "application/json", strings.NewReader(`{"order_id":"BYO-B-1","amount_satang":100}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		row := rowOf(t, get(t, env.URL+"/byo/-/scores"), "bob")
		if !strings.Contains(row, "broke") || !strings.Contains(row, "without an Idempotency-Key") {
			t.Fatalf("bob's row:\n%s", row)
		}
	})

	t.Run("the presenter's choice of failure meets the next action", func(t *testing.T) {
		res, err := http.PostForm(env.URL+"/byo/-/next", url.Values{"fault": {"422"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if !strings.Contains(get(t, env.URL+"/byo"), `<option value="422" selected`) {
			t.Fatal("the page does not show the chosen failure")
		}
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/byo/carol/v1/payments", strings.NewReader(`{"order_id":"BYO-C-1","amount_satang":100}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "carol-1")
		res, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("status %d, want the presenter's 422", res.StatusCode)
		}
		res, _ = http.PostForm(env.URL+"/byo/-/next", url.Values{"fault": {"explode"}})
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("an unknown failure: status %d, want 400", res.StatusCode)
		}
	})

	t.Run("names are bounded per address, and a name belongs to the address that took it", func(t *testing.T) {
		post := func(name, addr string) int {
			r := httptest.NewRequest(http.MethodPost, "/byo/"+name+"/v1/payments", strings.NewReader(`{"order_id":"X","amount_satang":100}`))
			r.RemoteAddr = addr + ":1234"
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			env.Server.Handler().ServeHTTP(w, r)
			return w.Code
		}
		for i := range maxStudentNamesPerAddress {
			if code := post("d"+string(rune('a'+i)), "10.0.0.7"); code == problemFor(pay.EBUSY).Status || code == http.StatusForbidden {
				t.Fatalf("name %d refused: %d", i, code)
			}
		}
		if code := post("dz", "10.0.0.7"); code != problemFor(pay.EBUSY).Status {
			t.Fatalf("one name too many: %d", code)
		}
		if code := post("da", "10.0.0.8"); code != http.StatusForbidden {
			t.Fatalf("another address under a taken name: %d", code)
		}
		if code := post("no/slash", "10.0.0.9"); code < 400 || code >= 500 {
			t.Fatalf("a bad name: %d", code)
		}
	})
}

func get(t *testing.T, u string) string {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, res.StatusCode, b)
	}
	return string(b)
}

// rowOf is the scoreboard's row of one student.
func rowOf(t *testing.T, page, name string) string {
	t.Helper()
	i := strings.Index(page, `<th scope="row" class="mono">`+name+`</th>`)
	if i < 0 {
		t.Fatalf("no row for %s in:\n%s", name, page)
	}
	row := page[i:]
	if j := strings.Index(row, "</tr>"); j >= 0 {
		row = row[:j]
	}
	return row
}
