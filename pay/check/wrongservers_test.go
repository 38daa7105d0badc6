package check_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/check"
	"paytwice/sim"
	"paytwice/store"
	"paytwice/web"
)

// toyServer is a small payments API written the way many applications
// are, charging through the simulated gateway over HTTP. Its knobs make
// it wrong in the ways the lab does not show.
type toyServer struct {
	toyKnobs
	gateway string

	global sync.Mutex
	mu     sync.Mutex
	keys   map[string]*toyEntry
}

// toyKnobs are the mistakes a toyServer makes.
type toyKnobs struct {
	// ignoreBody replays a key's answer without comparing the request
	// with the one that made it.
	ignoreBody bool
	// globalLock runs every payment under one lock, whatever its key.
	globalLock bool
	// freshGatewayKey gives the gateway a reference of each attempt's
	// own instead of the client's key, and forgets the key when the
	// gateway does not answer: the retry charges again.
	freshGatewayKey bool
	// raceWindow makes the claim a read, a pause of this long, then a
	// write, each under the lock but not together: requests of one key
	// that arrive within the window all find it free.
	raceWindow time.Duration
	// saveGatewayFailure saves a 504 under the key when the gateway does
	// not answer, as Stripe saves its 500s: every retry gets it.
	saveGatewayFailure bool
	// gatewayAuth, when set, is the Authorization the toy charges the
	// gateway with: the merchant key a class's gateway asks for.
	gatewayAuth string
}

type toyEntry struct {
	fingerprint string
	done        bool
	status      int
	body        []byte
}

func startToy(t *testing.T, knobs toyKnobs, gateway string) string {
	t.Helper()
	toy := &toyServer{toyKnobs: knobs, gateway: gateway, keys: map[string]*toyEntry{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", toy.pay)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL + "/pay"
}

func startGateway(t *testing.T) string {
	t.Helper()
	hs := httptest.NewServer(sim.NewGatewayHandler(time.Now))
	t.Cleanup(hs.Close)
	return hs.URL
}

func toyProblem(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"https://toy.example/problems/%d","status":%d,"title":%q}`, status, status, msg)
}

func (toy *toyServer) pay(w http.ResponseWriter, r *http.Request) {
	if toy.globalLock {
		toy.global.Lock()
		defer toy.global.Unlock()
	}
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	if len(r.Header.Values("Idempotency-Key")) != 1 || key == "" || len(key) > 255 {
		toyProblem(w, http.StatusBadRequest, "a key of 1-255 characters is required")
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
	var body struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount_satang"`
	}
	bad := json.Unmarshal(raw, &body) != nil
	if r.Header.Get("Content-Type") == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(raw))
		amount, aerr := strconv.ParseInt(form.Get("amount_satang"), 10, 64)
		body.OrderID, body.Amount, bad = form.Get("order_id"), amount, err != nil || aerr != nil
	}
	if bad || body.OrderID == "" || body.Amount <= 0 {
		toyProblem(w, http.StatusBadRequest, "invalid body")
		return
	}
	// The fingerprint is of the request, not of its bytes: the same
	// members in another order are the same payment.
	canon, _ := json.Marshal(body)
	sum := sha256.Sum256(canon)
	fp := hex.EncodeToString(sum[:])
	id := r.Header.Get("Authorization") + "|" + key

	toy.mu.Lock()
	e, found := toy.keys[id]
	if !found && toy.raceWindow > 0 {
		toy.mu.Unlock()
		time.Sleep(toy.raceWindow)
		toy.mu.Lock()
	}
	switch {
	case found && !toy.ignoreBody && e.fingerprint != fp:
		toy.mu.Unlock()
		toyProblem(w, http.StatusUnprocessableEntity, "the key was used with another request")
		return
	case found && !e.done:
		toy.mu.Unlock()
		// Retry at once (0 s): the cases ask only that Retry-After be
		// there, and a second's wait per retry is most of a run's time.
		w.Header().Set("Retry-After", "0")
		toyProblem(w, http.StatusConflict, "still running")
		return
	case found:
		toy.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		w.Write(e.body)
		return
	}
	e = &toyEntry{fingerprint: fp}
	toy.keys[id] = e
	toy.mu.Unlock()

	ref := id
	if toy.freshGatewayKey {
		var b [8]byte
		rand.Read(b[:])
		ref = hex.EncodeToString(b[:])
	}
	gb, _ := json.Marshal(map[string]any{"order_id": body.OrderID, "amount": body.Amount})
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, toy.gateway+"/charges", bytes.NewReader(gb))
	req.Header.Set("Idempotency-Key", ref)
	if toy.gatewayAuth != "" {
		req.Header.Set("Authorization", toy.gatewayAuth)
	}
	res, err := http.DefaultClient.Do(req)
	var charge struct {
		ID string `json:"id"`
	}
	if err == nil && res.StatusCode == http.StatusPaymentRequired {
		// Declined: saved under the key, as the answer to this payment.
		res.Body.Close()
		out := fmt.Appendf(nil, `{"type":"https://toy.example/problems/declined","status":402,"title":"declined","order_id":%q}`, body.OrderID)
		toy.mu.Lock()
		e.done, e.status, e.body = true, http.StatusPaymentRequired, out
		toy.mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusPaymentRequired)
		w.Write(out)
		return
	}
	if err == nil {
		err = json.NewDecoder(res.Body).Decode(&charge)
		res.Body.Close()
	}
	if err != nil && toy.saveGatewayFailure {
		out := []byte(`{"type":"https://toy.example/problems/gateway-timeout","status":504,"title":"the gateway did not answer"}`)
		toy.mu.Lock()
		e.done, e.status, e.body = true, http.StatusGatewayTimeout, out
		toy.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGatewayTimeout)
		w.Write(out)
		return
	}
	if err != nil {
		// The gateway did not answer: forget the key so that a retry can
		// run. Safe only when the retry gives the gateway the same key.
		toy.mu.Lock()
		delete(toy.keys, id)
		toy.mu.Unlock()
		w.Header().Set("Retry-After", "0")
		toyProblem(w, http.StatusServiceUnavailable, "the gateway did not answer; retry with the same key")
		return
	}
	out, _ := json.Marshal(map[string]any{"charge": charge.ID, "order_id": body.OrderID, "amount_satang": body.Amount})
	toy.mu.Lock()
	e.done, e.status, e.body = true, http.StatusCreated, out
	toy.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(out)
}

