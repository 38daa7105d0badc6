package web

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"paytwice/web/live"
)

const formBody = "order_id=A-1001&amount_satang=129900"

func TestAFormBodyIsTheSameRequestAsItsJSONTwin(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	form := func(key, body string) response {
		return env.must(http.MethodPost, paymentsPath, body, "Idempotency-Key", key, "Content-Type", "application/x-www-form-urlencoded")
	}
	first := form("form-1", formBody)
	if first.Status != http.StatusCreated {
		t.Fatalf("form payment: %d %s", first.Status, first.Body)
	}
	twin := env.mustPay("form-1", articleBody)
	if twin.Status != http.StatusCreated || !isReplay(twin) || string(twin.Body) != string(first.Body) {
		t.Fatalf("the JSON twin with the same key: %d %s %v, want the form's 201 replayed", twin.Status, twin.Body, twin.Header)
	}
	if again := form("form-1", "amount_satang=129900&order_id=A-1001"); again.Status != http.StatusCreated || !isReplay(again) {
		t.Fatalf("the form in another order: %d %s", again.Status, again.Body)
	}
	if other := form("form-1", "order_id=A-1002&amount_satang=129900"); other.Status != http.StatusUnprocessableEntity {
		t.Fatalf("another order under the key: %d %s, want 422", other.Status, other.Body)
	}
	if n := env.chargesFor("A-1001"); n != 1 {
		t.Fatalf("%d charges for the order, want 1", n)
	}
	for _, body := range []string{
		"order_id=A-1001&amount_satang=129900&amount_satang=1",
		"order_id=A-1001&amount_satang=129900&currency=thb",
		"order_id=A-1001",
		"order_id=A%FF&amount_satang=1",
	} {
		t.Run(body+" is refused with 400 and nothing saved", func(t *testing.T) {
			r := form("form-bad", body)
			if r.Status != http.StatusBadRequest || problemSlug(t, r) != "invalid-request" || r.Header.Get("Stripe-Should-Retry") != "false" {
				t.Fatalf("%d %s %v", r.Status, r.Body, r.Header)
			}
			if s := env.keyStatus("form-bad"); s != "" {
				t.Fatalf("key saved as %q", s)
			}
		})
	}
	if r := env.must(http.MethodPost, paymentsPath, formBody, "Idempotency-Key", "form-2", "Content-Type", "text/plain"); r.Status != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d %s", r.Status, r.Body)
	}
}

func TestAnOrderIDThatIsNotUTF8IsRefused(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	// Half a surrogate pair decodes to U+FFFD in most JSON decoders: two
	// different bodies that would share one fingerprint.
	for i, body := range []string{`{"order_id": "A-\ud800", "amount_satang": 1}`, `{"order_id": "A-\udfff", "amount_satang": 1}`} {
		r := env.mustPay("utf-"+strconv.Itoa(i), body)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "UTF-8") {
			t.Fatalf("%s: %d %s, want 400 naming UTF-8", body, r.Status, r.Body)
		}
	}
}

func TestProblemTypesDoNotDependOnTheHostHeader(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	r := env.must(http.MethodPost, paymentsPath, articleBody, "Host", "evil.example")
	if typ := r.JSON(t)["type"]; typ != "/problems/missing-key" {
		t.Fatalf("type %q, want /problems/missing-key", typ)
	}
	// A saved error is replayed to everyone: no client may write its host
	// into it.
	env.setFaults(`{"server":{"server_error":true}}`)
	saved := env.must(http.MethodPost, paymentsPath, articleBody, "Idempotency-Key", "host-500", "Host", "evil.example")
	env.setFaults(`{}`)
	replay := env.mustPay("host-500", articleBody)
	if saved.Status != 500 || replay.Status != 500 || !isReplay(replay) || strings.Contains(string(replay.Body), "evil") {
		t.Fatalf("saved %d %s, replayed %d %s", saved.Status, saved.Body, replay.Status, replay.Body)
	}
	if typ := replay.JSON(t)["type"]; typ != "/problems/server-error" {
		t.Fatalf("replayed type %q", typ)
	}
	if page := env.get(replay.JSON(t)["type"].(string), "Accept", "text/html"); page.Status != http.StatusOK {
		t.Fatalf("the type's page, resolved against the server: %d", page.Status)
	}
}

