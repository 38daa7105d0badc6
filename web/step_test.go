package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// stepEnv is a server with step mode on and a view of its events.
type stepEnv struct {
	*testEnv
	sub *live.Subscription
}

func newStepEnv(t *testing.T, cfg Config) *stepEnv {
	t.Helper()
	env := &stepEnv{testEnv: newTestEnv(t, cfg)}
	env.sub = env.Server.hub.Subscribe(env.Server.hub.LastSeq())
	env.Server.payments.steps.Turn(true, "test")
	return env
}

// api calls the step API as the presenter (no token is set).
func (e *stepEnv) api(method, path, body string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.URL+path, bytes.NewBufferString(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	r, err := do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// waitHeld reads the events until a request is held at the checkpoint,
// and returns the request's id.
func (e *stepEnv) waitHeld(checkpoint string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		entries, err := e.sub.Next(ctx)
		if err != nil {
			e.t.Fatalf("waiting for a request held at %q: %v", checkpoint, err)
		}
		for _, en := range entries {
			if en.Kind == step.KindHeld && en.Message == checkpoint {
				return en.Request
			}
		}
	}
}

// payAsync pays in the background; the answer (or the error) arrives on
// the channel.
func (e *stepEnv) payAsync(key, order string) <-chan response {
	out := make(chan response, 1)
	go func() {
		r, err := e.tryPay(key, fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order))
		if err != nil {
			r = response{Status: -1, Body: []byte(err.Error())}
		}
		out <- r
	}()
	return out
}

func wantStatus(t *testing.T, ch <-chan response, want int) response {
	t.Helper()
	select {
	case r := <-ch:
		if r.Status != want {
			t.Fatalf("answer %d %s, want %d", r.Status, r.Body, want)
		}
		return r
	case <-time.After(waitUntilBound):
		t.Fatalf("no answer; want %d", want)
	}
	return response{}
}