// TestGatewayOracleWithSomeCases: the gateway's books count the effects
// whichever cases run, the first one or not.
func TestGatewayOracleWithSomeCases(t *testing.T) {
	t.Parallel() // a server and a gateway of its own
	gw := startGateway(t)
	url := startToy(t, toyKnobs{freshGatewayKey: true}, gw)
	rep := runCheck(t, check.Config{URL: url, Gateway: gw, Only: []int{12}})
	if rep.Oracle != check.OracleGateway || rep.Results[0].Verdict != check.Fail {
		t.Fatalf("oracle %q:\n%s", rep.Oracle, table(rep))
	}
}

// TestRaceThroughGateway: the read-then-write race, 1 ms wide, in a
// server charging through -gateway with a reference of each attempt's
// own, is caught in every one of 20 runs, the storm's charge held at the
// gateway.
func TestRaceThroughGateway(t *testing.T) {
	t.Parallel()
	// Four groups of five runs, each with a server and a gateway of its
	// own (case 4 holds the storm's charge with the gateway's switch),
	// wait on the hold side by side.
	const groups, runs = 4, 5
	for g := range groups {
		t.Run(fmt.Sprintf("runs %d to %d", g*runs+1, (g+1)*runs), func(t *testing.T) {
			t.Parallel()
			gw := startGateway(t)
			url := startToy(t, toyKnobs{raceWindow: time.Millisecond, freshGatewayKey: true}, gw)
			caught := 0
			for i := range runs {
				rep := runCheck(t, check.Config{URL: url, Gateway: gw, Seed: uint64(200 + g*runs + i), Only: []int{4}})
				if r := rep.Results[0]; r.Verdict == check.Fail && r.Safety {
					caught++
				} else {
					t.Logf("run %d: %s %s", g*runs+i+1, r.Verdict, r.Detail)
				}
			}
			if caught != runs {
				t.Errorf("the race was caught in %d of %d runs", caught, runs)
			}
		})
	}
}

