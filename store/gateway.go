package store

import (
	"context"
	"database/sql"
	"errors"

	"paytwice/pay"
)

// The simulated gateway keeps its own ledger in this database, in a table
// of its own that paytwice's code never joins with: it stands for another
// company's system. These methods implement sim.Ledger.

const gatewayColumns = `key, id, order_id, amount_satang, created_at`

func scanGateway(r rowScanner) (pay.GatewayCharge, error) {
	var g pay.GatewayCharge
	var created int64
	err := r.Scan(&g.Key, &g.ID, &g.OrderID, &g.AmountSatang, &created)
	g.CreatedAt = fromMillis(created)
	return g, err
}

// RecordGatewayCharge stores g unless its key is already recorded, and
// returns the record that holds the key: the gateway is idempotent by key.
func (db *DB) RecordGatewayCharge(ctx context.Context, g pay.GatewayCharge) (pay.GatewayCharge, bool, error) {
	var out pay.GatewayCharge
	var created bool
	if err := db.need("ledger"); err != nil {
		return out, false, err
	}
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		var id string
		err := w.insertGateway.QueryRowContext(ctx, g.Key, g.ID, g.OrderID, g.AmountSatang, toMillis(g.CreatedAt)).Scan(&id)
		if err == nil {
			out, created = g, true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		created = false
		out, err = scanGateway(w.selectGateway.QueryRowContext(ctx, g.Key))
		return err
	})
	return out, created, err
}

// LookupGatewayCharge finds the gateway's record for a key.
func (db *DB) LookupGatewayCharge(ctx context.Context, key string) (pay.GatewayCharge, bool, error) {
	g, err := scanGateway(db.read.QueryRowContext(ctx, `SELECT `+gatewayColumns+` FROM gateway_charges WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return g, false, nil
	}
	return g, err == nil, err
}

// CountGatewayCharges counts the gateway's records.
func (db *DB) CountGatewayCharges(ctx context.Context) (int, error) {
	var n int
	err := db.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM gateway_charges`).Scan(&n)
	return n, err
}
