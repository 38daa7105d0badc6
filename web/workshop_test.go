package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/check"
	"paytwice/sim"
	"paytwice/web/workshop"
)

// The workshop's students listen on loopback addresses of their own:
// 127.0.0.2, 127.0.0.3… are not the test server's 127.0.0.1, which the
// room never calls.
var workshopStudentNets = workshop.Nets(
	netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("127.0.0.3/32"), netip.MustParsePrefix("127.0.0.4/32"),
)

// workshopOpen is WorkshopSettings.On for opening the workshop.
var workshopOpen = true

// workshopClosed is WorkshopSettings.On for closing it.
var workshopClosed = false

// newWorkshopEnv is a server with the workshop open, calling the
// students' loopback addresses.
func newWorkshopEnv(t *testing.T) *testEnv {
	t.Helper()
	return newWorkshopEnvWith(t, "")
}

// newWorkshopEnvWith is newWorkshopEnv with a presenter token.
func newWorkshopEnvWith(t *testing.T, token string) *testEnv {
	t.Helper()
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, PresenterToken: token, workshopTune: workshopQuickRun})
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	return env
}

// workshopQuickRun makes a quick run's checker send one storm of one key
// in case 4 instead of check.DefaultRounds: the tests here ask whether a
// correct server passes and a server with no key table is caught, and one
// storm catches that server every time; the rounds exist for a race
// window of a millisecond, which none of these servers has. Most of a
// reference server's run was its five storms (13 of 23 s for the Python
// one, whose storm answers one request at a time). A full run
// (PAYTWICE_TEST_FULL=1) keeps the default rounds.
func workshopQuickRun(c *check.Config) {
	if !fullRun() {
		c.Rounds = 1
	}
}

// registerStudent registers a student's endpoint under a bearer token of
// their own and returns their view (with their gateway's address).
func registerStudent(t *testing.T, env *testEnv, token, name, endpoint string) WorkshopStudent {
	t.Helper()
	r := env.send(http.MethodPost, workshopAPI+"/endpoint", WorkshopRegister{Name: name, URL: endpoint}, "Authorization", "Bearer "+token)
	if r.Status != http.StatusOK {
		t.Fatalf("registering %s at %s: %d %s", name, endpoint, r.Status, r.Body)
	}
	var v WorkshopStudent
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.Gateway, env.URL+workshopGateways) {
		t.Fatalf("%s's gateway is %q, want one under %s%s", name, v.Gateway, env.URL, workshopGateways)
	}
	return v
}

// runStudent asks for the token's run and waits, bounded, for its end.
func runStudent(t *testing.T, env *testEnv, token string) WorkshopStudent {
	t.Helper()
	askRun(t, env, token)
	return waitStudent(t, env, token)
}

// askRun asks for the token's run without waiting for it.
func askRun(t *testing.T, env *testEnv, token string) {
	t.Helper()
	if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+token); r.Status != http.StatusAccepted {
		t.Fatalf("asking for a run: %d %s", r.Status, r.Body)
	}
}

func waitStudent(t *testing.T, env *testEnv, token string) WorkshopStudent {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		var v WorkshopStudent
		r := env.send(http.MethodGet, workshopAPI+"/me", nil, "Authorization", "Bearer "+token)
		if err := json.Unmarshal(r.Body, &v); err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET %s/me: %d %s", workshopAPI, r.Status, r.Body)
		}
		if v.State == "done" || v.State == "not run" {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is still %s after 4 minutes: %+v", v.State, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr is a free port on a student's loopback address.
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listening on %s (a loopback address of its own): %v", ip, err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startProgram runs a student's server and waits until it takes
// connections at addr.
func startProgram(t *testing.T, addr, gateway string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "ADDR="+addr, "GATEWAY="+gateway)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Generous: a loaded machine starts an interpreter slowly.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited before listening: %s", name, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done // the program writes its stderr until it has exited
			t.Fatalf("%s does not listen at %s after 60 s: %s", name, addr, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goReferenceServer builds docs/workshop/server.go once per test binary.
var goReferenceServer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "paytwice-workshop-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "server")
	out, err := exec.Command("go", "build", "-o", bin, "../docs/workshop").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the reference server: %v: %s", err, out)
	}
	return bin, nil
})

