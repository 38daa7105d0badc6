package web

import (
	"net/http"
	"strings"
	"testing"
)

func TestSimGatewayIsServed(t *testing.T) {
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
