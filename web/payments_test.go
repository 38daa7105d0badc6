package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
)

const (
	articleKey  = `"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	articleBody = `{"order_id": "A-1001", "amount_satang": 129900}`
)

func TestArticleSequence(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})

	first := env.pay(articleKey, articleBody)
	if first.Status != http.StatusCreated {
		t.Fatalf("first request: got %d %s, want 201", first.Status, first.Body)
	}
	if got := first.JSON(t)["status"]; got != "paid" {
		t.Errorf("first request: status field %v, want paid", got)
	}
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first request must not be marked replayed")
	}

	second := env.pay(articleKey, articleBody)
	if second.Status != http.StatusCreated || !bytes.Equal(second.Body, first.Body) {
		t.Fatalf("second request: got %d %s, want the first 201 replayed", second.Status, second.Body)
	}
	if second.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("second request: Idempotent-Replayed = %q, want true", second.Header.Get("Idempotent-Replayed"))
	}

	third := env.pay(articleKey, `{"order_id": "A-1001", "amount_satang": 129901}`)
	if third.Status != http.StatusUnprocessableEntity {
		t.Fatalf("third request: got %d %s, want 422", third.Status, third.Body)
	}
	if ct := third.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("422 content type %q", ct)
	}
	if !strings.HasSuffix(third.JSON(t)["type"].(string), "/problems/key-reused") {
		t.Errorf("422 type %v", third.JSON(t)["type"])
	}
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges in the database, want exactly 1", n)
	}
	// The original is untouched: a replay still gives the first response.
	if again := env.pay(articleKey, articleBody); !bytes.Equal(again.Body, first.Body) {
		t.Errorf("after the 422 the key replays %s, want %s", again.Body, first.Body)
	}
}

func TestProtocolTable(t *testing.T) {
	t.Parallel()
	t.Run("a payment without a key is refused with 400 and nothing saved", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		r := env.pay("", articleBody)
		assertProblem(t, r, 400, "missing-key")
		assertNothingSaved(t, env)
	})
	t.Run("a malformed key is refused with 400 and nothing saved", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		r := env.pay(`"unterminated`, articleBody)
		assertProblem(t, r, 400, "invalid-key")
		assertNothingSaved(t, env)
	})
	t.Run("two Idempotency-Key header lines are refused with 400", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/v1/payments", strings.NewReader(articleBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("Idempotency-Key", "a")
		req.Header.Add("Idempotency-Key", "b")
		r, err := do(req)
		if err != nil {
			t.Fatal(err)
		}
		assertProblem(t, r, 400, "invalid-key")
		assertNothingSaved(t, env)
	})
	t.Run("an invalid body is refused with 400 and a corrected retry on the same key succeeds", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		for _, body := range []string{
			`{"order_id": "A-1001", "amount_satang": 1299.00}`,
			`{"order_id": "A-1001", "amount_satang": -5}`,
			`{"order_id": "A-1001", "amount_satang": 0}`,
			`{"order_id": "A-1001"}`,
			`{"order_id": "A-1001", "amount_satang": 129900, "currency": "THB"}`,
			`{"order_id": "A-1001", "amount_satang": "129900"}`,
			`{"order_id": "A-1001", "amount_satang": 129900`,
			`not json`,
		} {
			assertProblem(t, env.pay(articleKey, body), 400, "invalid-request")
		}
		assertNothingSaved(t, env)
		if r := env.pay(articleKey, articleBody); r.Status != 201 {
			t.Fatalf("corrected retry: %d %s", r.Status, r.Body)
		}
	})
	t.Run("a body over the limit is refused with 413", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		big := `{"order_id": "` + strings.Repeat("x", pay.MaxBodyBytes) + `", "amount_satang": 1}`
		assertProblem(t, env.pay(articleKey, big), 413, "body-too-large")
		assertNothingSaved(t, env)
	})
	t.Run("a body that is not JSON by content type is refused with 415", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		assertProblem(t, env.pay(articleKey, articleBody, "Content-Type", "text/plain"), 415, "unsupported-media-type")
		assertNothingSaved(t, env)
	})
	t.Run("a repeated key with the same body replays the stored response", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		first := env.pay("k1", articleBody)
		// Key order and whitespace do not change the fingerprint.
		again := env.pay(`"k1"`, `{ "amount_satang":129900,"order_id":"A-1001" }`)
		if again.Status != 201 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("got %d %s replayed=%q", again.Status, again.Body, again.Header.Get("Idempotent-Replayed"))
		}
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("a repeated key is replayed from the database when the cache has forgotten it", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		first := env.pay("k1", articleBody)
		env.DB.ForgetCachedResponses()
		again := env.pay("k1", articleBody)
		if again.Status != 201 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("got %d %s", again.Status, again.Body)
		}
	})
	t.Run("a repeated key with a different body gets 422 and the original is untouched", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.pay("k1", articleBody)
		assertProblem(t, env.pay("k1", `{"order_id": "A-1002", "amount_satang": 129900}`), 422, "key-reused")
		k, err := env.DB.GetKey(context.Background(), AnonymousScope, "k1")
		if err != nil || k.Status != pay.StatusDone || k.ResponseStatus != 201 || k.OrderID != "A-1001" {
			t.Fatalf("original key row changed: %+v %v", k, err)
		}
	})
	t.Run("a repeated key while the first request runs gets 409 with Retry-After", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		release := env.holdGateway()
		done := make(chan response, 1)
		go func() { done <- env.pay("k1", articleBody) }()
		waitForKeyStatus(t, env, "k1", pay.StatusStarted)
		r := env.pay("k1", articleBody)
		assertProblem(t, r, 409, "request-in-progress")
		if r.Header.Get("Retry-After") == "" {
			t.Error("409 without Retry-After")
		}
		release()
		if first := <-done; first.Status != 201 {
			t.Fatalf("first request: %d %s", first.Status, first.Body)
		}
		if r := env.pay("k1", articleBody); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("after the first finished: %d", r.Status)
		}
	})
	t.Run("a different body while the first request runs gets 422, not 409", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		release := env.holdGateway()
		done := make(chan response, 1)
		go func() { done <- env.pay("k1", articleBody) }()
		waitForKeyStatus(t, env, "k1", pay.StatusStarted)
		assertProblem(t, env.pay("k1", `{"order_id": "A-1001", "amount_satang": 5}`), 422, "key-reused")
		release()
		<-done
		if n := env.charges(); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("the created charge can be fetched by id and by order", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		id := env.pay("k1", articleBody).JSON(t)["charge_id"].(string)
		if r := env.get("/v1/payments/" + id); r.Status != 200 || r.JSON(t)["charge_id"] != id {
			t.Fatalf("by id: %d %s", r.Status, r.Body)
		}
		r := env.get("/v1/payments?order_id=A-1001")
		if r.Status != 200 || !strings.Contains(string(r.Body), id) || r.JSON(t)["paid"] != true {
			t.Fatalf("by order: %d %s", r.Status, r.Body)
		}
		assertProblem(t, env.get("/v1/payments/ch_nope"), 404, "not-found")
		assertProblem(t, env.get("/v1/payments"), 400, "invalid-request")
	})
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	const n = 200
	var wg sync.WaitGroup
	results := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = env.tryPay("same-key", articleBody)
		}()
	}
	close(start)
	wg.Wait()

	var original []byte
	counts := map[string]int{}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch {
		case r.Status == 201 && r.Header.Get("Idempotent-Replayed") == "":
			counts["original"]++
			original = r.Body
		case r.Status == 201:
			counts["replay"]++
		case r.Status == 409:
			counts["409"]++
		default:
			t.Fatalf("request %d: unexpected %d %s", i, r.Status, r.Body)
		}
	}
	if counts["original"] != 1 {
		t.Fatalf("%d original 201s, want exactly 1 (%v)", counts["original"], counts)
	}
	for i, r := range results {
		if r.Status == 201 && !bytes.Equal(r.Body, original) {
			t.Fatalf("request %d: replayed %s, original %s", i, r.Body, original)
		}
	}
	if c := env.charges(); c != 1 {
		t.Fatalf("%d charges, want 1", c)
	}
	t.Logf("outcomes: %v", counts)
}

