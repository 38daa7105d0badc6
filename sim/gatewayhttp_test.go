package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGatewayHandler(t *testing.T) {
	hs := httptest.NewServer(NewGatewayHandler(time.Now))
	defer hs.Close()
	do := func(t *testing.T, method, path, key, body string) (int, string, error) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}
	list := func(t *testing.T, order string) (charges []GatewayHTTPCharge) {
		t.Helper()
		status, body, err := do(t, http.MethodGet, "/charges?order_id="+order, "", "")
		var got struct {
			Charges []GatewayHTTPCharge `json:"charges"`
		}
		if err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("list %s: %d %s %v", order, status, body, err)
		}
		return got.Charges
	}

	t.Run("a key charges once: the second call answers the first charge", func(t *testing.T) {
		s1, b1, _ := do(t, http.MethodPost, "/charges", "k-1", `{"order_id":"O-1","amount":500}`)
		s2, b2, _ := do(t, http.MethodPost, "/charges", "k-1", `{"order_id":"O-1","amount":500}`)
		if s1 != http.StatusCreated || s2 != http.StatusOK || b1 != b2 {
			t.Fatalf("%d %s / %d %s", s1, b1, s2, b2)
		}
		if s, _, _ := do(t, http.MethodPost, "/charges", "k-1", `{"order_id":"O-2","amount":500}`); s != http.StatusUnprocessableEntity {
			t.Fatalf("the key with another order: %d", s)
		}
		if n := len(list(t, "O-1")); n != 1 {
			t.Fatalf("%d charges", n)
		}
	})
	t.Run("bad requests are 400s", func(t *testing.T) {
		for _, c := range []struct{ path, key, body string }{
			{"/charges", "", `{"order_id":"O","amount":1}`},
			{"/charges", "k", `{"order_id":"O","amount":0}`},
			{"/charges", "k", `{"order_id":"O","amount":1,"x":1}`},
			{"/switches", "", `{"latency_ms":-1}`},
			{"/switches", "", `{"hold_answer_ms":60001}`},
		} {
			method := http.MethodPost
			if c.path == "/switches" {
				method = http.MethodPut
			}
			if s, b, _ := do(t, method, c.path, c.key, c.body); s != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s", c.path, c.body, s, b)
			}
		}
	})
	t.Run("refusal charges nothing; time-out charges and never answers", func(t *testing.T) {
		if s, _, _ := do(t, http.MethodPut, "/switches", "", `{"refuse":true}`); s != http.StatusOK {
			t.Fatal(s)
		}
		if s, _, _ := do(t, http.MethodPost, "/charges", "k-2", `{"order_id":"O-2","amount":1}`); s != http.StatusPaymentRequired || len(list(t, "O-2")) != 0 {
			t.Fatalf("refused: %d", s)
		}
		do(t, http.MethodPut, "/switches", "", `{"timeout":true}`)
		if _, _, err := do(t, http.MethodPost, "/charges", "k-3", `{"order_id":"O-3","amount":1}`); err == nil {
			t.Fatal("the time-out answered")
		}
		if n := len(list(t, "O-3")); n != 1 {
			t.Fatalf("%d charges after the time-out, want 1", n)
		}
		do(t, http.MethodPut, "/switches", "", `{}`)
	})
	t.Run("a held answer: the charge is in the books before its caller hears of it", func(t *testing.T) {
		if s, _, _ := do(t, http.MethodPut, "/switches", "", `{"hold_answer_ms":60000,"latency_order_id":"O-4"}`); s != http.StatusOK {
			t.Fatal(s)
		}
		defer do(t, http.MethodPut, "/switches", "", `{}`)
		if s, _, _ := do(t, http.MethodPost, "/charges", "k-5", `{"order_id":"O-5","amount":1}`); s != http.StatusCreated {
			t.Fatalf("another order: %d", s)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/charges", strings.NewReader(`{"order_id":"O-4","amount":1}`))
			req.Header.Set("Idempotency-Key", "k-4")
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				res.Body.Close()
			}
			done <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for len(list(t, "O-4")) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the held charge never reached the books")
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the held answer came")
		}
		if n := len(list(t, "O-4")); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
}

// A full ledger forgets its oldest charges to take new ones, counts what
// it forgot in its listings and its summary, and never refuses a charge
// for being full; a reset empties it and turns its switches off.
func TestGatewayLedgerPrunesTheOldest(t *testing.T) {
	g := NewGatewayHandler(time.Now)
	g.SetMaxCharges(3)
	hs := httptest.NewServer(g)
	defer hs.Close()
	send := func(method, path, key, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
			t.Fatalf("%s %s: %d, not JSON: %v", method, path, res.StatusCode, err)
		}
		return res.StatusCode, v
	}
	// Orders A, A, B, C, D: at the bound of 3, the two charges of A go.
	for i, order := range []string{"A", "A", "B", "C", "D"} {
		if s, v := send(http.MethodPost, "/charges", "k-"+strconv.Itoa(i), `{"order_id":"`+order+`","amount":100}`); s != http.StatusCreated {
			t.Fatalf("charge %d: %d %v, want 201 even when full", i, s, v)
		}
	}
	if s, v := send(http.MethodGet, "/ledger", "", ""); s != http.StatusOK || v["charges"] != 3.0 || v["pruned"] != 2.0 || v["max_charges"] != 3.0 {
		t.Fatalf("ledger: %d %v, want 3 charges held and 2 pruned", s, v)
	}
	for order, want := range map[string]int{"A": 0, "B": 1, "C": 1, "D": 1} {
		_, v := send(http.MethodGet, "/charges?order_id="+order, "", "")
		if n := len(v["charges"].([]any)); n != want || v["pruned"] != 2.0 {
			t.Fatalf("order %s: %d charges, pruned %v; want %d and 2", order, n, v["pruned"], want)
		}
	}
	// A key still held replays; the pruned one is a new charge again,
	// which forgets the next oldest (B's).
	if s, _ := send(http.MethodPost, "/charges", "k-3", `{"order_id":"C","amount":100}`); s != http.StatusOK {
		t.Fatalf("a held key: %d, want the replay's 200", s)
	}
	if s, _ := send(http.MethodPost, "/charges", "k-0", `{"order_id":"A","amount":100}`); s != http.StatusCreated {
		t.Fatalf("a pruned key: %d, want 201", s)
	}
	if _, v := send(http.MethodGet, "/charges?order_id=B", "", ""); len(v["charges"].([]any)) != 0 || v["pruned"] != 3.0 {
		t.Fatalf("order B after one more: %v", v)
	}

	if s, _ := send(http.MethodPut, "/switches", "", `{"refuse":true}`); s != http.StatusOK {
		t.Fatal(s)
	}
	if s, v := send(http.MethodPost, "/reset", "", ""); s != http.StatusOK || v["charges"] != 0.0 || v["pruned"] != 0.0 {
		t.Fatalf("reset: %d %v", s, v)
	}
	if sw := g.Switches(); sw != (GatewayHTTPSwitches{}) {
		t.Fatalf("switches after the reset: %+v", sw)
	}
	if _, v := send(http.MethodGet, "/charges?order_id=D", "", ""); len(v["charges"].([]any)) != 0 {
		t.Fatalf("order D after the reset: %v", v)
	}
}
