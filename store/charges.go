package store

import (
	"context"
	"database/sql"
	"errors"

	"paytwice/pay"
)

const chargeColumns = `id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at`

func scanCharge(r rowScanner) (pay.Charge, error) {
	var c pay.Charge
	var created int64
	err := r.Scan(&c.ID, &c.Scope, &c.Key, &c.OrderID, &c.AmountSatang, &c.GatewayRef, &created)
	c.CreatedAt = fromMillis(created)
	return c, err
}

func (db *DB) queryCharges(ctx context.Context, query string, args ...any) ([]pay.Charge, error) {
	rows, err := db.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	charges := []pay.Charge{}
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			return nil, err
		}
		charges = append(charges, c)
	}
	return charges, rows.Err()
}

// GetCharge reads one charge of a scope by its id. Another scope's charge
// is reported as not found: callers never see each other's money.
func (db *DB) GetCharge(ctx context.Context, scope, id string) (pay.Charge, error) {
	c, err := scanCharge(db.read.QueryRowContext(ctx, `SELECT `+chargeColumns+` FROM charges WHERE id = ? AND scope = ?`, id, scope))
	if errors.Is(err, sql.ErrNoRows) {
		return c, pay.Errorf(pay.ENOTFOUND, "No charge %q.", id)
	}
	return c, err
}

// ChargesByOrder lists a scope's charges for one order, oldest first, so a
// client can reconcile after an unknown outcome. The lab's unguarded
// table counts too: a charge made by one of its mistakes is a charge the
// customer paid, and a look-up that left it out would say "not paid".
func (db *DB) ChargesByOrder(ctx context.Context, scope, orderID string) ([]pay.Charge, error) {
	return db.queryCharges(ctx, `SELECT `+chargeColumns+` FROM charges WHERE scope = ? AND order_id = ?
		UNION ALL SELECT `+chargeColumns+` FROM lab_loose_charges WHERE scope = ? AND order_id = ?
		ORDER BY created_at, id`, scope, orderID, scope, orderID)
}

// RecentCharges returns up to limit charges of every scope, newest first.
func (db *DB) RecentCharges(ctx context.Context, limit int) ([]pay.Charge, error) {
	return db.queryCharges(ctx, `SELECT `+chargeColumns+` FROM charges ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
}

// CountCharges counts every charge.
func (db *DB) CountCharges(ctx context.Context) (int, error) {
	var n int
	err := db.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM charges`).Scan(&n)
	return n, err
}