func TestStepMode(t *testing.T) {
	t.Parallel()
	t.Run("beyond the bound a request is refused with a 503, nothing saved, and paid once the others go", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		env.Server.payments.steps.Max = 3
		var answers []<-chan response
		for i := range 3 {
			answers = append(answers, env.payAsync(fmt.Sprintf("bound-%d", i), fmt.Sprintf("B-%d", i)))
			env.waitHeld("received")
		}
		r := env.pay("bound-3", `{"order_id":"B-3","amount_satang":129900}`)
		if r.Status != http.StatusServiceUnavailable || !bytes.Contains(r.Body, []byte("holds 3 requests")) {
			t.Fatalf("the fourth request: %d %s, want a 503 that says why", r.Status, r.Body)
		}
		if st := env.api(http.MethodGet, "/api/step", ""); bytes.Count(st.Body, []byte(`"request"`)) != 3 {
			t.Fatalf("held after the refusal: %s", st.Body)
		}
		if r := env.api(http.MethodPost, "/api/step/play", ""); r.Status != http.StatusOK {
			t.Fatalf("Play: %d %s", r.Status, r.Body)
		}
		for _, a := range answers {
			wantStatus(t, a, http.StatusCreated)
		}
		env.Server.payments.steps.Turn(false, "test")
		if r := env.pay("bound-3", `{"order_id":"B-3","amount_satang":129900}`); r.Status != http.StatusCreated {
			t.Fatalf("the refused request again, with its key: %d %s", r.Status, r.Body)
		}
		if n := env.charges(); n != 4 {
			t.Fatalf("%d charges, want 4", n)
		}
	})
	t.Run("a request stops at every checkpoint, and Next moves it one on", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		ans := env.payAsync("step-1", "A-1")
		for _, cp := range []string{"received", "key claimed", "before the gateway", "gateway answered", "saved", "answered"} {
			id := env.waitHeld(cp)
			st := env.api(http.MethodGet, "/api/step", "")
			if want := fmt.Sprintf(`"request":%q,"checkpoint":%q`, id, cp); !bytes.Contains(st.Body, []byte(want)) {
				t.Fatalf("GET /api/step at %q: %s", cp, st.Body)
			}
			if r := env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id)); r.Status != http.StatusOK {
				t.Fatalf("Next at %q: %d %s", cp, r.Status, r.Body)
			}
		}
		wantStatus(t, ans, http.StatusCreated)
		if env.charges() != 1 {
			t.Fatalf("%d charges", env.charges())
		}
	})
	t.Run("Next with nothing held is a 404", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		if r := env.api(http.MethodPost, "/api/step/next", ""); r.Status != http.StatusNotFound {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})
	t.Run("Finish runs one request to the end, Play all the others", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		a := env.payAsync("step-a", "A-2")
		first := env.waitHeld("received")
		b := env.payAsync("step-b", "A-3")
		env.waitHeld("received")
		if r := env.api(http.MethodPost, "/api/step/finish", fmt.Sprintf(`{"request":%q}`, first)); r.Status != http.StatusOK {
			t.Fatalf("Finish: %d %s", r.Status, r.Body)
		}
		wantStatus(t, a, http.StatusCreated)
		c := env.payAsync("step-c", "A-4")
		env.waitHeld("received")
		if r := env.api(http.MethodPost, "/api/step/play", ""); r.Status != http.StatusOK {
			t.Fatalf("Play: %d %s", r.Status, r.Body)
		}
		wantStatus(t, b, http.StatusCreated)
		wantStatus(t, c, http.StatusCreated)
	})
	t.Run("a double-click: hold the first after its claim, the second gets 409, the first finishes, one charge", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		first := env.payAsync("dbl", "A-5")
		id1 := env.waitHeld("received")
		env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id1))
		env.waitHeld("key claimed")
		second := env.payAsync("dbl", "A-5")
		id2 := env.waitHeld("received")
		env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id2))
		env.waitHeld("answered") // the 409, about to be sent
		// The bar says what it answers, and offers no fault that means
		// nothing for it: a 409 is not saved, so there is nothing to lose.
		st := env.api(http.MethodGet, "/api/step", "")
		if want := fmt.Sprintf(`"request":%q,"checkpoint":"answered","answer":409,"key"`, id2); !bytes.Contains(st.Body, []byte(want)) {
			t.Fatalf("GET /api/step: %s, want %s", st.Body, want)
		}
		if r := env.api(http.MethodPost, "/api/step/aim", fmt.Sprintf(`{"request":%q,"fault":"response_lost"}`, id2)); r.Status != http.StatusConflict {
			t.Fatalf("losing a 409's response: %d %s, want 409", r.Status, r.Body)
		}
		env.api(http.MethodPost, "/api/step/finish", fmt.Sprintf(`{"request":%q}`, id2))
		wantStatus(t, second, http.StatusConflict)
		env.api(http.MethodPost, "/api/step/finish", fmt.Sprintf(`{"request":%q}`, id1))
		wantStatus(t, first, http.StatusCreated)
		if env.charges() != 1 {
			t.Fatalf("%d charges", env.charges())
		}
	})
	t.Run("turning step mode off lets every held request go", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		a := env.payAsync("off-a", "A-6")
		env.waitHeld("received")
		b := env.payAsync("off-b", "A-7")
		env.waitHeld("received")
		if r := env.api(http.MethodPut, "/api/step", `{"on":false}`); r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"on":false`)) {
			t.Fatalf("off: %d %s", r.Status, r.Body)
		}
		wantStatus(t, a, http.StatusCreated)
		wantStatus(t, b, http.StatusCreated)
	})
	t.Run("a reset lets every held request go and turns step mode off", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		a := env.payAsync("reset-a", "A-8")
		env.waitHeld("received")
		env.api(http.MethodPost, "/api/step/next", "")
		env.waitHeld("key claimed") // it holds a claim, and the in-flight lock
		if r := env.api(http.MethodPost, "/api/reset", ""); r.Status != http.StatusOK {
			t.Fatalf("reset: %d %s", r.Status, r.Body)
		}
		wantStatus(t, a, http.StatusCreated)
		if env.Server.payments.steps.On() {
			t.Fatal("step mode is still on after the reset")
		}
	})
	t.Run("the time limit lets a forgotten request go, to the end", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		expire := make(chan time.Time)
		env.Server.payments.steps.After = func(time.Duration) <-chan time.Time { return expire }
		a := env.payAsync("limit", "A-9")
		env.waitHeld("received")
		close(expire) // the limit passes
		wantStatus(t, a, http.StatusCreated)
	})
	t.Run("with a fault switch: released into a lost response, the charge is kept and replayed", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		setFaults(t, env.testEnv, pay.ServerFaults{ResponseLost: true})
		a := env.payAsync("lost", "A-10")
		env.waitHeld("received")
		env.api(http.MethodPost, "/api/step/play", "")
		if r := <-a; r.Status != -1 {
			t.Fatalf("the response arrived: %d", r.Status)
		}
		setFaults(t, env.testEnv, pay.ServerFaults{})
		env.Server.payments.steps.Turn(false, "test")
		r := env.pay("lost", `{"order_id":"A-10","amount_satang":129900}`)
		if r.Status != http.StatusCreated || !isReplay(r) || env.charges() != 1 {
			t.Fatalf("retry: %d replayed=%v, %d charges", r.Status, isReplay(r), env.charges())
		}
	})
	t.Run("only the presenter steps", func(t *testing.T) {
		env := newStepEnv(t, Config{PresenterToken: "tok-step"})
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPut, "/api/step", `{"on":false}`}, {http.MethodPost, "/api/step/next", ""},
			{http.MethodPost, "/api/step/finish", ""}, {http.MethodPost, "/api/step/play", ""},
			{http.MethodPost, "/api/step/aim", `{"request":"rq_1","fault":"crash_midway"}`},
		} {
			if r := env.api(c.method, c.path, c.body); r.Status != http.StatusForbidden {
				t.Errorf("%s %s by a student: %d", c.method, c.path, r.Status)
			}
		}
		if r := env.api(http.MethodGet, "/api/step", ""); r.Status != http.StatusOK {
			t.Errorf("GET /api/step: %d", r.Status)
		}
	})
	t.Run("bad input is a 400", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		for _, body := range []string{`{}`, `{"on":"yes"}`, `{"on":true,"extra":1}`, `nope`} {
			if r := env.api(http.MethodPut, "/api/step", body); r.Status != http.StatusBadRequest {
				t.Errorf("PUT /api/step %s: %d %s", body, r.Status, r.Body)
			}
		}
	})
	t.Run("a fault aimed at one held request: its response is lost, the next one's is not", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		a := env.payAsync("aim-lost", "A-11")
		id := env.waitHeld("received")
		b := env.payAsync("aim-other", "A-12")
		env.waitHeld("received")
		if r := env.api(http.MethodPost, "/api/step/aim", fmt.Sprintf(`{"request":%q,"fault":"response_lost"}`, id)); r.Status != http.StatusOK {
			t.Fatalf("aim: %d %s", r.Status, r.Body)
		}
		env.api(http.MethodPost, "/api/step/play", "")
		if r := <-a; r.Status != -1 {
			t.Fatalf("the aimed request's response arrived: %d", r.Status)
		}
		wantStatus(t, b, http.StatusCreated)
		env.Server.payments.steps.Turn(false, "test")
		if r := env.pay("aim-lost", `{"order_id":"A-11","amount_satang":129900}`); r.Status != http.StatusCreated || !isReplay(r) {
			t.Fatalf("retry: %d replayed=%v", r.Status, isReplay(r))
		}
		if env.charges() != 2 {
			t.Fatalf("%d charges, want one per order", env.charges())
		}
	})
	t.Run("a crash aimed at a request before its gateway call leaves its key started for the sweeper", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		a := env.payAsync("aim-crash", "A-13")
		for _, cp := range []string{"received", "key claimed"} {
			env.waitHeld(cp)
			env.api(http.MethodPost, "/api/step/next", "")
		}
		id := env.waitHeld("before the gateway")
		if r := env.api(http.MethodPost, "/api/step/aim", fmt.Sprintf(`{"request":%q,"fault":"crash_midway"}`, id)); r.Status != http.StatusOK {
			t.Fatalf("aim: %d %s", r.Status, r.Body)
		}
		env.api(http.MethodPost, "/api/step/play", "")
		if r := <-a; r.Status != -1 {
			t.Fatalf("the crashed request answered %d", r.Status)
		}
		k, err := env.DB.GetKey(context.Background(), AnonymousScope, "aim-crash")
		if err != nil || k.Status != "started" || env.charges() != 0 {
			t.Fatalf("key %+v (%v), %d charges; want started and none recorded yet", k, err, env.charges())
		}
	})
	t.Run("aiming too late, at nothing held, or an unknown fault is refused", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		a := env.payAsync("aim-late", "A-14")
		for _, cp := range []string{"received", "key claimed", "before the gateway"} {
			env.waitHeld(cp)
			env.api(http.MethodPost, "/api/step/next", "")
		}
		id := env.waitHeld("gateway answered")
		for _, c := range []struct {
			body string
			want int
		}{
			{fmt.Sprintf(`{"request":%q,"fault":"crash_midway"}`, id), http.StatusConflict},
			{fmt.Sprintf(`{"request":%q,"fault":"explode"}`, id), http.StatusBadRequest},
			{`{"request":"rq_nothere","fault":"response_lost"}`, http.StatusNotFound},
		} {
			if r := env.api(http.MethodPost, "/api/step/aim", c.body); r.Status != c.want {
				t.Errorf("aim %s: %d %s, want %d", c.body, r.Status, r.Body, c.want)
			}
		}
		env.api(http.MethodPost, "/api/step/play", "")
		wantStatus(t, a, http.StatusCreated)
	})
}

// TestStepModeDrawsTheGatewayCallWhenItHappens: a request held "before the
// gateway" has not called it, so the stream carries no gateway call for it
// until the presenter lets it go; then the call comes after the resume.
func TestStepModeDrawsTheGatewayCallWhenItHappens(t *testing.T) {
	t.Parallel()
	env := newStepEnv(t, Config{})
	done := env.payAsync("gw-arrow", "G-1")
	var id string
	for _, cp := range []string{"received", "key claimed", "before the gateway"} {
		id = env.waitHeld(cp)
		if cp != "before the gateway" {
			env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id))
		}
	}
	kinds := func() []live.Kind {
		var out []live.Kind
		for _, e := range env.Server.hub.Recent(100) {
			if e.Request == id {
				out = append(out, e.Kind)
			}
		}
		return out
	}
	if got := kinds(); slices.Contains(got, live.GatewayCall) {
		t.Fatalf("held before the gateway, the stream already says the gateway was called: %v", got)
	}
	env.Server.payments.steps.Turn(false, "test") // lets it go
	if r := <-done; r.Status != http.StatusCreated {
		t.Fatalf("payment: %d %s", r.Status, r.Body)
	}
	got := kinds()
	call := slices.Index(got, live.GatewayCall)
	held := -1
	for i, k := range got {
		if k == step.KindHeld {
			held = i
		}
	}
	if call < 0 || call < held {
		t.Fatalf("the gateway call is not after the last hold: %v", got)
	}
}

// TestStepModeAtShutdownNothingUnsteppedIsCharged: once shutdown has
// begun (StopHeld runs while the listener still takes requests), a
// payment that step mode would hold, arriving then or running between two
// checkpoints, is ended as the held ones are: a 503 that says nothing was
// charged, its key released, no charge, and no gateway call on the
// timeline.
func TestStepModeAtShutdownNothingUnsteppedIsCharged(t *testing.T) {
	waitsOnRealClocks(t) // a server of its own in each case
	// stoppedUncharged checks the answer and the books for one key.
	stoppedUncharged := func(t *testing.T, env *stepEnv, r response, key string) {
		t.Helper()
		if r.Status != http.StatusServiceUnavailable || !bytes.Contains(r.Body, []byte("nothing was charged")) {
			t.Fatalf("answer %d %s, want the 503 that says nothing was charged", r.Status, r.Body)
		}
		if n := env.charges(); n != 0 {
			t.Fatalf("%d charges, want none", n)
		}
		if _, ok, err := env.DB.LookupGatewayCharge(context.Background(), gatewayKey(AnonymousScope, key)); err != nil || ok {
			t.Fatalf("the gateway charged the key (%v, %v)", ok, err)
		}
		for _, e := range env.Server.hub.Recent(200) {
			if e.Key == key && e.Kind == live.GatewayCall {
				t.Fatalf("the timeline draws a gateway call that never happened: %+v", e)
			}
		}
	}
	t.Run("a payment arriving after the held ones were stopped", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		env.Server.StopHeld()
		r, err := env.tryPay("late", `{"order_id":"S-1","amount_satang":129900}`)
		if err != nil {
			t.Fatal(err)
		}
		stoppedUncharged(t, env, r, "late")
	})
	// The lab's modes write other things for a key, or nothing: each
	// answer says what became of it, and the books agree.
	for _, mode := range []struct{ slug, says string }{
		{"no-key", "had written nothing for it"},
		{"check-then-insert", "the row it had inserted for its key was deleted"},
	} {
		t.Run("a payment held in the "+mode.slug+" chapter", func(t *testing.T) {
			env := newStepEnv(t, Config{})
			if err := env.Server.guidedLessons().start(context.Background(), mode.slug, "test"); err != nil {
				t.Fatal(err)
			}
			env.Server.payments.steps.Turn(true, "test")
			ans := env.payAsync("held-"+mode.slug, "S-3")
			env.waitHeld("received")
			if n := env.Server.StopHeld(); n != 1 {
				t.Fatalf("StopHeld ended %d held requests, want 1", n)
			}
			r := wantStatus(t, ans, http.StatusServiceUnavailable)
			if !bytes.Contains(r.Body, []byte("nothing was charged")) || !bytes.Contains(r.Body, []byte(mode.says)) {
				t.Fatalf("answer %s, want it to say nothing was charged and %q", r.Body, mode.says)
			}
			if n := env.charges(); n != 0 {
				t.Fatalf("%d charges, want none", n)
			}
			if chs, err := env.DB.LabLooseCharges(context.Background()); err != nil || len(chs) != 0 {
				t.Fatalf("unguarded charges %v (%v), want none", chs, err)
			}
			// Nothing is left for the key: a retry with it runs afresh.
			if k, found, err := env.DB.LabLooseFindKey(context.Background(), AnonymousScope, "held-"+mode.slug); err != nil || found {
				t.Fatalf("the unguarded key table still holds the key: %+v (%v)", k, err)
			}
		})
	}
	t.Run("a payment stepped on before shutdown, between two checkpoints when it begins", func(t *testing.T) {
		env := newStepEnv(t, Config{})
		// The server's delay switch runs between "key claimed" and
		// "before the gateway": the request waits in it until the test
		// has begun the shutdown.
		sleeping, wake := make(chan struct{}), make(chan struct{})
		env.Server.payments.sleep = func(ctx context.Context, d time.Duration) error {
			close(sleeping)
			<-wake
			return nil
		}
		if r := env.api(http.MethodPut, "/api/faults", `{"server":{"delay_ms":800}}`); r.Status != http.StatusOK {
			t.Fatalf("PUT /api/faults: %d %s", r.Status, r.Body)
		}
		ans := env.payAsync("between", "S-2")
		for _, cp := range []string{"received", "key claimed"} {
			id := env.waitHeld(cp)
			if r := env.api(http.MethodPost, "/api/step/next", fmt.Sprintf(`{"request":%q}`, id)); r.Status != http.StatusOK {
				t.Fatalf("Next at %q: %d %s", cp, r.Status, r.Body)
			}
		}
		<-sleeping
		if n := env.Server.StopHeld(); n != 0 {
			t.Fatalf("StopHeld ended %d held requests, want 0: the request runs between two checkpoints", n)
		}
		close(wake)
		stoppedUncharged(t, env, wantStatus(t, ans, http.StatusServiceUnavailable), "between")
	})
}