// TestSavedGatewayTimeout: a 504 saved under its key is recognised after
// three identical answers, not retried for the whole -patience; it is
// Stripe's way (PASS under -profile stripe) and DIFFERS from the draft.
func TestSavedGatewayTimeout(t *testing.T) {
	t.Parallel()
	for profile, want := range map[string]check.Verdict{check.ProfileDraft: check.Differs, check.ProfileStripe: check.Pass} {
		t.Run(profile, func(t *testing.T) {
			t.Parallel() // a server and a gateway of its own
			gw := startGateway(t)
			url := startToy(t, toyKnobs{saveGatewayFailure: true}, gw)
			// The 504 is saved: how long case 12 waits before its retry
			// changes nothing, so it does not wait.
			noWait := func(context.Context, time.Duration) error { return nil }
			rep := runCheck(t, check.Config{URL: url, Gateway: gw, Seed: 21, Only: []int{12, 17}, Profile: profile, Patience: time.Hour, Wait: noWait})
			r := resultOf(t, rep, 12)
			if r.Verdict != want || !strings.Contains(r.Detail, "saved it (3 tries") {
				t.Errorf("-profile %s: case 12 %s %q, want %s", profile, r.Verdict, r.Detail, want)
			}
			if r := resultOf(t, rep, 17); !strings.Contains(r.Detail, "504 Gateway Timeout, saved and replayed") && !strings.Contains(r.Detail, "504, saved and replayed") {
				t.Errorf("-profile %s: case 17 %s %q", profile, r.Verdict, r.Detail)
			}
		})
	}
}

// TestWrongServers runs the checker against small servers of our own,
// each wrong in one way the lab does not show, and against the same
// server done right: each fails only the case that shows its mistake.
func TestWrongServers(t *testing.T) {
	tests := []struct {
		name string
		toy  toyKnobs
		// hideGateway keeps the checker from the gateway's books and
		// switches: its verdicts come from the answers alone.
		hideGateway bool
		form        bool // the body is a form, not JSON
		fail        map[int]string
	}{
		{name: "done right, it passes every case, the gateway's ones too"},
		{name: "done right with a form body, it passes every case", form: true},
		{name: "a replay that does not compare the body answers another body with the first one's charge",
			toy: toyKnobs{ignoreBody: true}, fail: map[int]string{2: "answered with the first request's saved"}},
		{name: "one lock for every key makes other keys wait behind a slow one",
			toy: toyKnobs{globalLock: true}, fail: map[int]string{10: "another key waited for the slow one"}},
		{name: "one lock for every key, taken before the body is read, holds other keys back while a body arrives",
			toy: toyKnobs{globalLock: true}, hideGateway: true, fail: map[int]string{10: "the keys queue behind one lock"}},
		{name: "a key forgotten after a gateway time-out, with a reference of its own, is charged again",
			toy: toyKnobs{freshGatewayKey: true}, fail: map[int]string{
				// The client hangs up once the gateway has charged: the
				// cancelled gateway call is the same mistake as a time-out.
				9:  "retried with its key: 2 effects",
				12: "charged again: 2 effects",
				17: "2 effects",
			}},
	}
	t.Parallel()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Each server waits on its gateway's latency and holds, not
			// on the processor: they wait side by side.
			t.Parallel()
			for _, part := range wrongServerParts() {
				t.Run(part.name, func(t *testing.T) {
					t.Parallel() // a server and a gateway of its own
					checkWrongServer(t, tc.toy, tc.hideGateway, tc.form, tc.fail, part.only)
				})
			}
		})
	}
}

// wrongServerParts splits the cases of TestWrongServers' runs in two,
// each run against a server and a gateway of its own: case 10 holds a
// payment at the gateway for seconds (up to 6 against one lock for every
// key), the others add up to about as long.
func wrongServerParts() []struct {
	name string
	only []int
} {
	var rest []int
	for n := 1; n <= check.CaseCount(); n++ {
		if n != 10 {
			rest = append(rest, n)
		}
	}
	return []struct {
		name string
		only []int
	}{{"case 10", []int{10}}, {"the other cases", rest}}
}

