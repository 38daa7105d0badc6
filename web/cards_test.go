package web

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"paytwice/pay"
)

// TestPageAttemptSentTwiceIsNamed: when the browser sends one of the
// page's attempts again by itself, the copy says so on the timeline and in
// its answer, so the card can draw it as a step of its own.
func TestPageAttemptSentTwiceIsNamed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	setFaults(t, env, pay.ServerFaults{ResponseLost: true})
	key, attempt, session := uuid.NewString(), uuid.NewString(), uuid.NewString()
	body := `{"order_id":"A-4242","amount_satang":129900}`
	headers := []string{pageSessionHeader, session, pageAttemptHeader, attempt}
	if _, err := env.tryPay(key, body, headers...); err == nil {
		t.Fatal("the first copy was answered: the response should be lost")
	}
	setFaults(t, env, pay.ServerFaults{})
	res := env.pay(key, body, headers...)
	if res.Status != 201 || res.Header.Get("Idempotent-Replayed") != "true" || res.Header.Get(attemptCopiesHeader) != "2" {
		t.Fatalf("the copy: %d, replayed %q, copies %q", res.Status, res.Header.Get("Idempotent-Replayed"), res.Header.Get(attemptCopiesHeader))
	}
	named := 0
	for _, e := range env.Server.hub.Recent(50) {
		if strings.Contains(e.Message, "sent again by the browser itself") {
			named++
		}
	}
	if named != 1 {
		t.Fatalf("%d timeline events name the browser's copy, want 1", named)
	}
	// A new attempt of the page is not a copy.
	if res := env.pay(key, body, pageSessionHeader, session, pageAttemptHeader, uuid.NewString()); res.Header.Get(attemptCopiesHeader) != "" {
		t.Fatalf("a fresh attempt is marked as a copy: %q", res.Header.Get(attemptCopiesHeader))
	}
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// TestAttemptIdsAreTheSessions: an attempt id counts copies only within
// the session that sent it. Another session's payment carrying A's
// attempt id is an attempt of its own: neither it nor A's next arrival is
// called a copy because of it, and the timeline names no copy.
func TestAttemptIdsAreTheSessions(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	attempt, a, b := uuid.NewString(), uuid.NewString(), uuid.NewString()
	body := `{"order_id":"A-4243","amount_satang":1000}`
	if res := env.pay(uuid.NewString(), body, pageSessionHeader, a, pageAttemptHeader, attempt); res.Status != 201 || res.Header.Get(attemptCopiesHeader) != "" {
		t.Fatalf("A's attempt: %d, copies %q", res.Status, res.Header.Get(attemptCopiesHeader))
	}
	for _, who := range []struct{ name, auth, session string }{
		{"another session", "", b},
		{"an API caller", "Bearer mallory", ""},
		{"the anonymous scope", "", ""},
	} {
		headers := []string{pageAttemptHeader, attempt}
		if who.session != "" {
			headers = append(headers, pageSessionHeader, who.session)
		}
		if who.auth != "" {
			headers = append(headers, "Authorization", who.auth)
		}
		if res := env.pay(uuid.NewString(), body, headers...); res.Status != 201 || res.Header.Get(attemptCopiesHeader) != "" {
			t.Fatalf("%s with A's attempt id: %d, counted as copy %q of A's attempt", who.name, res.Status, res.Header.Get(attemptCopiesHeader))
		}
	}
	for _, e := range env.Server.hub.Recent(100) {
		if strings.Contains(e.Message, "sent again by the browser itself") {
			t.Fatalf("the timeline names a copy: %s", e.Message)
		}
	}
	// A's own copy is still one.
	if res := env.pay(uuid.NewString(), body, pageSessionHeader, a, pageAttemptHeader, attempt); res.Header.Get(attemptCopiesHeader) != "2" {
		t.Fatalf("A's own second arrival: copies %q, want 2", res.Header.Get(attemptCopiesHeader))
	}
}