func startGoReference(t *testing.T, addr, gateway string) {
	t.Helper()
	bin, err := goReferenceServer()
	if err != nil {
		t.Fatal(err)
	}
	startProgram(t, addr, gateway, bin)
}

// naiveServer charges the gateway on every request with a key of its
// own: no key table, so every retry is a new charge.
func naiveServer(t *testing.T, addr, gateway string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			OrderID string `json:"order_id"`
			Amount  int64  `json:"amount_satang"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&p) != nil || p.OrderID == "" || p.Amount <= 0 {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		b, _ := json.Marshal(map[string]any{"order_id": p.OrderID, "amount": p.Amount})
		req, _ := http.NewRequest(http.MethodPost, gateway+"/charges", bytes.NewReader(b))
		req.Header.Set("Idempotency-Key", rand.Text())
		res, err := client.Do(req)
		if err != nil {
			http.Error(w, `{"error":"gateway"}`, http.StatusBadGateway)
			return
		}
		var ch struct{ ID string }
		_ = json.NewDecoder(res.Body).Decode(&ch)
		res.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge_id":%q,"status":"paid"}`, ch.ID)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
}

// TestWorkshopReferenceServersPass: the reference endpoint in Go (and in
// Python, where python3 is installed) registers, charges through its own
// gateway, and passes on the scoreboard: no case failed, its gateway
// charged no order twice. The two run side by side, as two students'
// runs do: they share no gateway, no address and no key.
func TestWorkshopReferenceServersPass(t *testing.T) {
	// The checker's runs wait on the reference servers in real time (its
	// patience with a held key, its time-outs), on a server of its own.
	waitsOnRealClocks(t)
	env := newWorkshopEnv(t)
	addr := freeAddr(t, "127.0.0.2")
	goToken := "ana-" + hex.EncodeToString(randomBytes(8))
	goMe := registerStudent(t, env, goToken, "Ana", "http://"+addr)
	if goMe.Endpoint != "http://"+addr+"/v1/payments" {
		t.Errorf("the endpoint is %q: an address with no path means /v1/payments", goMe.Endpoint)
	}
	startGoReference(t, addr, goMe.Gateway)
	askRun(t, env, goToken)
	py, pyErr := exec.LookPath("python3")
	pyToken := "ben-" + hex.EncodeToString(randomBytes(8))
	if pyErr == nil {
		addr := freeAddr(t, "127.0.0.3")
		me := registerStudent(t, env, pyToken, "Ben", "http://"+addr+"/v1/payments")
		startProgram(t, addr, me.Gateway, py, "../docs/workshop/server.py")
		askRun(t, env, pyToken)
	}
	t.Run("the Go reference server passes", func(t *testing.T) {
		assertPasses(t, env, goToken, goMe.Name)
	})
	t.Run("the Python reference server passes", func(t *testing.T) {
		if pyErr != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("python3 is missing: .ci/run installs it")
			}
			t.Skip("python3 is not installed")
		}
		assertPasses(t, env, pyToken, "Ben")
	})
}

// assertPasses waits for the run asked for token and checks that it
// passed.
func assertPasses(t *testing.T, env *testEnv, token, name string) {
	t.Helper()
	mine := waitStudent(t, env, token)
	row := boardRow(t, env, name)
	if row.State != "done" || row.Failed != 0 || row.FirstSafety != "" || row.FirstFailure != "" || row.Passed == 0 {
		t.Fatalf("%s's row: %+v (own view %+v), want a finished run with no failure", name, row, mine)
	}
	if row.Charges == 0 {
		t.Fatalf("%s's gateway holds no charge: the run did not charge through it", name)
	}
	t.Logf("%s: %d of %d cases passed, %d charges at the gateway", name, row.Passed, row.Cases, row.Charges)
}

