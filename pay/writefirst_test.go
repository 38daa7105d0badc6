package pay_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
)

// writesSeen lists the writes a payment made to the books and to the
// gateway's ledger, each with whether it was made under pay.WriteFirst.
type writesSeen struct {
	mu     sync.Mutex
	writes []string
	// works are the types of the contexts the gateway charged under.
	works []string
}

func (w *writesSeen) saw(ctx context.Context, write string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if pay.WritesFirst(ctx) {
		write += " first"
	} else {
		write += " queued"
	}
	w.writes = append(w.writes, write)
}

func (w *writesSeen) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// seenBooks is the SQLite store, its writes seen.
type seenBooks struct {
	*store.DB
	seen *writesSeen
}

func (b seenBooks) Claim(ctx context.Context, c pay.ClaimRequest) (pay.ClaimResult, error) {
	b.seen.saw(ctx, "claim")
	return b.DB.Claim(ctx, c)
}

func (b seenBooks) Complete(ctx context.Context, c pay.Completion) (pay.Completed, error) {
	b.seen.saw(ctx, "complete")
	return b.DB.Complete(ctx, c)
}

func (b seenBooks) Release(ctx context.Context, scope, key, claim string, cause pay.ReleaseCause) (bool, error) {
	b.seen.saw(ctx, "release")
	return b.DB.Release(ctx, scope, key, claim, cause)
}

func (b seenBooks) RecordGatewayCharge(ctx context.Context, g pay.GatewayCharge) (pay.GatewayCharge, bool, error) {
	b.seen.saw(ctx, "gateway charge")
	b.seen.mu.Lock()
	b.seen.works = append(b.seen.works, fmt.Sprintf("%T", ctx))
	b.seen.mu.Unlock()
	return b.DB.RecordGatewayCharge(ctx, g)
}

// TestAPaymentThatWritesFirstWritesFirstToTheEnd: a payment made under
// pay.WriteFirst (the presenter's) makes every one of its writes so, the
// claim, the charge at the gateway's ledger and the saved answer, with
// its work under the server's work context (pay.NewWorkContext), which
// is made apart from the request. The store then runs each before the
// writes queued by everyone else (store's TestWritesFirstGoBeforeTheQueuedOnes).
// Only the claim did: the charge and the answer waited behind a class's
// batches, and a presenter's payment went unanswered for 20 s under a
// flood (TestMischievousClass). A payment that does not write first
// queues every write as before, and the work, marked, keeps its type, by which
// PauseWork finds it.
func TestAPaymentThatWritesFirstWritesFirstToTheEnd(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "first.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	seen := &writesSeen{}
	books := seenBooks{DB: db, seen: seen}
	svc := &pay.Service{Store: books, Gateway: sim.NewGateway(books, time.Now).With(pay.GatewayFaults{}), Now: time.Now,
		WorkContext: func() (context.Context, context.CancelFunc) {
			return pay.NewWorkContext(context.Background(), time.Minute)
		}}
	pays := func(ctx context.Context, key, order string) {
		t.Helper()
		if o := svc.Pay(ctx, payment(key, order, 129900)); o.Kind != pay.Saved || o.Status != 201 {
			t.Fatalf("%s: %v %v", order, o.Kind, o.Err)
		}
	}

	pays(pay.WriteFirst(context.Background()), "presenter-1", "PR0001X")
	want := []string{"claim first", "gateway charge first", "complete first"}
	if got := seen.list(); !slices.Equal(got, want) {
		t.Errorf("the presenter's payment wrote %q, want %q", got, want)
	}
	seen.mu.Lock()
	seen.writes = nil
	seen.mu.Unlock()
	pays(context.Background(), "student-1", "C0-1")
	want = []string{"claim queued", "gateway charge queued", "complete queued"}
	if got := seen.list(); !slices.Equal(got, want) {
		t.Errorf("a student's payment wrote %q, want %q", got, want)
	}
	if !slices.Equal(seen.works, []string{"*pay.workContext", "*pay.workContext"}) {
		t.Errorf("the gateway charged under %q (the presenter's, the student's), want the work contexts themselves: PauseWork finds them by their type", seen.works)
	}
}
