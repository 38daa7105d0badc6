package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"paytwice/pay"
)

const keyColumns = `scope, key, method, path, fingerprint, order_id, amount_satang, status,
	response_status, response_body, created_at, locked_at, completed_at, claim, charge_key`

type rowScanner interface{ Scan(dest ...any) error }

func scanKey(r rowScanner) (pay.KeyRow, error) {
	var k pay.KeyRow
	var status sql.NullInt64
	var body []byte
	var created, locked int64
	var completed sql.NullInt64
	err := r.Scan(&k.Scope, &k.Key, &k.Method, &k.Path, &k.Fingerprint, &k.OrderID, &k.AmountSatang,
		&k.Status, &status, &body, &created, &locked, &completed, &k.Claim, &k.ChargeKey)
	if err != nil {
		return k, err
	}
	k.ResponseStatus = int(status.Int64)
	k.ResponseBody = body
	k.CreatedAt = fromMillis(created)
	k.LockedAt = fromMillis(locked)
	if completed.Valid {
		k.CompletedAt = fromMillis(completed.Int64)
	}
	return k, nil
}

// Claim records the key as started unless (scope, key) already exists. It
// is a single INSERT … ON CONFLICT DO NOTHING RETURNING, so the primary key
// decides the race: however many requests arrive at once, one wins. The
// winner's row carries a fencing token of its own. The claim is durable
// when Claim returns.
//
// A key whose key row was pruned may still have its charge recorded. If
// that charge is for another order or amount, the key is not claimed: a
// key pays for one order, for as long as its charge is kept.
func (db *DB) Claim(ctx context.Context, c pay.ClaimRequest) (pay.ClaimResult, error) {
	var res pay.ClaimResult
	if err := db.need("payments"); err != nil {
		return res, err
	}
	now := toMillis(db.now())
	token := pay.NewToken()
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		res = pay.ClaimResult{}
		// The charge is looked up first, so that a refused claim writes
		// nothing and the claim stays a single statement.
		ch, err := scanCharge(w.selectCharge.QueryRowContext(ctx, c.Scope, c.ChargeKeyOrKey()))
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case ch.OrderID != c.OrderID || ch.AmountSatang != c.AmountSatang:
			res.Reused = &ch
			return nil
		}
		var created int64
		err = w.claim.QueryRowContext(ctx, c.Scope, c.Key, c.Method, c.Path, c.Fingerprint,
			c.OrderID, c.AmountSatang, now, now, token, c.ChargeKey).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			res.Existing, err = scanKey(w.selectKey.QueryRowContext(ctx, c.Scope, c.Key))
			return err
		}
		if err != nil {
			return err
		}
		res.Claimed, res.Claim = true, token
		return nil
	})
	if err == nil && !res.Claimed && res.Existing.Status == pay.StatusDone {
		db.cache.put(c.Scope, c.Key, pay.Response{Fingerprint: res.Existing.Fingerprint, Status: res.Existing.ResponseStatus, Body: res.Existing.ResponseBody})
	}
	return res, err
}

// CachedResponse returns the saved response of a done key if it is in the
// replay cache. A miss says nothing: the key may still exist on disk.
func (db *DB) CachedResponse(scope, key string) (pay.Response, bool) {
	return db.cache.get(scope, key)
}

// Complete saves the response on the key the claim holds, with its charge
// if any, and returns what was saved.
//
// The update names the claim's fencing token, so it acts only on the
// claim it holds. When the claim is gone (the sweeper released the key, a
// reset emptied the table), the charge is still recorded: money the
// gateway took is never dropped. The key row is written again if nobody
// else holds it, so the key and its charge agree.
//
// When the key's charge is already recorded (a key pruned while its
// charge stayed, then retried late, reaches the same gateway charge
// again), it is not recorded twice: the key is closed with the 201 of
// the charge that exists, so neither the request nor the sweeper is stuck
// on the UNIQUE constraint.
func (db *DB) Complete(ctx context.Context, c pay.Completion) (pay.Completed, error) {
	if err := db.need("payments"); err != nil {
		return pay.Completed{}, err
	}
	now := toMillis(db.now())
	var out pay.Completed
	var cache bool
	err := db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		out = pay.Completed{Response: pay.Response{Fingerprint: c.Fingerprint, Status: c.Status, Body: c.Body}}
		cache = true
		r, err := w.complete.ExecContext(ctx, c.Status, string(c.Body), now, c.Scope, c.Key, c.Claim)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		out.ClaimLost = n != 1
		if c.Charge != nil {
			ch := c.Charge
			r, err := w.insertCharge.ExecContext(ctx, ch.ID, c.Scope, c.ChargeKeyOrKey(), ch.OrderID, ch.AmountSatang,
				ch.GatewayRef, toMillis(ch.CreatedAt))
			if err != nil {
				return err
			}
			if n, _ := r.RowsAffected(); n == 0 {
				existing, err := scanCharge(w.selectCharge.QueryRowContext(ctx, c.Scope, c.ChargeKeyOrKey()))
				if err != nil {
					return err
				}
				if existing.GatewayRef != ch.GatewayRef {
					return ErrChargeDiffers
				}
				out.ChargeExisted = true
				if c.Status == pay.PaidStatus {
					out.Body = existing.ResponseBody()
					if !out.ClaimLost {
						if _, err := w.setBody.ExecContext(ctx, string(out.Body), c.Scope, c.Key); err != nil {
							return err
						}
					}
				}
			}
		}
		if out.ClaimLost {
			var err error
			cache, err = db.completeLate(ctx, w, c, &out, now)
			if err != nil {
				return err
			}
		}
		if c.BeforeCommit != nil {
			return c.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		return pay.Completed{}, err
	}
	if cache {
		db.cache.put(c.Scope, c.Key, out.Response)
	}
	return out, nil
}

