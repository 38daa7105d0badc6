package web

import (
	"context"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/store"
)

// Store is what the server needs of its payments database: the protocol's
// storage, the reads its pages and API make, retention, reset, and the
// lab's deliberately unguarded writes. The SQLite store (store.DB) and the
// PostgreSQL store (store/postgres.DB) implement it.
type Store interface {
	pay.Storage
	GetKey(ctx context.Context, scope, key string) (pay.KeyRow, error)
	RecentKeys(ctx context.Context, limit int) ([]pay.KeyRow, error)
	KeyCounts(ctx context.Context) (started, done int, err error)
	GetCharge(ctx context.Context, scope, id string) (pay.Charge, error)
	ChargesByOrder(ctx context.Context, scope, orderID string) ([]pay.Charge, error)
	RecentCharges(ctx context.Context, limit int) ([]pay.Charge, error)
	CountCharges(ctx context.Context) (int, error)
	Prune(ctx context.Context, cutoff time.Time) ([]store.PrunedKey, error)
	Reset(ctx context.Context) error

	LabInsertKeyUnguarded(ctx context.Context, c pay.ClaimRequest) (string, error)
	LabRecordCharge(ctx context.Context, ch pay.Charge) error
	LabLooseFindKey(ctx context.Context, scope, key string) (store.LabLooseKey, bool, error)
	LabLooseInsertKey(ctx context.Context, c pay.ClaimRequest, request string) (rowID int64, rows int, err error)
	LabLooseComplete(ctx context.Context, rowID int64, status int, body []byte, ch *pay.Charge, request string) (charges int, err error)
	LabLooseCharges(ctx context.Context) ([]pay.Charge, error)
	LabReset(ctx context.Context) error
	LabMeasure(ctx context.Context) (store.LabChargeGroups, error)
	LabScanKeys(ctx context.Context, fn func(where, key string)) error
}

// Ledger is the simulated gateway's own database.
type Ledger interface {
	sim.Ledger
	CountGatewayCharges(ctx context.Context) (int, error)
	Reset(ctx context.Context) error
	LabScanKeys(ctx context.Context, fn func(where, key string)) error
}

// ledgerApart reports whether the gateway's ledger is a database of its
// own, not the payments store itself.
func (s *Server) ledgerApart() bool { return any(s.ledger) != any(s.db) }