// stripeError is Stripe's error object, as its SDKs read it.
type stripeErrorBody struct {
	Error struct {
		Type, Code, Message string
		DocURL              string `json:"doc_url"`
	}
}

func TestStripeSDKsGetStripesErrorShape(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	stripe := []string{"Content-Type", "application/x-www-form-urlencoded", "Stripe-Version", "2025-01-27.acacia",
		"X-Stripe-Client-User-Agent", `{"lang":"go"}`}
	pay := func(key, body string) (response, stripeErrorBody) {
		t.Helper()
		r := env.must(http.MethodPost, paymentsPath, body, append([]string{"Idempotency-Key", key}, stripe...)...)
		var e stripeErrorBody
		if r.Status >= 400 {
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("content type %q for %d %s", ct, r.Status, r.Body)
			}
			if err := json.Unmarshal(r.Body, &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
				t.Fatalf("%d %s is not Stripe's error shape", r.Status, r.Body)
			}
		}
		return r, e
	}
	if r, _ := pay("st-1", formBody); r.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	r, e := pay("st-1", "order_id=A-1002&amount_satang=129900")
	if r.Status != http.StatusBadRequest || e.Error.Type != "idempotency_error" || e.Error.DocURL != "/problems/key-reused" {
		t.Fatalf("a reused key: %d %+v, want 400 idempotency_error", r.Status, e)
	}
	r, e = pay("st-2", "order_id=A-1003")
	if r.Status != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || r.Header.Get("Stripe-Should-Retry") != "false" {
		t.Fatalf("a bad body: %d %+v %v", r.Status, e, r.Header)
	}

	env.setFaults(`{"gateway":{"decline":true}}`)
	r, e = pay("st-3", "order_id=A-1004&amount_satang=1")
	if r.Status != http.StatusPaymentRequired || e.Error.Type != "card_error" || e.Error.Code != "card_declined" {
		t.Fatalf("a decline: %d %+v", r.Status, e)
	}
	env.setFaults(`{"server":{"server_error":true}}`)
	pay("st-4", "order_id=A-1005&amount_satang=1")
	env.setFaults(`{}`)
	// The saved 500 reads as problem+json to one client and as Stripe's
	// error to the other.
	r, e = pay("st-4", "order_id=A-1005&amount_satang=1")
	if r.Status != http.StatusInternalServerError || !isReplay(r) || e.Error.Type != "api_error" || r.Header.Get("Stripe-Should-Retry") != "false" {
		t.Fatalf("a replayed 500: %d %+v %v", r.Status, e, r.Header)
	}
	if plain := env.mustPay("st-4", `{"order_id":"A-1005","amount_satang":1}`); problemSlug(t, plain) != "server-error" {
		t.Fatalf("the same replay without Stripe's headers: %s", plain.Body)
	}

	release := env.holdGateway()
	done := make(chan response, 1)
	go func() {
		r, _ := env.call(http.MethodPost, paymentsPath, formBody, append([]string{"Idempotency-Key", "st-5"}, stripe...)...)
		done <- r
	}()
	env.waitForEvent(live.GatewayCall, "st-5")
	r, e = pay("st-5", formBody)
	if r.Status != http.StatusConflict || e.Error.Type != "idempotency_error" || r.Header.Get("Stripe-Should-Retry") != "true" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a key in use: %d %+v %v", r.Status, e, r.Header)
	}
	release()
	<-done

	for code, m := range StripeErrors {
		if _, ok := problemsByCode[code]; !ok || m.Status == 0 || m.Type == "" || m.Code == "" {
			t.Errorf("mapping of %s: %+v", code, m)
		}
	}
	for _, p := range Problems {
		if _, ok := StripeErrors[p.Code]; !ok {
			t.Errorf("problem %s has no mapping to Stripe's shape", p.Code)
		}
	}
}

