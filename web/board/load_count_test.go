package board

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

// chargeBetweenReads is the books with a payment that completes once,
// right after the board has read the newest charges and before it counts
// them: what another server's payment does when it commits between the
// two reads of a reload.
type chargeBetweenReads struct {
	Store
	once  sync.Once
	armed chan struct{}
	pay   func()
}

func (s *chargeBetweenReads) RecentCharges(ctx context.Context, limit int) ([]pay.Charge, error) {
	recent, err := s.Store.RecentCharges(ctx, limit)
	select {
	case <-s.armed:
		s.once.Do(s.pay)
	default:
	}
	return recent, err
}

// A board reloaded from the books (a gap, a reset) counts every charge
// once, also one committed while it was reading: its event, which comes
// after the reload, does not count it again.
func TestAReloadCountsAChargeMadeDuringItOnce(t *testing.T) {
	ctx := context.Background()
	books := &chargeBetweenReads{armed: make(chan struct{})}
	b := newTestBoard(t, func(cfg *Config) {
		books.Store = cfg.Store
		cfg.Store = books
	}, 4)
	n := 0
	// pay1 saves a charge in the books and publishes its events.
	pay1 := func() {
		i := n
		n++
		evs := paymentEvents(i)
		key := evs[0].Key
		req := pay.ClaimRequest{Scope: evs[0].Scope, Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: evs[0].OrderID, AmountSatang: 129900}
		res, err := b.db.Claim(ctx, req)
		if err != nil || !res.Claimed {
			t.Errorf("claim %d: %+v %v", i, res, err)
			return
		}
		ch := &pay.Charge{ID: evs[4].Charge, Scope: req.Scope, Key: key, OrderID: req.OrderID, AmountSatang: 129900, GatewayRef: "gw_" + strconv.Itoa(i), CreatedAt: time.Now()}
		if _, err := b.db.Complete(ctx, pay.Completion{ClaimRequest: req, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
			t.Errorf("complete %d: %v", i, err)
			return
		}
		for _, e := range evs {
			b.hub.Publish(e)
		}
	}
	books.pay = pay1
	pay1()
	pay1()
	b.caughtUp(t)
	if got := b.Snapshot().Counters.Charges; got != 2 {
		t.Fatalf("the board counts %d charges before the reload, want 2", got)
	}

	close(books.armed)
	b.hub.Publish(live.Event{Kind: live.Gap, Message: "events were lost on the way here"})
	b.caughtUp(t)
	if n != 3 {
		t.Fatalf("%d payments made, want the third during the reload", n)
	}
	want, err := b.db.CountCharges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Snapshot().Counters.Charges; got != want {
		t.Fatalf("the board counts %d charges after the reload; the books hold %d", got, want)
	}
}
