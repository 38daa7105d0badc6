package pay_test

import (
	"context"
	"testing"
	"time"

	"paytwice/pay"
)

// pausedStore is a store whose database stopped answering claims (a
// PostgreSQL server under SIGSTOP): a claim waits until its context ends.
type pausedStore struct {
	pay.Storage
	waited chan struct{}
}

func (s pausedStore) Claim(ctx context.Context, c pay.ClaimRequest) (pay.ClaimResult, error) {
	<-ctx.Done()
	close(s.waited)
	return pay.ClaimResult{}, ctx.Err()
}

func TestClaimThatOutwaitsTheStoreIsUnavailable(t *testing.T) {
	w := newWorld(t)
	paused := pausedStore{Storage: w.db, waited: make(chan struct{})}
	svc := &pay.Service{Store: paused, Gateway: w.gw, Now: w.now, ClaimWait: 20 * time.Millisecond}
	// The caller's own context never ends: the bound is the service's.
	o := svc.Pay(context.Background(), payment("k", "A-1", 100))
	<-paused.waited
	if o.Kind != pay.Failed || pay.ErrorCode(o.Err) != pay.EUNAVAILABLE {
		t.Fatalf("a claim the store never answered: %+v (code %s), want an unavailable failure", o, pay.ErrorCode(o.Err))
	}
	if len(w.gw.charges) != 0 {
		t.Fatalf("the gateway was charged: %v", w.gw.charges)
	}
	// The same key on a store that answers runs afresh.
	if o := w.svc.Pay(context.Background(), payment("k", "A-1", 100)); o.Kind != pay.Saved || o.Status != 201 {
		t.Fatalf("the retry: %+v", o)
	}
}