// boardRow is name's row on the scoreboard, as GET /api/workshop gives it.
func boardRow(t *testing.T, env *testEnv, name string) WorkshopStudent {
	t.Helper()
	var b WorkshopBoard
	env.decodeGet(workshopAPI, &b)
	for _, s := range b.Students {
		if s.Name == name {
			if s.Gateway != "" {
				t.Errorf("the scoreboard shows %s's gateway address: only its student may see it", name)
			}
			return s
		}
	}
	t.Fatalf("%s is not on the scoreboard: %+v", name, b.Students)
	return WorkshopStudent{}
}

// TestWorkshopNaiveServerDoubleCharges: a server with no key table
// charges again on every retry; the scoreboard shows the safety failure
// and the orders its gateway charged twice, while the run is still going
// (each case's verdict is shown as soon as it is known).
func TestWorkshopNaiveServerDoubleCharges(t *testing.T) {
	waitsOnRealClocks(t) // the checker's runs, on a server of its own
	env := newWorkshopEnv(t)
	addr := freeAddr(t, "127.0.0.2")
	token := "cat-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, env, token, "Cat", "http://"+addr+"/v1/payments")
	naiveServer(t, addr, me.Gateway)
	asked := time.Now()
	if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+token); r.Status != http.StatusAccepted {
		t.Fatalf("asking for a run: %d %s", r.Status, r.Body)
	}
	var early WorkshopStudent
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		early = boardRow(t, env, "Cat")
		if early.FirstSafety != "" || early.State == "done" || early.State == "not run" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no safety failure on the scoreboard a minute into the run: %+v", early)
		}
	}
	// The figure docs/workshop.md quotes (logged, not asserted).
	t.Logf("%d ms from asking for the run to the first safety failure on the scoreboard: %s", time.Since(asked).Milliseconds(), early.FirstSafety)
	if early.State != "running" || !doubleCharge.MatchString(early.FirstSafety) {
		t.Errorf("the first safety failure, a double charge, should show while the run goes on: %+v", early)
	}
	// The same key a second time asks again while the first run goes on.
	if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+token); r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "under way") {
		t.Errorf("a second run while the first goes on: %d %s, want 409 saying it is under way", r.Status, r.Body)
	}
	row := waitStudent(t, env, token)
	if row.State != "done" || !doubleCharge.MatchString(row.FirstSafety) || row.Failed == 0 || row.FirstSafety != early.FirstSafety {
		t.Fatalf("the naive server's row: %+v, want its first safety failure, a double charge, kept", row)
	}
	if strings.ContainsAny(row.FirstSafety, "\r\n") || len([]rune(row.FirstSafety)) > 180 {
		t.Errorf("the reason is not one short line: %q", row.FirstSafety)
	}
	t.Logf("first safety failure: %s; %d charges at the gateway", row.FirstSafety, row.Charges)
}

// doubleCharge is how the checker says one action was charged more than
// once.
var doubleCharge = regexp.MustCompile(`[2-9]\d* (charges|effects)`)

