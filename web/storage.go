package web

import (
	"context"

	"paytwice/pay"
	"paytwice/sim"
)

// Store is what the server needs of its payments database: the whole
// contract of pay.Store, which store/storetest checks on both backends.
type Store = pay.Store

// Ledger is the simulated gateway's own database.
type Ledger interface {
	sim.Ledger
	CountGatewayCharges(ctx context.Context) (int, error)
	Reset(ctx context.Context) error
	LabScanKeys(ctx context.Context, fn func(where, key string)) error
}

// ledgerApart reports whether the gateway's ledger is a database of its
// own, not the payments store itself.
func (s *Server) ledgerApart() bool { return any(s.world.ledger) != any(s.db) }