// checkWrongServer runs the cases only against a toy server with knobs:
// those in fail must fail saying their words, the others pass.
func checkWrongServer(t *testing.T, knobs toyKnobs, hideGateway, form bool, fail map[int]string, only []int) {
	t.Helper()
	gw := startGateway(t)
	url := startToy(t, knobs, gw)
	cfg := check.Config{URL: url, Gateway: gw, OtherAuth: "Bearer second", Seed: 7, Only: only}
	if hideGateway {
		cfg.Gateway = ""
	}
	if form {
		cfg.Form, cfg.Body = true, "order_id={{id}}&amount_satang={{amount}}"
	}
	rep := runCheck(t, cfg)
	if rep.Oracle != check.OracleGateway && !hideGateway {
		t.Errorf("effects counted by %q", rep.Oracle)
	}
	if len(rep.Results) != len(only) {
		t.Errorf("%d verdicts for %d cases", len(rep.Results), len(only))
	}
	want := check.ExitPassed
	for _, r := range rep.Results {
		words, shouldFail := fail[r.Case]
		if shouldFail {
			want = check.ExitFailed
		}
		switch {
		case shouldFail && (r.Verdict != check.Fail || !strings.Contains(r.Detail, words)):
			t.Errorf("case %d: %s %q; want FAIL saying %q", r.Case, r.Verdict, r.Detail, words)
		case !shouldFail && hideGateway && (r.Case == 12 || r.Case == 17) && r.Verdict == check.Skip:
		case !shouldFail && (r.Case == 13 || r.Case == 18) && r.Verdict == check.Skip:
			// They need -count-url and -replay-after.
		case !shouldFail && r.Verdict != check.Pass && r.Verdict != check.Info:
			t.Errorf("case %d %s: %s %q; want PASS", r.Case, r.Name, r.Verdict, r.Detail)
		}
	}
	if got := rep.ExitCode(false); got != want {
		t.Errorf("exit %d, want %d", got, want)
	}
	if t.Failed() {
		t.Log(table(rep))
	}
}

// TestGatewayToken: paytwice's own /sim/gateway on a server with a
// presenter token takes charges only with the merchant key the presenter
// hands out, and switches only with the token: a run without
// -gateway-token fails the cases that flip them, saying what to pass;
// with it, they pass, and the run leaves the switches off.
func TestGatewayToken(t *testing.T) {
	t.Parallel() // a server, a gateway and a token of its own
	const token = "s3cret-lecture"
	clock := sim.NewClock(time.Now)
	db, err := store.Open(filepath.Join(t.TempDir(), "paytwice.db"), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := web.NewServer(web.Config{Logger: log.New(io.Discard, "", 0), Ledger: db, PresenterToken: token}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close(); db.Close() })
	gw := hs.URL + "/sim/gateway"

	get := func(path string, header ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, gw+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	status, body := get("/merchant-key", check.GatewayTokenHeader, token)
	var mk struct{ Header string }
	if status != http.StatusOK || json.Unmarshal([]byte(body), &mk) != nil || !strings.HasPrefix(mk.Header, "Authorization: ") {
		t.Fatalf("merchant key: %d %s", status, body)
	}
	endpoint := startToy(t, toyKnobs{gatewayAuth: strings.TrimPrefix(mk.Header, "Authorization: ")}, gw)

	rep := runCheck(t, check.Config{URL: endpoint, Gateway: gw, Only: []int{9}})
	if r := rep.Results[0]; rep.Oracle != check.OracleGateway || r.Verdict != check.Fail || !strings.Contains(r.Detail, "-gateway-token") {
		t.Fatalf("without the token: oracle %s, %s %s; want a FAIL naming -gateway-token", rep.Oracle, r.Verdict, r.Detail)
	}
	rep = runCheck(t, check.Config{URL: endpoint, Gateway: gw, GatewayToken: token, Only: []int{9, 12}})
	for _, r := range rep.Results {
		if r.Verdict != check.Pass {
			t.Fatalf("with the token, case %d: %s %s, want PASS", r.Case, r.Verdict, r.Detail)
		}
	}
	if status, body := get("/switches"); status != http.StatusOK || body != "{\"latency_ms\":0,\"hold_answer_ms\":0,\"latency_order_id\":\"\",\"timeout\":false,\"refuse\":false}\n" {
		t.Fatalf("the run left the switches %d %s", status, body)
	}
}
