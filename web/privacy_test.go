package web

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// send makes one request with client and returns its answer.
func send(t *testing.T, client *http.Client, method, url, body string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// In a class, the timeline's export is the presenter's: a student gets
// the rows of their own scope only, in JSON and in CSV, and never another
// student's key, order or scope; the presenter gets every row.
func TestTimelineExportIsThePresenters(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	env := newTestEnv(t, Config{PresenterToken: token})
	alice, bob := "Bearer alice-"+strings.Repeat("a", 8), "Bearer bob-"+strings.Repeat("b", 8)
	if r := env.pay("alice-key-1", `{"order_id":"ALICE-1","amount_satang":100}`, "Authorization", alice); r.Status != http.StatusCreated {
		t.Fatalf("alice: %d %s", r.Status, r.Body)
	}
	if r := env.pay("bob-key-1", `{"order_id":"BOB-1","amount_satang":200}`, "Authorization", bob); r.Status != http.StatusCreated {
		t.Fatalf("bob: %d %s", r.Status, r.Body)
	}
	export := func(t *testing.T, path string, headers ...string) string {
		t.Helper()
		r := env.get(path, headers...)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
		}
		return string(r.Body)
	}
	for _, path := range []string{"/api/timeline.json", "/api/timeline.csv"} {
		t.Run(path+": a student reads their own rows only", func(t *testing.T) {
			got := export(t, path, "Authorization", alice)
			if !strings.Contains(got, "alice-key-1") || strings.Contains(got, "bob-key-1") || strings.Contains(got, "BOB-1") {
				t.Fatalf("alice's export:\n%s", got)
			}
			if got := export(t, path); strings.Contains(got, "alice-key-1") || strings.Contains(got, "bob-key-1") {
				t.Fatalf("an export with no credential:\n%s", got)
			}
		})
		t.Run(path+": the presenter reads every row", func(t *testing.T) {
			got := export(t, path, PresenterHeader, token)
			if !strings.Contains(got, "alice-key-1") || !strings.Contains(got, "bob-key-1") {
				t.Fatalf("the presenter's export:\n%s", got)
			}
		})
	}
	t.Run("a student's JSON rows are all of their own scope", func(t *testing.T) {
		var ex TimelineExport
		if err := json.Unmarshal([]byte(export(t, "/api/timeline.json", "Authorization", bob)), &ex); err != nil {
			t.Fatal(err)
		}
		if len(ex.Events) == 0 {
			t.Fatal("bob's export is empty")
		}
		for _, e := range ex.Events {
			if e.Scope != ex.Events[0].Scope || e.Scope == "" {
				t.Fatalf("bob's export holds a row of scope %q beside %q", e.Scope, ex.Events[0].Scope)
			}
		}
	})
}

// In a class, callers that send no credential are told apart by their
// address: a student who learns another's key and order id, from another
// machine, can neither replay nor spoil that payment, nor look its charge
// up. A server without a presenter token keeps the one shared anonymous
// scope, as a learner alone with it expects.
func TestAnonymousCallersAreScopedByAddressInAClass(t *testing.T) {
	t.Parallel()
	first, second := fromAddress("127.0.0.2"), fromAddress("127.0.0.3")
	defer first.CloseIdleConnections()
	defer second.CloseIdleConnections()
	const key, order = "shared-key-1", "ORDER-77"
	body := `{"order_id":"` + order + `","amount_satang":500}`
	other := `{"order_id":"` + order + `","amount_satang":999}`
	t.Run("in a class", func(t *testing.T) {
		env := newTestEnv(t, Config{PresenterToken: "s3cret-lecture"})
		if r := send(t, first, http.MethodPost, env.URL+paymentsPath, body, "Idempotency-Key", key); r.Status != http.StatusCreated {
			t.Fatalf("the first student: %d %s", r.Status, r.Body)
		}
		// The same key with another body from another machine is that
		// machine's own first payment, not a 422 against the first one's.
		if r := send(t, second, http.MethodPost, env.URL+paymentsPath, other, "Idempotency-Key", key); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the second student with the first one's key: %d %s", r.Status, r.Body)
		}
		r := send(t, second, http.MethodGet, env.URL+paymentsPath+"?order_id="+order, "")
		var l struct {
			Charges []struct {
				AmountSatang int64 `json:"amount_satang"`
			} `json:"charges"`
		}
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &l) != nil || len(l.Charges) != 1 || l.Charges[0].AmountSatang != 999 {
			t.Fatalf("the second student's look-up of the order: %d %s; want its own charge only", r.Status, r.Body)
		}
		// The first student's key still replays its own answer.
		if r := send(t, first, http.MethodPost, env.URL+paymentsPath, body, "Idempotency-Key", key); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the first student's retry: %d %s", r.Status, r.Body)
		}
	})
	t.Run("alone, without a presenter token", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		if r := send(t, first, http.MethodPost, env.URL+paymentsPath, body, "Idempotency-Key", key); r.Status != http.StatusCreated {
			t.Fatalf("first: %d %s", r.Status, r.Body)
		}
		if r := send(t, second, http.MethodPost, env.URL+paymentsPath, other, "Idempotency-Key", key); r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("the shared anonymous scope: %d %s, want 422", r.Status, r.Body)
		}
	})
}
