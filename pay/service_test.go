package pay_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
)

// ledger is an in-memory gateway, idempotent by key like the real one.
// When hold is set, a charge waits on it, after telling called.
type ledger struct {
	mu      sync.Mutex
	charges map[string]pay.GatewayCharge
	now     func() time.Time
	hold    chan struct{}
	called  chan struct{}
	timeout bool
}

func (l *ledger) Charge(ctx context.Context, key, orderID string, amount int64) (pay.GatewayCharge, error) {
	if l.hold != nil {
		l.called <- struct{}{}
		<-l.hold
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.charges[key]
	if !ok {
		g = pay.GatewayCharge{Key: key, ID: pay.NewID("gw_"), OrderID: orderID, AmountSatang: amount, CreatedAt: l.now()}
		l.charges[key] = g
	}
	if l.timeout {
		return pay.GatewayCharge{}, pay.ErrGatewayTimeout
	}
	return g, nil
}

func (l *ledger) Lookup(ctx context.Context, key string) (pay.GatewayCharge, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.charges[key]
	return g, ok, nil
}

type world struct {
	svc   *pay.Service
	db    *store.DB
	gw    *ledger
	clock *sim.ManualClock
}

func (w *world) now() time.Time { return w.clock.Now() }

func (w *world) advance(d time.Duration) { w.clock.Advance(d) }

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{clock: sim.NewManualClock(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))}
	db, err := store.Open(filepath.Join(t.TempDir(), "pay.db"), store.Options{Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w.db = db
	w.gw = &ledger{charges: map[string]pay.GatewayCharge{}, now: w.now}
	w.svc = &pay.Service{Store: db, Gateway: w.gw, Now: w.now}
	return w
}

func payment(key, order string, amount int64) *pay.Payment {
	return &pay.Payment{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments",
		Request: pay.PaymentRequest{OrderID: order, AmountSatang: amount},
		Render:  func(err error) (int, []byte) { return 500, []byte(pay.ErrorMessage(err)) }}
}

func TestPayOutcomes(t *testing.T) {
	ctx := context.Background()

	t.Run("a payment is saved with its charge, and the same key again is replayed", func(t *testing.T) {
		w := newWorld(t)
		first := w.svc.Pay(ctx, payment("k", "A-1", 100))
		if first.Kind != pay.Saved || first.Status != 201 || first.Charge == nil {
			t.Fatalf("first: %+v", first)
		}
		again := w.svc.Pay(ctx, payment("k", "A-1", 100))
		if again.Kind != pay.Replayed || string(again.Body) != string(first.Body) {
			t.Fatalf("again: %+v", again)
		}
		// The key's row (or its charge) is read to say what differs: the
		// cache keeps only the answer.
		other := w.svc.Pay(ctx, payment("k", "A-1", 200))
		if (other.Kind != pay.Mismatch && other.Kind != pay.Reused) || pay.ErrorCode(other.Err) != pay.EMISMATCH {
			t.Fatalf("another body: %+v", other)
		}
		if d := pay.ErrorDiffers(other.Err); len(d) != 1 || d[0] != "amount_satang" {
			t.Fatalf("another body differs in %q, want the amount only", d)
		}
	})

	t.Run("a gateway time-out leaves the key started, and the sweeper settles it with the gateway's charge", func(t *testing.T) {
		w := newWorld(t)
		w.gw.timeout = true
		if o := w.svc.Pay(ctx, payment("k", "A-1", 100)); o.Kind != pay.Unknown {
			t.Fatalf("timed out: %+v", o)
		}
		if o := w.svc.Pay(ctx, payment("k", "A-1", 100)); o.Kind != pay.InProgress {
			t.Fatalf("retry while started: %+v", o)
		}
		w.advance(time.Minute)
		out, err := w.svc.Sweep(ctx, 30*time.Second)
		if err != nil || len(out) != 1 || !out[0].Charged {
			t.Fatalf("sweep: %+v %v", out, err)
		}
		if o := w.svc.Pay(ctx, payment("k", "A-1", 100)); o.Kind != pay.Replayed || o.Status != 201 {
			t.Fatalf("retry after the sweep: %+v", o)
		}
	})

	t.Run("the sweeper never closes a claim whose payment is still running, however old", func(t *testing.T) {
		w := newWorld(t)
		w.gw.hold, w.gw.called = make(chan struct{}), make(chan struct{}, 1)
		done := make(chan pay.Outcome, 1)
		go func() { done <- w.svc.Pay(ctx, payment("k", "A-1", 100)) }()
		<-w.gw.called
		w.advance(time.Hour)
		if out, err := w.svc.Sweep(ctx, 30*time.Second); err != nil || len(out) != 0 {
			t.Fatalf("swept a running payment: %+v %v", out, err)
		}
		close(w.gw.hold)
		if o := <-done; o.Kind != pay.Saved || o.Status != 201 {
			t.Fatalf("the payment: %+v", o)
		}
	})

	t.Run("a delay cut short releases the claim before anything happened", func(t *testing.T) {
		w := newWorld(t)
		w.svc.Sleep = func(context.Context, time.Duration) error { return context.Canceled }
		p := payment("k", "A-1", 100)
		p.Faults.DelayMS = 1000
		if o := w.svc.Pay(ctx, p); o.Kind != pay.Released || !errors.Is(o.Err, pay.ErrInterrupted) {
			t.Fatalf("interrupted: %+v", o)
		}
		if _, err := w.db.GetKey(ctx, "s", "k"); pay.ErrorCode(err) != pay.ENOTFOUND {
			t.Fatalf("the claim stayed: %v", err)
		}
	})

	t.Run("a transaction failing halfway after the charge leaves the key to the sweeper", func(t *testing.T) {
		w := newWorld(t)
		p := payment("k", "A-1", 100)
		p.Faults.FailHalfway = true
		if o := w.svc.Pay(ctx, p); o.Kind != pay.RolledBack {
			t.Fatalf("halfway: %+v", o)
		}
		if n, _ := w.db.CountCharges(ctx); n != 0 {
			t.Fatalf("%d charges after the rollback", n)
		}
		w.advance(time.Minute)
		if out, err := w.svc.Sweep(ctx, 30*time.Second); err != nil || len(out) != 1 || !out[0].Charged {
			t.Fatalf("sweep: %+v %v", out, err)
		}
	})

	t.Run("a pruned key reused for another order is refused, never answered with the other charge", func(t *testing.T) {
		w := newWorld(t)
		w.svc.Pay(ctx, payment("k", "A-1", 100))
		w.advance(48 * time.Hour)
		if _, err := w.db.Prune(ctx, w.now().Add(-24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if o := w.svc.Pay(ctx, payment("k", "B-2", 100)); o.Kind != pay.Reused || pay.ErrorCode(o.Err) != pay.EMISMATCH {
			t.Fatalf("reuse: %+v", o)
		}
		// It answers the charge made before: a replay, not new work.
		if o := w.svc.Pay(ctx, payment("k", "A-1", 100)); o.Kind != pay.Replayed || o.Status != 201 {
			t.Fatalf("late retry of the same order: %+v", o)
		}
		if n, _ := w.db.CountCharges(ctx); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
}

// A caller that hangs up during its claim must not leave the key started
// with nobody at work on it: the claim, and the work after it, run to
// their end.
func TestAClaimOutlivesItsCaller(t *testing.T) {
	w := newWorld(t)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if o := w.svc.Pay(gone, payment("k", "A-1", 100)); o.Kind != pay.Saved || o.Status != 201 {
		t.Fatalf("a payment whose caller left: %+v", o)
	}
	if o := w.svc.Pay(context.Background(), payment("k", "A-1", 100)); o.Kind != pay.Replayed {
		t.Fatalf("its retry: %+v, want the saved answer replayed", o)
	}
}

// repeatOnClaim is the store with a second request for the same payment
// arriving at the one moment a claim has committed and its Claim has not
// yet returned: a double click racing the first request's bookkeeping.
type repeatOnClaim struct {
	pay.Storage
	svc    *pay.Service
	p      func() *pay.Payment
	once   sync.Once
	repeat pay.Outcome
}

func (r *repeatOnClaim) Claim(ctx context.Context, c pay.ClaimRequest) (pay.ClaimResult, error) {
	res, err := r.Storage.Claim(ctx, c)
	if err == nil && res.Claimed {
		r.once.Do(func() {
			answered := make(chan pay.Outcome)
			go func() { answered <- r.svc.Pay(context.Background(), r.p()) }()
			r.repeat = <-answered // this claim returns only once the repeat is answered
		})
	}
	return res, err
}

// A repeat answered 409 while the first request is at work must say that
// it is running: the API tells a client of a key whose request is no
// longer running to wait for the sweeper, and that it may be charged.
func TestARepeatDuringTheClaimIsToldTheFirstIsRunning(t *testing.T) {
	w := newWorld(t)
	r := &repeatOnClaim{Storage: w.db, svc: w.svc, p: func() *pay.Payment { return payment("k", "A-1", 100) }}
	w.svc.Store = r
	first := w.svc.Pay(context.Background(), payment("k", "A-1", 100))
	if first.Kind != pay.Saved {
		t.Fatalf("first: %+v", first)
	}
	if repeat := r.repeat; repeat.Kind != pay.InProgress || !repeat.Running {
		t.Fatalf("the repeat: kind %v running %v, want a 409 that says the first request is running", r.repeat.Kind, r.repeat.Running)
	}
}

// A late retry of a pruned key that meets its recorded charge is a replay
// only when it answers that charge's 201. A server error after the
// gateway call is this request's own answer, saved on the key: it is not
// a replay, and it does not say the original charge was answered.
func TestALateRetrysOwnErrorIsNotAReplay(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.svc.Pay(ctx, payment("k", "A-1", 100))
	w.advance(48 * time.Hour)
	if _, err := w.db.Prune(ctx, w.now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	p := payment("k", "A-1", 100)
	p.Faults.ServerError = true
	var completed pay.Step
	p.Observe = func(st pay.Step) {
		if st.Kind == pay.StepCompleted {
			completed = st
		}
	}
	o := w.svc.Pay(ctx, p)
	if o.Kind != pay.Saved || o.Status != 500 || o.Charge != nil {
		t.Fatalf("the late retry's own 500: kind %v status %d charge %v, want saved, 500, no new charge", o.Kind, o.Status, o.Charge)
	}
	if strings.Contains(completed.Detail, "original charge is answered") {
		t.Fatalf("the step says %q, but a 500 was answered", completed.Detail)
	}
	if again := w.svc.Pay(ctx, payment("k", "A-1", 100)); again.Kind != pay.Replayed || again.Status != 500 {
		t.Fatalf("its retry: %+v, want the saved 500 replayed", again)
	}
	if n, _ := w.db.CountCharges(ctx); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// countedClaims is the store, counting the claims it is asked for.
type countedClaims struct {
	pay.Storage
	mu     sync.Mutex
	claims int
}

func (c *countedClaims) Claim(ctx context.Context, r pay.ClaimRequest) (pay.ClaimResult, error) {
	c.mu.Lock()
	c.claims++
	c.mu.Unlock()
	return c.Storage.Claim(ctx, r)
}

func (c *countedClaims) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims
}

// While a payment is at work here, its key's row is started and held by
// its claim: a repeat of the same request is told so (409, running)
// without asking the store, as a storm's losers are. A request with
// another body still asks the store, which refuses it; once the work has
// written its outcome, a repeat gets the saved answer.
func TestARepeatOfWorkHereIsAnsweredWithoutTheStore(t *testing.T) {
	w := newWorld(t)
	store := &countedClaims{Storage: w.db}
	w.svc.Store = store
	w.gw.hold, w.gw.called = make(chan struct{}), make(chan struct{})
	first := make(chan pay.Outcome)
	go func() { first <- w.svc.Pay(context.Background(), payment("k", "A-1", 100)) }()
	<-w.gw.called // the first request is at the gateway: claimed, at work

	var steps []pay.Step
	repeat := payment("k", "A-1", 100)
	repeat.Observe = func(st pay.Step) { steps = append(steps, st) }
	if o := w.svc.Pay(context.Background(), repeat); o.Kind != pay.InProgress || !o.Running || pay.ErrorCode(o.Err) != pay.ECONFLICT {
		t.Fatalf("a repeat during the work: kind %v running %v err %v, want a 409 that says the first is running", o.Kind, o.Running, o.Err)
	}
	if len(steps) != 1 || steps[0].Kind != pay.StepConflict || steps[0].Status != 409 {
		t.Fatalf("the repeat's steps: %+v, want one conflict step", steps)
	}
	if n := store.count(); n != 1 {
		t.Fatalf("%d claims asked of the store, want 1 (the first request's)", n)
	}
	if o := w.svc.Pay(context.Background(), payment("k", "B-2", 100)); o.Kind != pay.Mismatch {
		t.Fatalf("another body with the key during the work: %+v, want a mismatch", o)
	}
	if n := store.count(); n != 2 {
		t.Fatalf("%d claims asked of the store, want 2: another body is the store's to answer", n)
	}

	close(w.gw.hold)
	if o := <-first; o.Kind != pay.Saved || o.Status != 201 {
		t.Fatalf("first: %+v", o)
	}
	if o := w.svc.Pay(context.Background(), payment("k", "A-1", 100)); o.Kind != pay.Replayed || o.Status != 201 {
		t.Fatalf("a repeat after the work: %+v, want the saved 201 replayed", o)
	}
	if n, _ := w.db.CountCharges(context.Background()); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}
