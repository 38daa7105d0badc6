package store

import (
	"context"
	"database/sql"
	"time"

	"paytwice/pay"
)

// OrderRecord reads everything kept about one order of a scope, in one
// read transaction so that the parts agree: its charges (guarded and the
// lab's), the keys claimed for it (without their saved bodies) and the
// traces of its released claims.
func (db *DB) OrderRecord(ctx context.Context, scope, orderID string) (pay.OrderRecord, error) {
	var rec pay.OrderRecord
	if err := db.need("payments"); err != nil {
		return rec, err
	}
	tx, err := db.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return rec, err
	}
	defer tx.Rollback()
	if rec.Charges, err = scanCharges(tx.QueryContext(ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE scope = ? AND order_id = ? ORDER BY created_at, id`, scope, orderID)); err != nil {
		return rec, err
	}
	if rec.Unguarded, err = scanCharges(tx.QueryContext(ctx, `SELECT `+chargeColumns+` FROM lab_loose_charges
		WHERE scope = ? AND order_id = ? ORDER BY created_at, id`, scope, orderID)); err != nil {
		return rec, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT key, status, COALESCE(response_status, 0), locked_at, COALESCE(completed_at, 0), claim
		FROM idempotency_keys WHERE scope = ? AND order_id = ? ORDER BY created_at, key`, scope, orderID)
	if err != nil {
		return rec, err
	}
	for rows.Next() {
		k := pay.KeyRow{Scope: scope, OrderID: orderID}
		var locked, completed int64
		if err := rows.Scan(&k.Key, &k.Status, &k.ResponseStatus, &locked, &completed, &k.Claim); err != nil {
			rows.Close()
			return rec, err
		}
		k.LockedAt = fromMillis(locked)
		if completed != 0 {
			k.CompletedAt = fromMillis(completed)
		}
		rec.Keys = append(rec.Keys, k)
	}
	if err := closeRows(rows); err != nil {
		return rec, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT key, cause, released_at FROM released_keys
		WHERE scope = ? AND order_id = ? ORDER BY released_at, key`, scope, orderID)
	if err != nil {
		return rec, err
	}
	defer rows.Close()
	for rows.Next() {
		var r pay.ReleasedKey
		var at int64
		if err := rows.Scan(&r.Key, &r.Cause, &at); err != nil {
			return rec, err
		}
		r.ReleasedAt = fromMillis(at)
		rec.Released = append(rec.Released, r)
	}
	return rec, rows.Err()
}

// closeRows closes rows and returns the error that ended them.
func closeRows(rows *sql.Rows) error {
	err := rows.Err()
	rows.Close()
	return err
}

// scanCharges reads the charges a query returned.
func scanCharges(rows *sql.Rows, err error) ([]pay.Charge, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var charges []pay.Charge
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			return nil, err
		}
		charges = append(charges, c)
	}
	return charges, rows.Err()
}

// pruneReleases deletes the traces of claims released before cutoff, a
// batch per write like the keys' prune: they say what became of an
// attempt for as long as a done key would.
func (db *DB) pruneReleases(ctx context.Context, cutoff time.Time) error {
	for ctx.Err() == nil {
		var n int64
		err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
			r, err := db.conn.ExecContext(ctx, `DELETE FROM released_keys WHERE (scope, key) IN
				(SELECT scope, key FROM released_keys WHERE released_at < ? ORDER BY released_at LIMIT ?)`, toMillis(cutoff), pruneBatch)
			if err != nil {
				return err
			}
			n = rowsAffected(r)
			return nil
		})
		if err != nil || n < pruneBatch {
			return err
		}
	}
	return ctx.Err()
}