// TestWorkshopRefusesForbiddenAddresses: an address the room must not
// call is refused at registration with a sentence, on the API as
// problem+json; nothing is registered.
func TestWorkshopRefusesForbiddenAddresses(t *testing.T) {
	t.Parallel()
	env := newWorkshopEnv(t)
	self := strings.TrimPrefix(env.URL, "http://")
	for _, c := range []struct {
		name, url string
		status    int
		says      string
	}{
		{"the server itself", env.URL + "/v1/payments", http.StatusForbidden, "this server itself"},
		{"the server's loopback at another port", "http://127.0.0.1:1/v1/payments", http.StatusForbidden, "this server itself"},
		{"the metadata address", "http://169.254.169.254/latest/meta-data", http.StatusForbidden, "secrets"},
		{"a link-local address", "http://169.254.10.1:8000", http.StatusForbidden, "link-local"},
		{"an address outside the allowed networks", "http://10.1.2.3:8000/v1/payments", http.StatusForbidden, "outside them"},
		{"another loopback address not allowed", "http://127.0.0.9:8000", http.StatusForbidden, "loopback"},
		{"an IPv6 loopback", "http://[::1]:8000", http.StatusForbidden, "this server itself"},
		{"the unspecified address", "http://0.0.0.0:8000", http.StatusForbidden, "not one computer"},
		{"no scheme", self, http.StatusBadRequest, "Start the address with http://"},
		{"another scheme", "ftp://127.0.0.2/x", http.StatusBadRequest, "not ftp://"},
		{"a password in it", "http://me:pw@127.0.0.2:8000", http.StatusBadRequest, "password"},
		{"a bad port", "http://127.0.0.2:99999", http.StatusBadRequest, "port"},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			r := env.send(http.MethodPost, workshopAPI+"/endpoint", WorkshopRegister{Name: "Dee", URL: c.url}, "Authorization", "Bearer dee-token")
			if r.Status != c.status || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("%s: %d %s %s, want %d problem+json", c.url, r.Status, r.Header.Get("Content-Type"), r.Body, c.status)
			}
			var p struct{ Detail string }
			if err := json.Unmarshal(r.Body, &p); err != nil || !strings.Contains(p.Detail, c.says) || !strings.HasSuffix(p.Detail, ".") {
				t.Fatalf("%s: the refusal says %q, want a sentence with %q", c.url, p.Detail, c.says)
			}
		})
	}
	var b WorkshopBoard
	env.decodeGet(workshopAPI, &b)
	if len(b.Students) != 0 {
		t.Fatalf("refused registrations are on the scoreboard: %+v", b.Students)
	}
}

// TestWorkshopBooksArePerStudent: two students run at once, a correct
// server and a naive one; each run counts only its own gateway's books,
// so the correct one still passes with no order charged twice, and a
// charge at one student's gateway never shows in the other's.
func TestWorkshopBooksArePerStudent(t *testing.T) {
	waitsOnRealClocks(t) // the checker's runs, on a server of its own
	// Each request of the checker may take 30 s, not 5: the test is about
	// whose books a charge lands in, and on a loaded machine the storm's
	// one request that reaches the gateway could pass 5 s and read as no
	// answer.
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, workshopTune: func(c *check.Config) {
		workshopQuickRun(c)
		c.Timeout = 30 * time.Second
	}})
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	goodAddr, naiveAddr := freeAddr(t, "127.0.0.2"), freeAddr(t, "127.0.0.3")
	goodTok, naiveTok := "eve-"+hex.EncodeToString(randomBytes(8)), "fay-"+hex.EncodeToString(randomBytes(8))
	good := registerStudent(t, env, goodTok, "Eve", "http://"+goodAddr)
	naive := registerStudent(t, env, naiveTok, "Fay", "http://"+naiveAddr)
	if good.Gateway == naive.Gateway {
		t.Fatal("two students share a gateway")
	}
	startGoReference(t, goodAddr, good.Gateway)
	naiveServer(t, naiveAddr, naive.Gateway)
	for _, tok := range []string{goodTok, naiveTok} {
		if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+tok); r.Status != http.StatusAccepted {
			t.Fatalf("asking for a run: %d %s", r.Status, r.Body)
		}
	}
	g, n := waitStudent(t, env, goodTok), waitStudent(t, env, naiveTok)
	if g.State != "done" || g.Failed != 0 || g.FirstSafety != "" {
		t.Errorf("the correct server, run beside a naive one: %+v", g)
	}
	if n.State != "done" || !doubleCharge.MatchString(n.FirstSafety) {
		t.Errorf("the naive server, run beside a correct one: %+v", n)
	}
	// A charge at Fay's gateway is in Fay's books only.
	before := boardRow(t, env, "Eve").Charges
	req, _ := http.NewRequest(http.MethodPost, naive.Gateway+"/charges", strings.NewReader(`{"order_id":"only-fay","amount":100}`))
	req.Header.Set("Idempotency-Key", "only-fay-1")
	if r, err := do(req); err != nil || r.Status != http.StatusCreated {
		t.Fatalf("charging Fay's gateway: %v %d %s", err, r.Status, r.Body)
	}
	if after := boardRow(t, env, "Eve").Charges; after != before {
		t.Errorf("a charge at Fay's gateway changed Eve's books: %d → %d", before, after)
	}
	if r := env.get(strings.TrimPrefix(good.Gateway, env.URL) + "/charges?order_id=only-fay"); !strings.Contains(string(r.Body), `"charges":[]`) {
		t.Errorf("Eve's gateway lists Fay's order: %s", r.Body)
	}
}

