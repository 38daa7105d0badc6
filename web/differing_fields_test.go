package web

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"paytwice/pay"
)

// differingFields reads a 422's differing_fields.
func differingFields(t *testing.T, r response) []string {
	t.Helper()
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("got %d %s, want 422", r.Status, r.Body)
	}
	var p struct {
		DifferingFields []string `json:"differing_fields"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("422 body %s: %v", r.Body, err)
	}
	return p.DifferingFields
}

// A 422 says which parts of the request differ from the one its key first
// saw, wherever the server finds that first request: the cache of done
// answers, the key's row on disk, a row whose request still runs, or the
// charge a pruned key left behind.
func TestKeyReusedNamesTheFieldsThatDiffer(t *testing.T) {
	t.Parallel()
	first := `{"order_id": "A-1001", "amount_satang": 129900}`
	cases := []struct {
		name, body string
		want       []string
	}{
		{"another order with the same amount, as a customer's e-mail used as the key brings", `{"order_id": "A-2002", "amount_satang": 129900}`, []string{"order_id"}},
		{"the same order with another amount", `{"order_id": "A-1001", "amount_satang": 130000}`, []string{"amount_satang"}},
		{"another order and another amount", `{"order_id": "A-2002", "amount_satang": 5}`, []string{"order_id", "amount_satang"}},
	}
	for _, c := range cases {
		t.Run(c.name+": from the cache of done answers", func(t *testing.T) {
			env := newTestEnv(t, Config{})
			if r := env.pay("k1", first); r.Status != http.StatusCreated {
				t.Fatalf("first: %d %s", r.Status, r.Body)
			}
			if got := differingFields(t, env.pay("k1", c.body)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("differing_fields %q, want %q", got, c.want)
			}
		})
		t.Run(c.name+": from the key's row when the cache has forgotten it", func(t *testing.T) {
			env := newTestEnv(t, Config{})
			env.pay("k1", first)
			env.DB.ForgetCachedResponses()
			if got := differingFields(t, env.pay("k1", c.body)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("differing_fields %q, want %q", got, c.want)
			}
		})
		t.Run(c.name+": while the first request still runs", func(t *testing.T) {
			env := newTestEnv(t, Config{})
			release := env.holdGateway()
			done := make(chan response, 1)
			go func() { done <- env.pay("k1", first) }()
			waitForKeyStatus(t, env, "k1", pay.StatusStarted)
			got := differingFields(t, env.pay("k1", c.body))
			release()
			<-done
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("differing_fields %q, want %q", got, c.want)
			}
		})
		t.Run(c.name+": from the charge a pruned key left", func(t *testing.T) {
			env := newTestEnv(t, Config{})
			env.pay("k1", first)
			if _, err := env.DB.Prune(context.Background(), env.Clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if k, err := env.DB.GetKey(context.Background(), AnonymousScope, "k1"); err == nil {
				t.Fatalf("the key survived the prune: %+v", k)
			}
			if got := differingFields(t, env.pay("k1", c.body)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("differing_fields %q, want %q", got, c.want)
			}
		})
	}
	t.Run("a replay of the same request names nothing", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.pay("k1", first)
		if r := env.pay("k1", first); r.Status != http.StatusCreated || json.Valid(r.Body) && hasField(t, r.Body, "differing_fields") {
			t.Fatalf("replay: %d %s", r.Status, r.Body)
		}
	})
}

func hasField(t *testing.T, body []byte, name string) bool {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	_, ok := m[name]
	return ok
}
