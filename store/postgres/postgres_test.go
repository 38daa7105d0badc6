package postgres_test

import (
	"context"
	"testing"
	"time"

	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/store/storetest"
)

// open opens a store on a fresh database of its own.
func open(t *testing.T, now func() time.Time) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.NewDatabase(t), postgres.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) storetest.Backend { return open(t, now) })
}