func TestConcurrentDistinctKeysAllCharge(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	const n = 200
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = env.tryPay(fmt.Sprintf("key-%d", i), fmt.Sprintf(`{"order_id": "A-%d", "amount_satang": %d}`, i, 100+i))
		}()
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if r.Status != 201 {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
		if strings.Contains(strings.ToLower(string(r.Body)), "busy") {
			t.Fatalf("request %d leaked a busy error: %s", i, r.Body)
		}
	}
	if c := env.charges(); c != n {
		t.Fatalf("%d charges, want %d", c, n)
	}
}

func TestScopesAreIsolated(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	alice := env.pay("shared-key", articleBody, "Authorization", "Bearer alice")
	bob := env.pay("shared-key", articleBody, "Authorization", "Bearer bob")
	if alice.Status != 201 || bob.Status != 201 {
		t.Fatalf("alice %d, bob %d", alice.Status, bob.Status)
	}
	if bob.Header.Get("Idempotent-Replayed") != "" || bytes.Equal(alice.Body, bob.Body) {
		t.Fatalf("bob got alice's response: %s", bob.Body)
	}
	if c := env.charges(); c != 2 {
		t.Fatalf("%d charges, want 2 independent ones", c)
	}
	// Each replays only their own.
	if r := env.pay("shared-key", articleBody, "Authorization", "Bearer alice"); !bytes.Equal(r.Body, alice.Body) {
		t.Fatalf("alice's replay is %s", r.Body)
	}
	if r := env.pay("shared-key", articleBody, "Authorization", "Bearer bob"); !bytes.Equal(r.Body, bob.Body) {
		t.Fatalf("bob's replay is %s", r.Body)
	}
	// A different body under one scope is 422 there only.
	if r := env.pay("shared-key", `{"order_id": "B", "amount_satang": 1}`, "Authorization", "Bearer carol"); r.Status != 201 {
		t.Fatalf("carol: %d", r.Status)
	}
	// Nobody can read another scope's charge.
	id := alice.JSON(t)["charge_id"].(string)
	assertProblem(t, env.get("/v1/payments/"+id, "Authorization", "Bearer bob"), 404, "not-found")
	if r := env.get("/v1/payments/"+id, "Authorization", "Bearer alice"); r.Status != 200 {
		t.Fatalf("alice cannot read her own charge: %d", r.Status)
	}
	// The anonymous scope is a third one.
	if r := env.pay("shared-key", articleBody); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("anonymous: %d replayed=%q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
}

func TestPolicyIsPublished(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	r := env.get("/v1/idempotency-policy")
	m := r.JSON(t)
	if r.Status != 200 || m["retention_seconds"] != float64(86400) || m["max_length"] != float64(255) || m["lock_timeout_seconds"] != float64(30) {
		t.Fatalf("policy: %d %s", r.Status, r.Body)
	}
}

func TestProblemTypesHaveExplanationPages(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	for _, p := range Problems {
		t.Run(string(p.Code), func(t *testing.T) {
			r := env.get("/problems/" + string(p.Code))
			if r.Status != 200 || !strings.Contains(string(r.Body), p.Title) {
				t.Fatalf("%d: page without its title", r.Status)
			}
		})
	}
	if r := env.get("/problems/nope", "Accept", "text/html"); r.Status != 404 || !strings.Contains(string(r.Body), "<html") {
		t.Fatalf("unknown problem: %d %s", r.Status, r.Body)
	}
}

func assertProblem(t *testing.T, r response, status int, slug string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %d %s, want %d", r.Status, r.Body, status)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json", ct)
	}
	m := r.JSON(t)
	if typ, _ := m["type"].(string); !strings.HasSuffix(typ, "/problems/"+slug) {
		t.Fatalf("type %q, want …/problems/%s", typ, slug)
	}
	if m["status"] != float64(status) || m["title"] == "" || m["detail"] == "" {
		t.Fatalf("incomplete problem: %s", r.Body)
	}
}