// TestWorkshopPresenterFaults: only the presenter flips the faults every
// student's gateway gives and re-runs everyone; with the gateway dropping
// each key's first answer after the charge, the reference server, which
// asks its gateway again with the same key, still passes, and the run
// says which faults it met.
func TestWorkshopPresenterFaults(t *testing.T) {
	waitsOnRealClocks(t) // the checker's runs, on a server of its own
	const token = "teach-faults-7"
	env := newWorkshopEnvWith(t, token)
	drop := WorkshopSettings{On: &workshopOpen, Faults: sim.GatewayBaseFaults{DropFirstAnswer: true, LatencyMS: 20}}
	if r := env.send(http.MethodPut, workshopAPI, drop, "Authorization", "Bearer student"); r.Status != http.StatusForbidden {
		t.Fatalf("a student flipping the faults: %d %s, want 403", r.Status, r.Body)
	}
	if r := env.send(http.MethodPost, workshopAPI+"/run-all", nil, "Authorization", "Bearer student"); r.Status != http.StatusForbidden {
		t.Fatalf("a student re-running everyone: %d %s, want 403", r.Status, r.Body)
	}
	tooSlow := WorkshopSettings{On: &workshopOpen, Faults: sim.GatewayBaseFaults{LatencyMS: 20_000}}
	if r := env.send(http.MethodPut, workshopAPI, tooSlow, PresenterHeader, token); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "between 0 and") {
		t.Fatalf("a latency of 20 s: %d %s, want 400 saying the bounds", r.Status, r.Body)
	}
	if r := env.send(http.MethodPut, workshopAPI, drop, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("dropping first answers: %d %s", r.Status, r.Body)
	}
	addr := freeAddr(t, "127.0.0.2")
	tok := "hal-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, env, tok, "Hal", "http://"+addr)
	startGoReference(t, addr, me.Gateway)
	students := map[string]string{"Go": tok}
	// The Python reference server too, where python3 is installed (.ci/run
	// installs it).
	if py, err := exec.LookPath("python3"); err == nil {
		pyAddr := freeAddr(t, "127.0.0.3")
		pyTok := "ivy-" + hex.EncodeToString(randomBytes(8))
		pyMe := registerStudent(t, env, pyTok, "Ivy", "http://"+pyAddr)
		startProgram(t, pyAddr, pyMe.Gateway, py, "../docs/workshop/server.py")
		students["Python"] = pyTok
	} else if os.Getenv("CI") == "true" {
		t.Fatal("python3 is missing: .ci/run installs it")
	}
	if r := env.send(http.MethodPost, workshopAPI+"/run-all", nil, PresenterHeader, token); r.Status != http.StatusOK || !strings.Contains(string(r.Body), fmt.Sprintf(`"queued":%d`, len(students))) {
		t.Fatalf("re-running everyone: %d %s", r.Status, r.Body)
	}
	for lang, tok := range students {
		row := waitStudent(t, env, tok)
		if row.State != "done" || row.Failed != 0 || row.FirstSafety != "" || row.Faults != drop.Faults {
			t.Fatalf("the %s reference server under dropped answers: %+v, want a pass that names the faults", lang, row)
		}
	}
}

