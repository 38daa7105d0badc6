package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestSimGatewayIsServed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	req, _ := http.NewRequest(http.MethodPost, env.URL+"/sim/gateway/charges", strings.NewReader(`{"order_id":"G-1","amount":100}`))
	req.Header.Set("Idempotency-Key", "g-1")
	r, err := do(req)
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("charge: %v %d %s", err, r.Status, r.Body)
	}
	if l := env.get("/sim/gateway/charges?order_id=G-1"); l.Status != http.StatusOK || !strings.Contains(string(l.Body), `"key":"g-1"`) {
		t.Fatalf("list: %d %s", l.Status, l.Body)
	}
	if n := env.charges(); n != 0 {
		t.Fatalf("the served gateway is not this server's: %d charges here", n)
	}
}

// With a presenter token, the simulated gateway's books stay open to
// read, but a student can neither charge through it, nor flip its
// switches, nor reset it: each is a 403 problem that changes nothing. The
// application under test charges with the merchant key the presenter
// hands out, the presenter with the token; the room's reset empties it.
func TestSimGatewayTakesChangesOnlyFromThePresenter(t *testing.T) {
	t.Parallel()
	const token = "s3cret-lecture"
	env := newFIEnv(t, Config{PresenterToken: token})
	charge := func(key string, headers ...string) response {
		t.Helper()
		return env.must(http.MethodPost, "/sim/gateway/charges", `{"order_id":"G-1","amount":100}`, append([]string{"Idempotency-Key", key}, headers...)...)
	}
	for _, tc := range []struct {
		name            string
		method, path    string
		body            string
		headers         []string
		wantStatus      int
		wantProblemSlug string
	}{
		{"a student's charge", http.MethodPost, "/sim/gateway/charges", `{"order_id":"G-1","amount":100}`, []string{"Idempotency-Key", "s-1"}, http.StatusForbidden, "forbidden"},
		{"a student's charge with a made-up merchant key", http.MethodPost, "/sim/gateway/charges", `{"order_id":"G-1","amount":100}`, []string{"Idempotency-Key", "s-2", "Authorization", "Bearer sk_sim_guess"}, http.StatusForbidden, "forbidden"},
		{"a student's switches", http.MethodPut, "/sim/gateway/switches", `{"refuse":true}`, nil, http.StatusForbidden, "forbidden"},
		{"a student's reset", http.MethodPost, "/sim/gateway/reset", ``, nil, http.StatusForbidden, "forbidden"},
		{"a student asking for the merchant key", http.MethodGet, "/sim/gateway/merchant-key", ``, nil, http.StatusForbidden, "forbidden"},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			r := env.must(tc.method, tc.path, tc.body, tc.headers...)
			if r.Status != tc.wantStatus || problemSlug(t, r) != tc.wantProblemSlug {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
		})
	}
	if l := env.Server.world.handler.Ledger(); l.Charges != 0 {
		t.Fatalf("the refused requests charged %d", l.Charges)
	}
	if sw := env.Server.world.handler.Switches(); sw.Refuse {
		t.Fatal("a student flipped the gateway's switch")
	}

	// Reading stays open.
	if r := env.get("/sim/gateway/charges?order_id=G-1"); r.Status != http.StatusOK {
		t.Fatalf("reading the books: %d %s", r.Status, r.Body)
	}
	// The presenter hands out the merchant key; the application charges
	// with it. The presenter may charge and switch with the token.
	r := env.must(http.MethodGet, "/sim/gateway/merchant-key", "", PresenterHeader, token)
	var mk SimGatewayMerchantKey
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &mk) != nil || !strings.HasPrefix(mk.Header, "Authorization: Bearer sk_sim_") || strings.Contains(mk.Header, token) {
		t.Fatalf("merchant key: %d %s", r.Status, r.Body)
	}
	if r := charge("m-1", "Authorization", strings.TrimPrefix(mk.Header, "Authorization: ")); r.Status != http.StatusCreated {
		t.Fatalf("the merchant's charge: %d %s", r.Status, r.Body)
	}
	if r := charge("p-1", PresenterHeader, token); r.Status != http.StatusCreated {
		t.Fatalf("the presenter's charge: %d %s", r.Status, r.Body)
	}
	if r := env.must(http.MethodPut, "/sim/gateway/switches", `{"latency_ms":5}`, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("the presenter's switches: %d %s", r.Status, r.Body)
	}
	// The merchant key flips nothing.
	if r := env.must(http.MethodPut, "/sim/gateway/switches", `{"refuse":true}`, "Authorization", strings.TrimPrefix(mk.Header, "Authorization: ")); r.Status != http.StatusForbidden {
		t.Fatalf("switches with the merchant key: %d %s", r.Status, r.Body)
	}

	if r := env.must(http.MethodPost, "/api/reset", "", PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	if l, sw := env.Server.world.handler.Ledger(), env.Server.world.handler.Switches(); l.Charges != 0 || sw.LatencyMS != 0 {
		t.Fatalf("after the room's reset the gateway holds %d charges and switches %+v", l.Charges, sw)
	}
}
