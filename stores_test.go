package main

import (
	"context"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store/postgres/pgtest"
)

// TestLedgerInThePaymentsDatabaseSharesItsStore: with the gateway's
// ledger in the payments' PostgreSQL database (the default, or the same
// URL named twice), a server opens one store, one pool, holding both; a
// ledger in another database gets a store of its own. Either way the
// gateway's records land where they are read back, and a reset of the
// store the server resets empties them.
func TestLedgerInThePaymentsDatabaseSharesItsStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	elsewhere := pgtest.NewDatabase(t)
	for _, c := range []struct {
		name, gateway string
		together      bool
	}{
		{"default", "", true},
		{"the same URL", url, true},
		{"another database", elsewhere, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := openStores(ctx, url, c.gateway, time.Now, "")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if together := any(s.ledger) == any(s.db); together != c.together {
				t.Fatalf("ledger and payments in one store: %v, want %v", together, c.together)
			}
			key := "k-" + c.name
			g := pay.GatewayCharge{Key: key, ID: pay.NewID("gw_"), OrderID: "A-1", AmountSatang: 100, CreatedAt: time.Now()}
			if _, _, err := s.ledger.RecordGatewayCharge(ctx, g); err != nil {
				t.Fatal(err)
			}
			got, ok, err := s.ledger.LookupGatewayCharge(ctx, key)
			if err != nil || !ok || got.ID != g.ID {
				t.Fatalf("LookupGatewayCharge(%q) = %+v, %v, %v; want the charge %s", key, got, ok, err, g.ID)
			}
			if err := s.db.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			_, ok, err = s.ledger.LookupGatewayCharge(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			// A reset of the payments store empties the ledger only when it
			// holds it: a ledger apart is reset by the server on its own.
			if ok != !c.together {
				t.Fatalf("after the payments store's reset the gateway's record is there: %v, want %v", ok, !c.together)
			}
		})
	}
}