// TestWorkshopFaultOnlySettingsKeepItOpen: a PUT that says only the
// faults changes the faults, and the workshop stays open.
func TestWorkshopFaultOnlySettingsKeepItOpen(t *testing.T) {
	t.Parallel()
	const token = "teach-keep-open-3"
	env := newWorkshopEnvWith(t, token)
	board := func() WorkshopBoard {
		t.Helper()
		r := env.send(http.MethodGet, workshopAPI, nil, PresenterHeader, token)
		var b WorkshopBoard
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &b) != nil {
			t.Fatalf("reading the settings: %d %s", r.Status, r.Body)
		}
		return b
	}
	faults := map[string]any{"faults": map[string]any{"latency_ms": 50}}
	if r := env.send(http.MethodPut, workshopAPI, faults, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("setting only the faults: %d %s", r.Status, r.Body)
	}
	if b := board(); !b.On || b.Faults.LatencyMS != 50 {
		t.Fatalf("after a faults-only PUT: on=%v latency=%d, want open with 50 ms", b.On, b.Faults.LatencyMS)
	}
	if r := env.send(http.MethodPut, workshopAPI, map[string]any{"on": false}, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("closing: %d %s", r.Status, r.Body)
	}
	if b := board(); b.On {
		t.Fatalf("after on=false the workshop is still open")
	}
}

// TestWorkshopRowsShowStudentTextPlain: what a student's endpoint said,
// and its address, reach the board cut and with no control or bidi
// character left to reorder the row.
func TestWorkshopRowsShowStudentTextPlain(t *testing.T) {
	t.Parallel()
	row := workshop.Row{Name: "Ada", Endpoint: "http://127.0.0.2:8000/" + strings.Repeat("v1/", 40) + "payments"}
	row.Run.FirstSafety = "case 1, replay: answered \u202egnirts\u202c\x1b[31m red"
	row.Run.FirstFailure = "line\u2066one\u2069"
	row.Run.Message = "The checker could not test your endpoint: \u200fx"
	for _, shown := range []struct{ endpoint, safety, failure, message string }{
		func() struct{ endpoint, safety, failure, message string } {
			v := studentJSON(row)
			return struct{ endpoint, safety, failure, message string }{v.Endpoint, v.FirstSafety, v.FirstFailure, v.Message}
		}(),
		func() struct{ endpoint, safety, failure, message string } {
			v := rowView(row)
			return struct{ endpoint, safety, failure, message string }{v.Endpoint, v.FirstSafety, v.FirstFail, v.Message}
		}(),
	} {
		for _, s := range []string{shown.endpoint, shown.safety, shown.failure, shown.message} {
			if strings.ContainsAny(s, "\u202e\u202c\u2066\u2069\u200f\x1b") {
				t.Errorf("%q keeps a control or bidi character", s)
			}
		}
		if n := len([]rune(shown.endpoint)); n > shownEndpoint || !strings.HasSuffix(shown.endpoint, "…") {
			t.Errorf("the endpoint is shown as %q (%d characters), want it cut to %d", shown.endpoint, n, shownEndpoint)
		}
		if !strings.Contains(shown.safety, "gnirts") {
			t.Errorf("the reason lost its text: %q", shown.safety)
		}
	}
}

// TestWorkshopGuessedGatewaysAreCounted: a known student's gateway is
// left to the servers charging through it, but requests to secrets that
// are nobody's are counted like any request, so guessing is bounded.
func TestWorkshopGuessedGatewaysAreCounted(t *testing.T) {
	t.Parallel()
	l := DefaultLimits.withDefaults()
	limits := newRequestLimits(l, time.Now, func(*http.Request) string { return "192.168.1.1" }, func(*http.Request) bool { return false })
	limits.knownGateway = func(secret string) bool { return secret == "known" }
	for _, c := range []struct {
		path    string
		counted bool
	}{
		{workshopGateways + "known/charges", false},
		{workshopGateways + "guessed/charges", true},
		{workshopGateways + "/charges", true},
	} {
		share, _ := limits.bucketFor(httptest.NewRequest(http.MethodPost, c.path, nil))
		if (share != nil) != c.counted {
			t.Errorf("%s: counted %v, want %v", c.path, share != nil, c.counted)
		}
	}
}

