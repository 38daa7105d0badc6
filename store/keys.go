package store

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"time"
)

const keyColumns = `scope, key, method, path, fingerprint, order_id, amount_satang, status,
	response_status, response_body, created_at, locked_at, completed_at`

type rowScanner interface{ Scan(dest ...any) error }

func scanKey(r rowScanner) (KeyRow, error) {
	var k KeyRow
	var status sql.NullInt64
	var body []byte
	var created, locked int64
	var completed sql.NullInt64
	err := r.Scan(&k.Scope, &k.Key, &k.Method, &k.Path, &k.Fingerprint, &k.OrderID, &k.AmountSatang,
		&k.Status, &status, &body, &created, &locked, &completed)
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

// ClaimRequest describes the request that wants to own a key.
type ClaimRequest struct {
	Scope, Key, Method, Path, Fingerprint string
	OrderID                               string
	AmountSatang                          int64
}

// ClaimResult tells whether the claim won. When it lost, Existing is the
// row that already holds the key, read in the same transaction.
type ClaimResult struct {
	Claimed  bool
	Existing KeyRow
}

// Claim records the key as started unless (scope, key) already exists. It
// is a single INSERT … ON CONFLICT DO NOTHING RETURNING, so the primary key
// decides the race: however many requests arrive at once, one wins. The
// claim is durable when Claim returns.
func (db *DB) Claim(ctx context.Context, c ClaimRequest) (ClaimResult, error) {
	var res ClaimResult
	if err := db.need("payments"); err != nil {
		return res, err
	}
	now := toMillis(db.now())
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		res = ClaimResult{}
		var created int64
		err := w.claim.QueryRowContext(ctx, c.Scope, c.Key, c.Method, c.Path, c.Fingerprint,
			c.OrderID, c.AmountSatang, now, now).Scan(&created)
		if err == nil {
			res.Claimed = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		res.Existing, err = scanKey(w.selectKey.QueryRowContext(ctx, c.Scope, c.Key))
		return err
	})
	if err == nil && !res.Claimed && res.Existing.Status == StatusDone {
		db.cache.put(c.Scope, c.Key, Response{res.Existing.Fingerprint, res.Existing.ResponseStatus, res.Existing.ResponseBody})
	}
	return res, err
}

// CachedResponse returns the saved response of a done key if it is in the
// replay cache. A miss says nothing: the key may still exist on disk.
func (db *DB) CachedResponse(scope, key string) (Response, bool) {
	return db.cache.get(scope, key)
}

// Completion is the outcome of a claimed request, to be saved on its key.
type Completion struct {
	Scope, Key  string
	Fingerprint string // the request's; it goes into the replay cache
	Status      int
	Body        []byte
	// Charge, when set, is inserted in the same transaction that marks the
	// key done: the money and the saved response appear together or not at
	// all.
	Charge *Charge
	// FailHalfway makes the transaction fail after the charge was inserted,
	// so the savepoint rolls it back: the "fails halfway" fault.
	FailHalfway bool
}

// ErrNotStarted means the key was no longer started when its completion
// was saved: the sweeper closed or released it first.
var ErrNotStarted = &Error{Code: EINTERNAL, Message: "The key was closed by the sweeper before the request finished."}

// ErrHalfway is what Complete returns when FailHalfway rolled it back.
var ErrHalfway = &Error{Code: EINTERNAL, Message: "The transaction that records the charge failed halfway and was rolled back."}

// Complete saves the response on a started key, with its charge if any,
// and returns the response saved. That is c's, except when the key's
// charge is already recorded: a key pruned while its charge stayed, then
// retried late, reaches the same gateway charge again. The charge is not
// recorded twice; the key is closed with the 201 of the charge that
// exists, so neither the request nor the sweeper is stuck on the UNIQUE
// constraint.
func (db *DB) Complete(ctx context.Context, c Completion) (Response, error) {
	if err := db.need("payments"); err != nil {
		return Response{}, err
	}
	now := toMillis(db.now())
	saved := Response{Fingerprint: c.Fingerprint, Status: c.Status, Body: c.Body}
	err := db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		saved = Response{Fingerprint: c.Fingerprint, Status: c.Status, Body: c.Body}
		// Mark the key first: if the sweeper already closed it, stop before
		// touching the charges table.
		r, err := w.complete.ExecContext(ctx, c.Status, string(c.Body), now, c.Scope, c.Key)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n != 1 {
			return ErrNotStarted
		}
		if c.Charge != nil {
			ch := c.Charge
			r, err := w.insertCharge.ExecContext(ctx, ch.ID, c.Scope, c.Key, ch.OrderID, ch.AmountSatang,
				ch.GatewayRef, toMillis(ch.CreatedAt))
			if err != nil {
				return err
			}
			if n, _ := r.RowsAffected(); n == 0 && c.Status == http.StatusCreated {
				existing, err := scanCharge(w.selectCharge.QueryRowContext(ctx, c.Scope, c.Key))
				if err != nil {
					return err
				}
				saved.Body = existing.ResponseBody()
				if _, err := w.setBody.ExecContext(ctx, string(saved.Body), c.Scope, c.Key); err != nil {
					return err
				}
			}
		}
		if c.FailHalfway {
			return ErrHalfway
		}
		return nil
	})
	if err != nil {
		return Response{}, err
	}
	db.cache.put(c.Scope, c.Key, saved)
	return saved, nil
}

// Release deletes a started key, so that a retry runs afresh. It reports
// whether a row was deleted; done keys are never released.
func (db *DB) Release(ctx context.Context, scope, key string) (bool, error) {
	var released bool
	if err := db.need("payments"); err != nil {
		return false, err
	}
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		r, err := w.release_.ExecContext(ctx, scope, key)
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
		if db.schema.has("payments") {
			if _, err := db.conn.ExecContext(ctx, `DELETE FROM idempotency_keys; DELETE FROM charges;`); err != nil {
				return err
			}
		}
		if db.schema.has("ledger") {
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
func (db *DB) GetKey(ctx context.Context, scope, key string) (KeyRow, error) {
	k, err := scanKey(db.read.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = ? AND key = ?`, scope, key))
	if errors.Is(err, sql.ErrNoRows) {
		return k, Errorf(ENOTFOUND, "No idempotency key %q in this scope.", key)
	}
	return k, err
}

// RecentKeys returns up to limit keys, newest first.
func (db *DB) RecentKeys(ctx context.Context, limit int) ([]KeyRow, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+keyColumns+` FROM idempotency_keys
		ORDER BY locked_at DESC, key LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []KeyRow
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
func (db *DB) StartedBefore(ctx context.Context, cutoff time.Time) ([]KeyRow, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+keyColumns+` FROM idempotency_keys
		WHERE status = 'started' AND locked_at < ? ORDER BY locked_at`, toMillis(cutoff))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []KeyRow
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
