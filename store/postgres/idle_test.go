package postgres_test

import (
	"context"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// A server that stopped inside a transaction (SIGSTOP) holds the row
// locks of that transaction. The pool's sessions end such a transaction
// after the idle bound, so another server's claim of the key, which
// would otherwise wait out its lock bound and be refused, gets the key.
func TestIdleTransactionOfAStoppedServerFreesItsKey(t *testing.T) {
	ownDatabase(t)
	url := pgtest.NewDatabase(t)
	stopped, err := postgres.Open(ctx, url, postgres.Options{IdleInTransaction: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()
	other, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	req := pay.ClaimRequest{Scope: "s", Key: "k", Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
	first, err := stopped.Claim(ctx, req)
	if err != nil || !first.Claimed {
		t.Fatalf("claim: %+v %v", first, err)
	}
	// The stopped server's transaction: it locked the key's row (as a
	// save does) and then stopped, holding the lock.
	tx, err := stopped.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE scope = 's' AND key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var settings [2]string
	if err := tx.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('statement_timeout')`).Scan(&settings[0], &settings[1]); err != nil {
		t.Fatal(err)
	}
	if settings != [2]string{"300ms", "1min"} {
		t.Fatalf("the session's bounds: %v", settings)
	}

	// The other server saves the key's outcome (as its sweeper would): its
	// update waits on that lock, and gets it only because the idle session
	// is ended. Without the bound it would wait for ever; the test gives it
	// ten seconds.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ch := &pay.Charge{ID: pay.NewID("ch_"), OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: time.Now()}
	done, err := other.Complete(wait, pay.Completion{ClaimRequest: req, Claim: first.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch})
	if err != nil || done.ClaimLost || done.Status != 201 {
		t.Fatalf("the other server's save: %+v %v", done, err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the stopped server's transaction committed after its session was ended")
	}
}