// completeLate finishes a completion whose claim was gone. If nobody holds
// the key, the row is written again, done with this answer, when a charge
// was taken: the key must remember it. If the key is done with the same
// request's answer (the sweeper closed it with this very charge), that
// answer is sent. Otherwise the key is someone else's and is left alone;
// the request answers with its own outcome. It reports whether out is
// what the key now replays.
func (db *DB) completeLate(ctx context.Context, w *writeStatements, c pay.Completion, out *pay.Completed, now int64) (bool, error) {
	row, err := scanKey(w.selectKey.QueryRowContext(ctx, c.Scope, c.Key))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if c.Charge == nil {
			return false, nil
		}
		_, err := w.insertDone.ExecContext(ctx, c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID,
			c.AmountSatang, out.Status, string(out.Body), now, now, now, c.Claim, c.ChargeKey)
		return err == nil, err
	case err != nil:
		return false, err
	case row.Status == pay.StatusDone && row.Fingerprint == c.Fingerprint:
		out.Response = pay.Response{Fingerprint: row.Fingerprint, Status: row.ResponseStatus, Body: row.ResponseBody}
		return true, nil
	}
	return false, nil
}

// Release deletes a started key held by claim, so that a retry runs
// afresh. It reports whether a row was deleted; done keys, and keys held
// by another claim, are never released.
func (db *DB) Release(ctx context.Context, scope, key, claim string) (bool, error) {
	var released bool
	if err := db.need("payments"); err != nil {
		return false, err
	}
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		r, err := w.release_.ExecContext(ctx, scope, key, claim)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		released = n == 1
		return nil
	})
	return released, err
}

// PrunedKey identifies a key removed by Prune.
type PrunedKey struct{ Scope, Key string }

// Prune deletes done keys created before cutoff. Started keys are never
// pruned: their outcome is unknown, and only the sweeper may close them.
func (db *DB) Prune(ctx context.Context, cutoff time.Time) ([]PrunedKey, error) {
	var pruned []PrunedKey
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		pruned = pruned[:0]
		rows, err := db.conn.QueryContext(ctx, `DELETE FROM idempotency_keys
			WHERE status = 'done' AND created_at < ? RETURNING scope, key`, toMillis(cutoff))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p PrunedKey
			if err := rows.Scan(&p.Scope, &p.Key); err != nil {
				return err
			}
			pruned = append(pruned, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	for _, p := range pruned {
		db.cache.drop(p.Scope, p.Key)
	}
	return pruned, nil
}

// Reset deletes every key, charge and gateway record the file holds: a
// clean slate for the next demonstration.
func (db *DB) Reset(ctx context.Context) error {
	err := db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		if db.schema.Holds("payments") {
			if _, err := db.conn.ExecContext(ctx, `DELETE FROM idempotency_keys; DELETE FROM charges;`); err != nil {
				return err
			}
		}
		if db.schema.Holds("ledger") {
			if _, err := db.conn.ExecContext(ctx, `DELETE FROM gateway_charges`); err != nil {
				return err
			}
		}
		return nil
	})
	db.cache.clear()
	return err
}

// GetKey reads one key row.
func (db *DB) GetKey(ctx context.Context, scope, key string) (pay.KeyRow, error) {
	k, err := scanKey(db.read.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = ? AND key = ?`, scope, key))
	if errors.Is(err, sql.ErrNoRows) {
		return k, pay.Errorf(pay.ENOTFOUND, "No idempotency key %q in this scope.", key)
	}
	return k, err
}

// RecentKeys returns up to limit keys, newest first.
func (db *DB) RecentKeys(ctx context.Context, limit int) ([]pay.KeyRow, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+keyColumns+` FROM idempotency_keys
		ORDER BY locked_at DESC, key LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []pay.KeyRow
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// StartedBefore returns the started keys whose lock was taken before
// cutoff: the candidates for the sweeper.
func (db *DB) StartedBefore(ctx context.Context, cutoff time.Time) ([]pay.KeyRow, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+keyColumns+` FROM idempotency_keys
		WHERE status = 'started' AND locked_at < ? ORDER BY locked_at`, toMillis(cutoff))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []pay.KeyRow
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// KeyCounts counts the key rows by status.
func (db *DB) KeyCounts(ctx context.Context) (started, done int, err error) {
	err = db.read.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(status = 'started'), 0), COALESCE(SUM(status = 'done'), 0) FROM idempotency_keys`).Scan(&started, &done)
	return started, done, err
}

// ForgetCachedResponses empties the replay cache, as a restart would; the
// saved responses on disk are unaffected.
func (db *DB) ForgetCachedResponses() { db.cache.clear() }

// DB is the protocol's storage.
var _ pay.Storage = (*DB)(nil)