// TestWorkshopPresenterHidesARow: one click of the presenter's takes a
// student's row off the scoreboard, and "show again" puts it back; a
// student can do neither, and the class's scoreboard never names a
// hidden row.
func TestWorkshopPresenterHidesARow(t *testing.T) {
	t.Parallel()
	const token = "teach-hide-5"
	env := newWorkshopEnvWith(t, token)
	registerStudent(t, env, "tok-ada-"+hex.EncodeToString(randomBytes(6)), "Ada", "http://127.0.0.2:8000")
	registerStudent(t, env, "tok-rude-"+hex.EncodeToString(randomBytes(6)), "Rude", "http://127.0.0.3:8000")
	hide := func(name string, headers ...string) int {
		t.Helper()
		return presenterForm(t, env, "/workshop/-/hide", name, headers...)
	}
	show := func(name string, headers ...string) int {
		t.Helper()
		return presenterForm(t, env, "/workshop/-/show", name, headers...)
	}
	names := func() string {
		t.Helper()
		var b WorkshopBoard
		r := env.send(http.MethodGet, workshopAPI, nil)
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range b.Students {
			out = append(out, s.Name)
		}
		return strings.Join(out, " ")
	}
	if code := hide("Rude", "Authorization", "Bearer student"); code != http.StatusForbidden {
		t.Fatalf("a student hiding a row: %d, want 403", code)
	}
	if code := hide("Rude", PresenterHeader, token); code != http.StatusSeeOther {
		t.Fatalf("the presenter hiding a row: %d, want a redirect to the board", code)
	}
	if got := names(); got != "Ada" {
		t.Fatalf("the scoreboard shows %q, want only Ada", got)
	}
	if code := hide("Nobody", PresenterHeader, token); code != http.StatusNotFound {
		t.Fatalf("hiding a name nobody has: %d, want 404", code)
	}
	page := env.get("/workshop/-/scores", PresenterHeader, token)
	if !strings.Contains(string(page.Body), `action="/workshop/-/hide"`) {
		t.Fatalf("the presenter's scoreboard has no hide button: %s", page.Body)
	}
	if !regexp.MustCompile(`action="/workshop/-/show"><input type="hidden" name="name" value="Rude">`).Match(page.Body) {
		t.Fatalf("the presenter's scoreboard has no \"show again\" for the hidden row: %s", page.Body)
	}
	if public := env.get("/workshop/-/scores"); strings.Contains(string(public.Body), "Rude") || strings.Contains(string(public.Body), "/workshop/-/show") {
		t.Fatalf("the class's scoreboard names the hidden row or offers to show it: %s", public.Body)
	}
	if code := show("Rude", "Authorization", "Bearer student"); code != http.StatusForbidden {
		t.Fatalf("a student showing a hidden row: %d, want 403", code)
	}
	if got := names(); got != "Ada" {
		t.Fatalf("after a student's try the scoreboard shows %q, want only Ada", got)
	}
	if code := show("Rude", PresenterHeader, token); code != http.StatusSeeOther {
		t.Fatalf("the presenter showing a row again: %d, want a redirect to the board", code)
	}
	if got := names(); got != "Ada Rude" {
		t.Fatalf("after \"show again\" the scoreboard shows %q, want Ada Rude in the order they registered", got)
	}
	if code := show("Ada", PresenterHeader, token); code != http.StatusNotFound {
		t.Fatalf("showing a row that is not hidden: %d, want 404", code)
	}
	if page := env.get("/workshop/-/scores", PresenterHeader, token); strings.Contains(string(page.Body), "/workshop/-/show") {
		t.Fatalf("no row is hidden, yet the scoreboard offers to show one: %s", page.Body)
	}
}