func TestAConflictOnAStoppedRequestSaysWhenTheSweeperCanCloseIt(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{LockTimeout: 30 * time.Second, SweepEvery: 5 * time.Second})
	env.setFaults(`{"server":{"crash_midway":true}}`)
	env.mustDrop("stalled", articleBody)
	env.setFaults(`{}`)
	env.Clock.Advance(4 * time.Second)
	r := env.mustPay("stalled", articleBody)
	if r.Status != http.StatusConflict || r.Header.Get("Retry-After") != "31" || r.Header.Get("Stripe-Should-Retry") != "true" ||
		!strings.Contains(string(r.Body), "no longer running") {
		t.Fatalf("409: %d %s %v, want Retry-After 31 (35 s from its claim, 4 s gone)", r.Status, r.Body, r.Header)
	}
	// Once that time is up the sweeper closes the key, and the retry the
	// 409 asked for finds the charge.
	env.Clock.Advance(31 * time.Second)
	env.sweepNow()
	if r := env.mustPay("stalled", articleBody); r.Status != http.StatusCreated || !isReplay(r) {
		t.Fatalf("retry after Retry-After: %d %s", r.Status, r.Body)
	}
}

func TestLabSettingsThatCannotWorkAreRefused(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{LockTimeout: 30 * time.Second}) // work time-out 15 s
	put := func(path, body string) response { return env.must(http.MethodPut, path, body) }
	if r := put("/api/lab", `{"server":{"mode":"memory_lock","check_gap_ms":5000}}`); r.Status != http.StatusOK {
		t.Fatalf("a lock in memory with a 5 s gap: %d %s", r.Status, r.Body)
	}
	r := put("/api/faults", `{"server":{"delay_ms":10000}}`)
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "cannot work together") {
		t.Fatalf("a 10 s delay on top: %d %s, want 400 saying why", r.Status, r.Body)
	}
	if r := put("/api/faults", `{"server":{"delay_ms":5000}}`); r.Status != http.StatusOK {
		t.Fatalf("a delay that fits: %d %s", r.Status, r.Body)
	}
	// The other way round: the switches first, then the lab.
	if r := put("/api/lab", `{"server":{"mode":"check_then_insert","check_gap_ms":5000}}`); r.Status != http.StatusOK {
		t.Fatalf("check first, 5 s gap, 5 s delay: %d %s", r.Status, r.Body)
	}
	put("/api/faults", `{"server":{"delay_ms":9000}}`)
	if r := env.must(http.MethodPatch, "/api/lab", `{"server":{"check_gap_ms":7000}}`); r.Status != http.StatusBadRequest {
		t.Fatalf("a gap that no longer fits: %d %s", r.Status, r.Body)
	}
	// The real protocol has no such pause: a long delay there is a lesson
	// (the gateway's time-out), not a mistake in the settings.
	put("/api/lab", `{"server":{"mode":"correct"}}`)
	if r := put("/api/faults", `{"server":{"delay_ms":10000},"gateway":{"latency_ms":10000}}`); r.Status != http.StatusOK {
		t.Fatalf("the real protocol with long waits: %d %s", r.Status, r.Body)
	}
}

func TestTheClientsPageShowsTheSDKsAndTheArticlesClient(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	r := env.get("/clients", "Accept", "text/html")
	body := string(r.Body)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /clients: %d", r.Status)
	}
	for _, want := range []string{"stripe-go v85", "stripe-node 23.1", "RemoteDisconnected", "def post_payment(url, body, retries=5)",
		"def post_payment(url, body, key, retries=5)", "Stripe-Should-Retry"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if !strings.Contains(string(env.get("/problems", "Accept", "text/html").Body), `href="/clients"`) {
		t.Error("the problem index does not link the page")
	}
}
