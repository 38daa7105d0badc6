package workshop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/pay/check"
	"paytwice/sim"
)

// TestRunFinishSaysWhatHappened: a run cut by the server stopping says
// so rather than blaming the time limit, and a history with no legal
// order is counted as a case, so a row never shows more failed than
// cases.
func TestRunFinishSaysWhatHappened(t *testing.T) {
	cut := context.Canceled
	t.Run("the server stopped", func(t *testing.T) {
		for _, err := range []error{cut, fmt.Errorf("%w: it was reached, but gave no answer to a first good payment", check.ErrNotAccepted)} {
			r := Run{State: Running, Done: 3, Passed: 3}
			r.finish(nil, err, true, true, 3*time.Minute)
			if r.State != Interrupted || r.Passed != 3 || r.Failed != 0 || !strings.Contains(r.Message, "server stopped") || strings.Contains(r.Message, "longer") {
				t.Fatalf("%v: %+v, want a run interrupted because the server stopped, its cases so far kept", err, r)
			}
		}
	})
	t.Run("the run overran", func(t *testing.T) {
		r := Run{State: Running}
		r.finish(nil, context.DeadlineExceeded, false, true, 3*time.Minute)
		if r.State != NotRun || !strings.Contains(r.Message, "longer than the 3m0s") {
			t.Fatalf("%+v, want the time limit named", r)
		}
	})
	t.Run("unreachable, even as the server stops", func(t *testing.T) {
		r := Run{State: Running}
		r.finish(nil, errors.Join(check.ErrUnreachable, errors.New("dial refused")), true, false, time.Minute)
		if r.State != NotRun || !strings.Contains(r.Message, "could not test") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("a linearizability violation is a failed case", func(t *testing.T) {
		r := Run{State: Running, Done: 2, Passed: 2}
		rep := &check.Report{}
		rep.Linearizability.Result = "violation"
		rep.Linearizability.Groups = []string{"pay-1"}
		r.finish(rep, nil, false, false, time.Minute)
		if r.State != Done || r.Done != 3 || r.Failed != 1 || r.Passed != 2 || r.Failed > r.Done || r.FirstSafety == "" {
			t.Fatalf("%+v, want 3 cases, 2 passed, 1 failed with its reason", r)
		}
	})
}

// TestGatewayAtOnce: a student's gateway answers at most MaxGatewayAtOnce
// requests from outside at once, and takes more as answers go.
func TestGatewayAtOnce(t *testing.T) {
	w := New(Config{Guard: NewGuard(Nets()), Now: time.Now})
	st := &student{secret: "s3cr3t", gw: sim.NewGatewayHandler(time.Now)}
	w.bySecret[st.secret] = st
	if _, _, err := w.EnterGateway("guessed"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Fatalf("an unknown secret: %v, want not found", err)
	}
	var leaves []func()
	for range MaxGatewayAtOnce {
		_, leave, err := w.EnterGateway(st.secret)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	if _, _, err := w.EnterGateway(st.secret); pay.ErrorCode(err) != pay.EBUSY {
		t.Fatalf("one past the bound: %v, want busy", err)
	}
	leaves[0]()
	if _, _, err := w.EnterGateway(st.secret); err != nil {
		t.Fatalf("after one answer: %v", err)
	}
	if !w.Known(st.secret) || w.Known("guessed") {
		t.Fatal("Known is wrong")
	}
}

// TestQueueFairness: the presenter's runs go ahead of the class's, one
// address holds at most PerAddress places in the queue, and registers at
// most PerAddress students, a student who registers again counting once.
func TestQueueFairness(t *testing.T) {
	ctx := context.Background()
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Queue: 10, PerAddress: 3})
	w.SetOn(true)
	register := func(who, addr string) error {
		_, err := w.Register(ctx, who, addr, "n"+who, "http://127.0.0.2:8000")
		return err
	}
	for _, who := range []string{"a", "b", "c"} {
		if err := register(who, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := register("a", "10.0.0.1"); err != nil {
		t.Fatalf("a student registering again: %v", err)
	}
	if err := register("d", "10.0.0.1"); pay.ErrorCode(err) != pay.EBUSY {
		t.Fatalf("a fourth student from one address: %v, want busy", err)
	}
	for _, who := range []string{"p", "q"} {
		if err := register(who, "10.0.0.9"); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"a", "b", "c"} {
		if _, err := w.Ask(who, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Ask("a", false); pay.ErrorCode(err) != pay.ECONFLICT {
		t.Fatalf("a second run for one student: %v, want conflict", err)
	}
	if _, err := w.Ask("p", true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Ask("q", true); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, st := range w.queue {
		order = append(order, st.who)
	}
	if strings.Join(order, " ") != "p q a b c" {
		t.Fatalf("queue %v, want the presenter's runs first, in the order asked", order)
	}
	w2 := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Queue: 10, PerAddress: 2, MaxStudents: 10})
	w2.SetOn(true)
	for _, who := range []string{"x", "y"} {
		if _, err := w2.Register(ctx, who, "10.0.0.1", "n"+who, "http://127.0.0.2:8000"); err != nil {
			t.Fatal(err)
		}
		if _, err := w2.Ask(who, false); err != nil {
			t.Fatal(err)
		}
	}
	// A third student from that address, registered while it had room
	// (from another address), waits for a place.
	if _, err := w2.Register(ctx, "z", "10.0.0.2", "nz", "http://127.0.0.2:8000"); err != nil {
		t.Fatal(err)
	}
	w2.students["z"].addr = "10.0.0.1"
	if _, err := w2.Ask("z", false); pay.ErrorCode(err) != pay.EBUSY {
		t.Fatalf("a third queued run from one address: %v, want busy", err)
	}
	if _, err := w2.Ask("z", true); err != nil {
		t.Fatalf("the presenter's run is not bounded by the address: %v", err)
	}
	if DefaultPerAddress < 30 {
		t.Fatalf("DefaultPerAddress %d is smaller than a class", DefaultPerAddress)
	}
}

// memoryKeeper is a Keeper in memory: the document as a store holds it.
type memoryKeeper struct {
	mu    sync.Mutex
	doc   []byte
	saves int // writes so far
}

func (k *memoryKeeper) LoadWorkshop(context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]byte(nil), k.doc...), nil
}

func (k *memoryKeeper) UpdateWorkshop(_ context.Context, change func([]byte) ([]byte, error)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, err := change(k.doc)
	if err != nil {
		return err
	}
	k.doc = append([]byte(nil), b...)
	k.saves++
	return nil
}

// TestRestoreAfterACrash: a server that died without stopping left its
// running and queued runs as they were in the store; the next one shows
// them as interrupted (never passed, never failed, their cases so far
// kept) and saves that, while finished rows and hidden ones are as kept.
func TestRestoreAfterACrash(t *testing.T) {
	ctx := context.Background()
	guard := NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32")))
	keeper := &memoryKeeper{}
	before := New(Config{Guard: guard, Keeper: keeper})
	before.SetOn(true)
	for _, who := range []string{"run", "wait", "done", "hid"} {
		if _, err := before.Register(ctx, who, "10.0.0.1", "n"+who, "http://127.0.0.2:8000"); err != nil {
			t.Fatal(err)
		}
	}
	before.students["run"].run = Run{State: Running, Done: 2, Passed: 2}
	before.students["wait"].run = Run{State: Queued}
	before.students["done"].run = Run{State: Done, Done: 4, Passed: 3, Failed: 1, FirstSafety: "case 4, storm of one key: 3 charges for one action"}
	before.Hide("nhid")
	before.mu.Lock()
	before.changedLocked()
	before.mu.Unlock()
	before.save(ctx) // the last save before the crash: no Stop, no final save

	after := New(Config{Guard: guard, Keeper: keeper})
	if err := after.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	sb := after.Scoreboard()
	for _, r := range sb.Rows {
		rows[r.Name] = r
	}
	if !sb.On || len(sb.Rows) != 3 || strings.Join(sb.Hidden, " ") != "nhid" {
		t.Fatalf("restored scoreboard: %+v, want it open with three rows and nhid hidden", sb)
	}
	if r := rows["nrun"].Run; r.State != Interrupted || r.Passed != 2 || r.Failed != 0 || !strings.Contains(r.Message, "stopped during the run") {
		t.Errorf("the running run: %+v, want interrupted with its 2 passed cases", r)
	}
	if r := rows["nwait"].Run; r.State != Interrupted || r.Done != 0 || !strings.Contains(r.Message, "before this run started") {
		t.Errorf("the queued run: %+v, want interrupted, never started", r)
	}
	if r := rows["ndone"].Run; r.State != Done || r.FirstSafety == "" || r.Failed != 1 {
		t.Errorf("the finished run: %+v, want it as kept", r)
	}
	after.save(ctx)
	again := New(Config{Guard: guard, Keeper: keeper})
	if err := again.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range again.Scoreboard().Rows {
		if r.Run.State == Running || r.Run.State == Queued {
			t.Errorf("the saved restore still says %s for %s", r.Run.State, r.Name)
		}
	}
	if _, err := after.Ask("run", false); err != nil {
		t.Errorf("an interrupted run holds no place: asking again: %v", err)
	}
}

// TestQueueHoldsAClassBehindOneAddress: the bounds agree. With the
// defaults, a whole class behind one router (DefaultPerAddress students
// on one address) queues every run, the presenter's "run everyone again"
// too, and a place is left for another address.
func TestQueueHoldsAClassBehindOneAddress(t *testing.T) {
	ctx := context.Background()
	if DefaultPerAddress >= DefaultQueue {
		t.Fatalf("DefaultPerAddress %d is not below DefaultQueue %d: one address could fill the queue", DefaultPerAddress, DefaultQueue)
	}
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32")))})
	w.SetOn(true)
	for i := range DefaultPerAddress {
		who := fmt.Sprintf("s%02d", i)
		if _, err := w.Register(ctx, who, "10.0.0.1", "n"+who, "http://127.0.0.2:8000"); err != nil {
			t.Fatalf("student %d of a class behind one address: %v", i+1, err)
		}
	}
	if queued, left := w.AskAll(); queued != DefaultPerAddress || left != 0 {
		t.Fatalf("run everyone again for a class of %d: %d queued, %d without room", DefaultPerAddress, queued, left)
	}
	if _, err := w.Register(ctx, "other", "10.0.0.2", "other", "http://127.0.0.2:8000"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Ask("other", false); err != nil {
		t.Fatalf("another address behind a full class: %v, want a place", err)
	}

}

// TestRunFinishQuotesNoAnswerOfANonPaymentTarget: an address that is no
// payment endpoint gets its failure named, with nothing it answered.
func TestRunFinishQuotesNoAnswerOfANonPaymentTarget(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: POST http://10.0.0.5/admin answered a first good payment (body {}) with 200 OK: secret-token=abc123; see -body and -H", check.ErrNotAccepted),
		fmt.Errorf("%w: POST http://10.0.0.5/admin was reached, but gave no answer to a first good payment: secret-token=abc123", check.ErrNotAccepted),
	} {
		r := Run{State: Running}
		r.finish(nil, err, false, false, time.Minute)
		if r.State != NotRun || strings.Contains(r.Message, "secret-token") || !strings.Contains(r.Message, "first good payment") {
			t.Fatalf("%q, want the kind of failure and nothing the target answered", r.Message)
		}
	}
}

// TestGatewayLoopSavesLittle: a loop on a student's gateway costs the
// store nothing while it only reads, and at most one save per SaveEvery
// (plus the last, at shutdown) while it charges; the last save holds
// every charge.
func TestGatewayLoopSavesLittle(t *testing.T) {
	ctx := context.Background()
	keeper := &memoryKeeper{}
	const every = 20 * time.Millisecond
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Keeper: keeper, SaveEvery: every})
	w.SetOn(true)
	mine, err := w.Register(ctx, "cat", "10.0.0.1", "Cat", "http://127.0.0.2:8000")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(mine.GatewayPath, GatewayPrefix)
	w.save(ctx)
	serve := func(req *http.Request) int {
		h, leave, err := w.EnterGateway(secret)
		if err != nil {
			t.Fatal(err)
		}
		defer leave()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range 2000 {
		if code := serve(httptest.NewRequest(http.MethodGet, "/charges?order_id=o-"+strconv.Itoa(i), nil)); code != http.StatusNotFound && code != http.StatusOK {
			t.Fatalf("GET /charges: %d", code)
		}
	}
	w.mu.Lock()
	unsaved := w.changes != w.saved
	w.mu.Unlock()
	if unsaved || keeper.saves != 1 {
		t.Fatalf("after 2000 reads on the gateway: %d saves, a change pending: %v; want the registration's one save and nothing pending", keeper.saves, unsaved)
	}

	run, stop := context.WithCancel(ctx)
	w.Start(run)
	const charges = 2000
	began := time.Now()
	for i := range charges {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"order_id": "o-`+strconv.Itoa(i)+`", "amount": 100}`))
		req.Header.Set("Idempotency-Key", "k-"+strconv.Itoa(i))
		if code := serve(req); code != http.StatusCreated {
			t.Fatalf("charge %d: %d", i, code)
		}
	}
	elapsed := time.Since(began)
	stop()
	<-w.Stopped()
	keeper.mu.Lock()
	saves, doc := keeper.saves-1, keeper.doc
	keeper.mu.Unlock()
	if most := int(elapsed/every) + 2; saves > most || saves < 1 {
		t.Errorf("%d charges in %v gave %d saves, want 1 to %d (one per %v, and the last)", charges, elapsed, saves, most, every)
	}
	var k kept
	if err := json.Unmarshal(doc, &k); err != nil || len(k.Students) != 1 || k.Students[0].Charges != charges {
		t.Errorf("the last save: %s, want Cat with %d charges", doc, charges)
	}
	t.Logf("%d charges in %v: %d saves", charges, elapsed, saves)
}

// TestRunLimitEndsARun: a run gets Config.RunLimit in all, however long
// each request may take. An endpoint that takes the first payment and
// then never answers holds the run until the limit, and no longer: the
// row is not run and says the limit, not a request's time-out (ten
// minutes here). The limit's clock is the test's (Config.After): it
// passes once the run is held at its second request, so the test waits
// on no real limit.
func TestRunLimitEndsARun(t *testing.T) {
	var asked atomic.Int64
	hold := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listening on 127.0.0.2 (a loopback address of its own): %v", err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"charge_id": "ch_1", "status": "paid"}`)
			return
		}
		select { // held until the checker gives the request up
		case <-r.Context().Done():
		case <-hold:
		}
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { close(hold); hs.Close() })

	const limit = 3 * time.Minute
	var limits atomic.Int64
	limitPassed := make(chan time.Time)
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Workers: 1,
		RunLimit: limit, RequestTimeout: 10 * time.Minute, // the limit, not a request's time-out, ends it
		After: func(d time.Duration) <-chan time.Time {
			if d != limit {
				t.Errorf("a run's limit is kept as %v, want Config.RunLimit (%v)", d, limit)
			}
			limits.Add(1)
			return limitPassed
		}})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); <-w.Stopped() })
	w.Start(ctx)
	w.SetOn(true)
	if _, err := w.Register(ctx, "a", "10.0.0.1", "Ann", "http://"+ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Ask("a", false); err != nil {
		t.Fatal(err)
	}
	state := func() Run {
		mine, ok := w.Mine("a")
		if !ok {
			t.Fatal("Ann is no longer registered")
		}
		return mine.Run
	}
	deadline := time.Now().Add(2 * time.Minute)
	for asked.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint was asked %d time(s) in two minutes, want the run held at its second request (run %+v)", asked.Load(), state())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := state(); r.State != Running {
		t.Fatalf("the run is %s while its request is held and its limit has not passed: %+v", r.State, r)
	}
	if n := limits.Load(); n != 1 {
		t.Fatalf("the run's limit was started %d times, want once", n)
	}
	close(limitPassed)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		r := state()
		if r.State != Queued && r.State != Running {
			if r.State != NotRun || !strings.Contains(r.Message, "longer than the "+limit.String()) {
				t.Fatalf("the run held past its limit: %+v, want not run, saying the %s limit", r, limit)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is still %s two minutes after its limit passed", r.State)
		}
	}
}

