package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
)

// OrderRecord reads everything kept about one order of a scope in one
// repeatable-read transaction, so that the parts agree: its charges
// (guarded and the lab's), the keys claimed for it (without their saved
// bodies) and the traces of its released claims.
func (db *DB) OrderRecord(ctx context.Context, scope, orderID string) (pay.OrderRecord, error) {
	var rec pay.OrderRecord
	if err := db.need("payments"); err != nil {
		return rec, err
	}
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if rec.Charges, err = chargesOf(ctx, tx, `SELECT `+chargeColumns+` FROM charges
			WHERE scope = $1 AND order_id = $2 ORDER BY created_at, id`, scope, orderID); err != nil {
			return err
		}
		if rec.Unguarded, err = chargesOf(ctx, tx, `SELECT `+chargeColumns+` FROM lab_loose_charges
			WHERE scope = $1 AND order_id = $2 ORDER BY created_at, id`, scope, orderID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT key, status::text, COALESCE(response_status, 0), locked_at, completed_at, claim
			FROM idempotency_keys WHERE scope = $1 AND order_id = $2 ORDER BY created_at, key`, scope, orderID)
		if err != nil {
			return err
		}
		for rows.Next() {
			k := pay.KeyRow{Scope: scope, OrderID: orderID}
			var completed *time.Time
			if err := rows.Scan(&k.Key, &k.Status, &k.ResponseStatus, &k.LockedAt, &completed, &k.Claim); err != nil {
				rows.Close()
				return err
			}
			k.LockedAt = k.LockedAt.UTC()
			if completed != nil {
				k.CompletedAt = completed.UTC()
			}
			rec.Keys = append(rec.Keys, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT key, cause, released_at FROM released_keys
			WHERE scope = $1 AND order_id = $2 ORDER BY released_at, key`, scope, orderID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r pay.ReleasedKey
			var cause string
			if err := rows.Scan(&r.Key, &cause, &r.ReleasedAt); err != nil {
				return err
			}
			r.Cause, r.ReleasedAt = pay.ReleaseCause(cause), r.ReleasedAt.UTC()
			rec.Released = append(rec.Released, r)
		}
		return rows.Err()
	})
	return rec, err
}

// chargesOf reads the charges a query returns inside tx.
func chargesOf(ctx context.Context, tx pgx.Tx, query string, args ...any) ([]pay.Charge, error) {
	rows, err := tx.Query(ctx, query, args...)
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
// batch per statement like the keys' prune: they say what became of an
// attempt for as long as a done key would.
func (db *DB) pruneReleases(ctx context.Context, cutoff time.Time) error {
	for ctx.Err() == nil {
		tag, err := db.pool.Exec(ctx, `DELETE FROM released_keys r USING (SELECT scope, key FROM released_keys
			WHERE released_at < $1 ORDER BY released_at LIMIT $2 FOR UPDATE SKIP LOCKED) old
			WHERE r.scope = old.scope AND r.key = old.key`, cutoff, pruneBatch)
		if err != nil || tag.RowsAffected() < pruneBatch {
			return err
		}
	}
	return ctx.Err()
}
