package web

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"paytwice/views"
)

// Auth schemes are case-insensitive and the token may follow any run of
// spaces or tabs: each spelling of Alice's credential is Alice, so nobody
// else replays her answer or lists her charges.
func TestBearerSpellingsShareOneScope(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	alice := env.pay("spell-1", articleBody, "Authorization", "Bearer alice")
	if alice.Status != http.StatusCreated {
		t.Fatalf("alice: %d %s", alice.Status, alice.Body)
	}
	for _, h := range []string{"bearer alice", "BEARER alice", "Bearer\talice", "bEaReR \t  alice", "Bearer alice  "} {
		r := env.pay("spell-1", articleBody, "Authorization", h)
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.Body, alice.Body) {
			t.Fatalf("%q: %d replayed=%q %s; want Alice's own replay", h, r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
		}
		if r := env.get("/v1/payments?order_id=A-1001", "Authorization", h); r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(alice.JSON(t)["charge_id"].(string))) {
			t.Fatalf("%q does not list Alice's charge: %d %s", h, r.Status, r.Body)
		}
	}
	// The anonymous scope neither replays nor lists Alice's payment.
	anon := env.pay("spell-1", articleBody)
	if anon.Status != http.StatusCreated || anon.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("anonymous: %d replayed=%q", anon.Status, anon.Header.Get("Idempotent-Replayed"))
	}
	id := alice.JSON(t)["charge_id"].(string)
	if r := env.get("/v1/payments?order_id=A-1001"); bytes.Contains(r.Body, []byte(id)) {
		t.Fatalf("the anonymous scope lists Alice's charge: %s", r.Body)
	}
	if r := env.get("/v1/payments?order_id=A-1001", "Authorization", "bearer\talice"); !bytes.Contains(r.Body, []byte(id)) {
		t.Fatalf("Alice, spelled in lower case, does not see her charge: %d %s", r.Status, r.Body)
	}
}

// A header that is there but names nobody is refused with 401 before
// anything runs: it must not fall into the shared anonymous scope.
func TestUnclearAuthorizationIsRefused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	for _, h := range []string{"Bearer", "Bearer ", "Bearer a b", "Bearer al\u00e9", "Bearerx alice", "Basic YWxpY2U6cHc=", "Token alice", "alice"} {
		r := env.pay("unclear-1", articleBody, "Authorization", h)
		assertProblem(t, r, http.StatusUnauthorized, "unauthorized")
		if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%q: WWW-Authenticate %q", h, r.Header.Get("WWW-Authenticate"))
		}
		assertProblem(t, env.get("/v1/payments?order_id=A-1001", "Authorization", h), http.StatusUnauthorized, "unauthorized")
	}
	if n := env.charges(); n != 0 {
		t.Fatalf("%d charges after refused requests", n)
	}
	// Two Authorization lines are ambiguous.
	req, _ := http.NewRequest(http.MethodGet, env.URL+"/v1/payments?order_id=A-1001", nil)
	req.Header.Add("Authorization", "Bearer alice")
	req.Header.Add("Authorization", "Bearer bob")
	r, err := do(req)
	if err != nil {
		t.Fatal(err)
	}
	assertProblem(t, r, http.StatusUnauthorized, "unauthorized")

	// A browser behind a proxy that asks for a password sends Basic with
	// its session cookie: the cookie names it.
	cookie := sessionCookie + "=0b6f4c1e-8a2d-4c3b-9e5f-1a2b3c4d5e6f"
	if r := env.pay("unclear-1", articleBody, "Authorization", "Basic YWxpY2U6cHc=", "Cookie", cookie); r.Status != http.StatusCreated {
		t.Fatalf("Basic with a session: %d %s", r.Status, r.Body)
	}
	if r := env.pay("unclear-1", articleBody); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the session's payment leaked into the anonymous scope: %d %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
}

// Scope ids keep 128 bits of the credential's hash; pages show a few
// characters of it.
func TestScopeIDsAreLongAndShownShort(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	if r := env.pay("long-1", articleBody, "Authorization", "Bearer alice"); r.Status != http.StatusCreated {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer alice")
	scope := callerScope(req)
	id, ok := strings.CutPrefix(scope, "token:")
	if !ok || len(id) < 32 {
		t.Fatalf("scope %q keeps fewer than 128 bits", scope)
	}
	if _, err := env.DB.GetKey(t.Context(), scope, "long-1"); err != nil {
		t.Fatalf("the key is not stored under %q: %v", scope, err)
	}
	label := views.ScopeLabel(scope)
	if strings.Contains(label, id) || len(label) > len("token ")+8 {
		t.Fatalf("label %q shows too much of %q", label, scope)
	}
	if page := env.get("/board"); bytes.Contains(page.Body, []byte(id)) {
		t.Fatal("the board shows the whole scope id")
	}
}