func assertNothingSaved(t *testing.T, env *testEnv) {
	t.Helper()
	started, done, err := env.DB.KeyCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if started+done != 0 || env.charges() != 0 {
		t.Fatalf("something was saved: %d started, %d done keys, %d charges", started, done, env.charges())
	}
}

// waitForKeyStatus waits, by subscribing to the hub rather than sleeping,
// until the key has the status.
func waitForKeyStatus(t *testing.T, env *testEnv, key, status string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*1e9)
	defer cancel()
	sub := env.Server.hub.Subscribe(0)
	for {
		if k, err := env.DB.GetKey(ctx, AnonymousScope, key); err == nil && k.Status == status {
			return
		}
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("key %s never became %s: %v", key, status, err)
		}
	}
}

func TestLateRetryOfAPrunedKeyFindsTheRecordedCharge(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	first := env.pay("late", articleBody)
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	env.Clock.Advance(25 * time.Hour)
	if n, err := env.Server.Jobs().Prune(context.Background()); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	// The key is forgotten, so the retry is a new request; but the gateway
	// and the charges table still know the key, so nothing is charged twice
	// and nothing is left stuck in started.
	late := env.pay("late", articleBody)
	if late.Status != 201 || late.JSON(t)["charge_id"] != first.JSON(t)["charge_id"] {
		t.Fatalf("late retry: %d %s, want 201 with the first charge %s", late.Status, late.Body, first.Body)
	}
	// It answers what was done before, not work of its own: a replay.
	if late.Header.Get("Idempotent-Replayed") != "true" || late.Header.Get("Stripe-Should-Retry") != "false" {
		t.Fatalf("late retry's headers: %v", late.Header)
	}
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	k, err := env.DB.GetKey(context.Background(), AnonymousScope, "late")
	if err != nil || k.Status != pay.StatusDone {
		t.Fatalf("key after the late retry: %+v %v", k, err)
	}
	if again := env.pay("late", articleBody); !bytes.Equal(again.Body, late.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after the late retry: %d %s", again.Status, again.Body)
	}
}

// TestAnswersNameTheirServer: behind a load balancer, the answer says
// which of the servers sharing the database gave it, replays and refusals
// too; a server on its own sends no name.
func TestAnswersNameTheirServer(t *testing.T) {
	t.Parallel()
	named := newTestEnv(t, Config{Name: "s2"})
	for _, r := range []response{named.pay("named-1", articleBody), named.pay("named-1", articleBody), named.pay("", articleBody)} {
		if got := r.Header.Get(ServerHeader); got != "s2" {
			t.Errorf("%d answered by %q, want s2", r.Status, got)
		}
	}
	alone := newTestEnv(t, Config{})
	if r := alone.pay("alone-1", articleBody); r.Header.Values(ServerHeader) != nil {
		t.Errorf("a server on its own says %v", r.Header.Values(ServerHeader))
	}
}