// presenterForm posts name to one of the presenter's workshop forms and
// returns the status, redirects not followed.
func presenterForm(t *testing.T, env *testEnv, path, name string, headers ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, env.URL+path, strings.NewReader("name="+name))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestBoardWorkshopPartFollowsTheWorkshop: the board's request for the
// open workshop's scoreboard (GET /board/-/workshop?part=scores) gets the
// scoreboard alone while it stays open and the closed workshop's empty
// place once it closed, so the board's script takes the band down; any
// other part is refused with a 400.
func TestBoardWorkshopPartFollowsTheWorkshop(t *testing.T) {
	t.Parallel()
	env := newWorkshopEnv(t)
	open := env.get("/board/-/workshop?part=scores")
	if open.Status != http.StatusOK || !strings.HasPrefix(strings.TrimSpace(string(open.Body)), `<div id="workshop-scores"`) {
		t.Fatalf("open workshop's scoreboard: %d %.200s", open.Status, open.Body)
	}
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopClosed}); r.Status != http.StatusOK {
		t.Fatalf("closing the workshop: %d %s", r.Status, r.Body)
	}
	closed := env.get("/board/-/workshop?part=scores")
	if body := string(closed.Body); closed.Status != http.StatusOK || !strings.Contains(body, `<template id="board-workshop">`) || strings.Contains(body, "workshop-scores") {
		t.Fatalf("closed workshop: %d %.200s", closed.Status, closed.Body)
	}
	if r := env.get("/board/-/workshop?part=rows"); r.Status != http.StatusBadRequest {
		t.Fatalf("part=rows: %d %.200s, want 400", r.Status, r.Body)
	}
}

// TestWorkshopPhonePartsFollowTheClose: the two parts a student's page
// fetches every two seconds follow the workshop: while it is open, the
// student's own result and an empty, hidden state line; once it closed,
// the closed place instead of the result and a line that says the
// workshop is closed, as a run asked then is refused with; a student who
// never registered still gets a 404.
func TestWorkshopPhonePartsFollowTheClose(t *testing.T) {
	t.Parallel()
	env := newWorkshopEnv(t)
	const tok = "ida-phone-parts"
	registerStudent(t, env, tok, "Ida", "http://"+freeAddr(t, "127.0.0.2"))
	part := func(path string) (int, string) {
		t.Helper()
		r := env.send(http.MethodGet, path, nil, "Authorization", "Bearer "+tok)
		return r.Status, string(r.Body)
	}
	if code, body := part("/workshop/-/mine"); code != http.StatusOK || !strings.Contains(body, "workshop-facts") || strings.Contains(body, `data-state="closed"`) {
		t.Fatalf("open workshop, the student's result: %d %.300s", code, body)
	}
	if code, body := part("/workshop/-/state"); code != http.StatusOK || !strings.Contains(body, `data-on="true"`) || strings.Contains(body, "closed") {
		t.Fatalf("open workshop, the state line: %d %.300s", code, body)
	}
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopClosed}); r.Status != http.StatusOK {
		t.Fatalf("closing the workshop: %d %s", r.Status, r.Body)
	}
	if code, body := part("/workshop/-/mine"); code != http.StatusOK || strings.Contains(body, "workshop-facts") || !strings.Contains(body, `data-state="closed"`) || !strings.Contains(body, "The presenter closed the workshop") {
		t.Fatalf("closed workshop, the student's result: %d %.300s", code, body)
	}
	if code, body := part("/workshop/-/state"); code != http.StatusOK || !strings.Contains(body, `data-on="false"`) || !strings.Contains(body, "The workshop is closed") {
		t.Fatalf("closed workshop, the state line: %d %.300s", code, body)
	}
	if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+tok); r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "The workshop is closed") {
		t.Fatalf("a run asked while the workshop is closed: %d %.300s, want 403 saying it is closed", r.Status, r.Body)
	}
	if r := env.get("/workshop/-/mine"); r.Status != http.StatusNotFound {
		t.Fatalf("a student who never registered: %d %.200s, want 404", r.Status, r.Body)
	}
}
