package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
)

// The simulated gateway keeps its ledger in the schema "gateway", which
// paytwice's own queries never join: it stands for another company's
// system. These methods implement sim.Ledger.

const gatewayColumns = `key, id, order_id, amount_satang, created_at`

func scanGateway(r pgx.Row) (pay.GatewayCharge, error) {
	var g pay.GatewayCharge
	err := r.Scan(&g.Key, &g.ID, &g.OrderID, &g.AmountSatang, &g.CreatedAt)
	g.CreatedAt = g.CreatedAt.UTC()
	return g, err
}

// RecordGatewayCharge stores g unless its key is already recorded, and
// returns the record that holds the key: the gateway is idempotent by key,
// across every server that shares its ledger.
func (db *DB) RecordGatewayCharge(ctx context.Context, g pay.GatewayCharge) (pay.GatewayCharge, bool, error) {
	if err := db.need("ledger"); err != nil {
		return pay.GatewayCharge{}, false, err
	}
	tag, err := db.direct(ctx, recordGatewayStatement, func(a *args) {
		a.text(g.Key).text(g.ID).text(g.OrderID).int(g.AmountSatang).time(g.CreatedAt)
	}, nil)
	if err != nil {
		return pay.GatewayCharge{}, false, err
	}
	if tag.RowsAffected() == 1 {
		return g, true, nil
	}
	// Gateway records are never deleted except by a reset, so the row
	// that conflicted is there to read.
	existing, found, err := db.LookupGatewayCharge(ctx, g.Key)
	if err == nil && !found {
		err = errors.New("postgres: the gateway record that held the key vanished (a reset?)")
	}
	return existing, false, err
}

// recordGatewayStatement records a gateway charge unless its key is
// recorded, prepared on each connection (direct.go).
var recordGatewayStatement = statement{name: "paytwice_record_gateway", sql: `INSERT INTO gateway.charges (` + gatewayColumns + `)
	VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING`}

// LookupGatewayCharge finds the gateway's record for a key.
func (db *DB) LookupGatewayCharge(ctx context.Context, key string) (pay.GatewayCharge, bool, error) {
	if err := db.need("ledger"); err != nil {
		return pay.GatewayCharge{}, false, err
	}
	g, err := scanGateway(db.pool.QueryRow(ctx, `SELECT `+gatewayColumns+` FROM gateway.charges WHERE key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return g, false, nil
	}
	return g, err == nil, err
}

// CountGatewayCharges counts the gateway's records.
func (db *DB) CountGatewayCharges(ctx context.Context) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM gateway.charges`).Scan(&n)
	return n, err
}