// TestRunSafetyNoticeIsSettledByItsVerdict: a safety failure the checker
// tells before its case ends turns the row red at once, without counting
// a case; the case's verdict then has the last word: its fuller reason
// replaces the notice's, and a case left undecided takes the red away. A
// failure shown before the notice is never replaced.
func TestRunSafetyNoticeIsSettledByItsVerdict(t *testing.T) {
	storm := check.Result{Case: 4, Name: "storm of one key", Verdict: check.Fail, Safety: true,
		Detail: "20 requests released within 40µs: 2 different successful bodies for one key before the storm's last answer came: at least 2 payments"}
	t.Run("the verdict's reason replaces the notice's", func(t *testing.T) {
		r := Run{State: Running, Done: 3, Passed: 3}
		r.noticeSafety(storm)
		if r.Done != 3 || !strings.HasPrefix(r.FirstSafety, "case 4, storm of one key: 20 requests") || r.FirstFailure != r.FirstSafety {
			t.Fatalf("after the notice: %+v, want the row red and no case counted", r)
		}
		final := storm
		final.Detail = "20 requests released within 40µs: 20×201; 20 different successful bodies for one key: 20 payments"
		r.note(final)
		want := "case 4, storm of one key: " + final.Detail
		if r.Done != 4 || r.Failed != 1 || r.FirstSafety != want || r.FirstFailure != want {
			t.Fatalf("after the verdict: %+v, want the case counted once and its own reason", r)
		}
		r.note(check.Result{Case: 5, Name: "while the first is running", Verdict: check.Fail, Safety: true, Detail: "both charged"})
		if r.FirstSafety != want {
			t.Fatalf("a later failure replaced the first: %q", r.FirstSafety)
		}
	})
	t.Run("an undecided verdict takes the notice back", func(t *testing.T) {
		r := Run{State: Running, Done: 3, Passed: 3}
		r.noticeSafety(storm)
		r.note(check.Result{Case: 4, Name: "storm of one key", Verdict: check.Skip, Detail: "not decided: an answer went past a bound"})
		if r.FirstSafety != "" || r.FirstFailure != "" || r.Done != 4 || r.Failed != 0 {
			t.Fatalf("%+v, want no failure shown", r)
		}
	})
	t.Run("an earlier failure stays first", func(t *testing.T) {
		r := Run{State: Running}
		r.note(check.Result{Case: 1, Name: "replay", Verdict: check.Fail, Safety: true, Detail: "2 effects for one action"})
		r.noticeSafety(storm)
		r.note(storm)
		if !strings.HasPrefix(r.FirstSafety, "case 1, replay") || !strings.HasPrefix(r.FirstFailure, "case 1, replay") || r.Done != 2 {
			t.Fatalf("%+v, want case 1's failure first", r)
		}
	})
}
