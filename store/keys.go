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
	if row, ok := db.held.get(c.Scope, c.Key); ok && row.Fingerprint == c.Fingerprint {
		// The same request again while this process works on it: on disk
		// the claim would conflict with this very row.
		return pay.ClaimResult{Existing: row}, nil
	}
	if row, ok := db.doneOnDisk(ctx, c); ok {
		return pay.ClaimResult{Existing: row}, nil
	}
	now := toMillis(db.now())
	token := c.Token
	if token == "" {
		token = pay.NewToken()
	}
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
	if err == nil && res.Claimed {
		at := fromMillis(now)
		db.held.put(pay.KeyRow{Scope: c.Scope, Key: c.Key, Method: c.Method, Path: c.Path, Fingerprint: c.Fingerprint,
			OrderID: c.OrderID, AmountSatang: c.AmountSatang, Status: pay.StatusStarted, CreatedAt: at, LockedAt: at,
			Claim: token, ChargeKey: c.ChargeKey})
	}
	return res, err
}

// doneOnDisk reads the key's row through the read pool, and returns it
// when it is done for the same order, amount and charge key as c: the
// claim would only conflict with it, so a replay of a key older than the
// replay cache is answered without a turn in the writer. On a file of
// millions of keys such a read waits for the disk, and in the writer it
// made every payment behind it wait too. Anything else (no row, a started
// row, another order) goes to the writer, whose claim decides.
func (db *DB) doneOnDisk(ctx context.Context, c pay.ClaimRequest) (pay.KeyRow, bool) {
	row, err := scanKey(db.readKey.QueryRowContext(ctx, c.Scope, c.Key))
	if err != nil || row.Status != pay.StatusDone || row.OrderID != c.OrderID || row.AmountSatang != c.AmountSatang || row.ChargeKey != c.ChargeKey {
		return pay.KeyRow{}, false
	}
	db.cache.put(c.Scope, c.Key, pay.Response{Fingerprint: row.Fingerprint, Status: row.ResponseStatus, Body: row.ResponseBody})
	return row, true
}

// CachedResponse returns the saved response of a done key if it is in the
// replay cache. A miss says nothing: the key may still exist on disk.
func (db *DB) CachedResponse(scope, key string) (pay.Response, bool) {
	return db.cache.get(scope, key)
}

// Complete saves the response on the key the claim holds, with its charge
// if any, by the save rule (pay.SaveCompletion), in one transaction of the
// writer, and returns what was saved.
func (db *DB) Complete(ctx context.Context, c pay.Completion) (pay.Completed, error) {
	if err := db.need("payments"); err != nil {
		return pay.Completed{}, err
	}
	now := toMillis(db.now())
	var out pay.Completed
	var cache bool
	err := db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		var err error
		if out, cache, err = pay.SaveCompletion(saveTx{ctx, w, now}, c); err != nil {
			return err
		}
		if c.BeforeCommit != nil {
			return c.BeforeCommit()
		}
		return nil
	})
	// Saved or not, the request is no longer working on the key: what is
	// on disk answers from now on.
	db.held.drop(c.Scope, c.Key)
	if err != nil {
		return pay.Completed{}, err
	}
	if cache {
		db.cache.put(c.Scope, c.Key, out.Response)
	}
	return out, nil
}

// saveTx is the writer's transaction as the save rule uses it.
type saveTx struct {
	ctx context.Context
	w   *writeStatements
	now int64
}

func (tx saveTx) MarkDone(c pay.Completion) (bool, error) {
	r, err := tx.w.complete.ExecContext(tx.ctx, c.Status, string(c.Body), tx.now, c.Scope, c.Key, c.Claim)
	return err == nil && rowsAffected(r) == 1, err
}

func (tx saveTx) InsertCharge(c pay.Completion) (bool, error) {
	ch := c.Charge
	r, err := tx.w.insertCharge.ExecContext(tx.ctx, ch.ID, c.Scope, c.ChargeKeyOrKey(), ch.OrderID, ch.AmountSatang,
		ch.GatewayRef, toMillis(ch.CreatedAt))
	return err == nil && rowsAffected(r) == 1, err
}

func (tx saveTx) RecordedCharge(c pay.Completion) (pay.Charge, error) {
	return scanCharge(tx.w.selectCharge.QueryRowContext(tx.ctx, c.Scope, c.ChargeKeyOrKey()))
}

func (tx saveTx) SetBody(c pay.Completion, body []byte) error {
	_, err := tx.w.setBody.ExecContext(tx.ctx, string(body), c.Scope, c.Key)
	return err
}

func (tx saveTx) InsertDone(c pay.Completion, r pay.Response) (bool, error) {
	res, err := tx.w.insertDone.ExecContext(tx.ctx, c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID,
		c.AmountSatang, r.Status, string(r.Body), tx.now, tx.now, tx.now, c.Claim, c.ChargeKey)
	return err == nil && rowsAffected(res) == 1, err
}

func (tx saveTx) Key(c pay.Completion) (pay.KeyRow, bool, error) {
	row, err := scanKey(tx.w.selectKey.QueryRowContext(tx.ctx, c.Scope, c.Key))
	if errors.Is(err, sql.ErrNoRows) {
		return pay.KeyRow{}, false, nil
	}
	return row, err == nil, err
}

func rowsAffected(r sql.Result) int64 {
	n, _ := r.RowsAffected()
	return n
}

// Release deletes a started key held by claim, so that a retry runs
// afresh, and leaves a trace of the release (released_keys) in the same
// transaction, so that the order's look-up can say what became of it. It
// reports whether a row was deleted; done keys, and keys held by another
// claim, are never released.
func (db *DB) Release(ctx context.Context, scope, key, claim string, cause pay.ReleaseCause) (bool, error) {
	var released bool
	if err := db.need("payments"); err != nil {
		return false, err
	}
	err := db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		var order string
		err := w.release_.QueryRowContext(ctx, scope, key, claim).Scan(&order)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := w.traceRelease.ExecContext(ctx, scope, key, order, string(cause), toMillis(db.now())); err != nil {
			return err
		}
		released = true
		return nil
	})
	db.held.drop(scope, key)
	return released, err
}

// pruneBatch is how many keys one of a prune's writes deletes: about a
// millisecond of the single writer, so that a payment queued behind it
// waits no longer, whatever the number of keys to prune. With 500 a
// batch, four clients paying during a prune of a million keys measured a
// p99 four to five times the p99 they had with no prune; with 100, two to
// three times, and the prune took no longer: its commits are shared with
// the payments'.
const pruneBatch = 100

// Prune deletes done keys created before cutoff. Started keys are never
// pruned: their outcome is unknown, and only the sweeper may close them.
//
// It deletes pruneBatch keys per write, oldest first, and hands each
// batch to the writer on its own: the payments that queued meanwhile
// commit between two batches, so a prune of a million keys never holds
// the writer for more than one batch. After each batch it waits as long
// as the batch took (see pay.PacePrune), so the payments have the writer
// and the CPU to themselves half the time. It stops when ctx ends, with
// what it pruned so far. It keeps no key beyond its batch (see
// pay.Pruned).
func (db *DB) Prune(ctx context.Context, cutoff time.Time) (pay.Pruned, error) {
	var pruned pay.Pruned
	if err := db.need("payments"); err != nil {
		return pruned, err
	}
	batch := make([]pay.PrunedKey, 0, pruneBatch)
	for ctx.Err() == nil {
		t0 := time.Now()
		err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
			batch = batch[:0]
			rows, err := db.conn.QueryContext(ctx, `DELETE FROM idempotency_keys
				WHERE (scope, key) IN (SELECT scope, key FROM idempotency_keys
					WHERE status = 'done' AND created_at < ? ORDER BY created_at LIMIT ?)
				RETURNING scope, key`, toMillis(cutoff), pruneBatch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var p pay.PrunedKey
				if err := rows.Scan(&p.Scope, &p.Key); err != nil {
					return err
				}
				batch = append(batch, p)
			}
			return rows.Err()
		})
		if err != nil {
			return pruned, err
		}
		for _, p := range batch {
			db.cache.drop(p.Scope, p.Key)
		}
		pruned.Add(batch)
		if len(batch) < pruneBatch {
			return pruned, db.pruneReleases(ctx, cutoff)
		}
		if err := pay.PacePrune(ctx, time.Since(t0)); err != nil {
			return pruned, err
		}
	}
	return pruned, ctx.Err()
}

// Reset deletes every key, charge and gateway record the file holds: a
// clean slate for the next demonstration.
func (db *DB) Reset(ctx context.Context) error {
	err := db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		if db.schema.Holds("payments") {
			if _, err := db.conn.ExecContext(ctx, `DELETE FROM idempotency_keys; DELETE FROM charges; DELETE FROM released_keys;`); err != nil {
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
	db.held.clear()
	return err
}

// GetKey reads one key row.
func (db *DB) GetKey(ctx context.Context, scope, key string) (pay.KeyRow, error) {
	if err := db.need("payments"); err != nil {
		return pay.KeyRow{}, err
	}
	k, err := scanKey(db.readKey.QueryRowContext(ctx, scope, key))
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

// RenewWork makes a started key's lock time now, unless it is later
// already: the sweepers of every server writing to this file judge a key
// by its lock time, and this one's work is alive though paused. The file
// records no work deadline, so the key is kept for the sweepers' lock
// timeout from now, whatever lease says (callers pass that timeout).
func (db *DB) RenewWork(ctx context.Context, scope, key, claim string, lease time.Duration) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	now := toMillis(db.now())
	return db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		_, err := db.conn.ExecContext(ctx, `UPDATE idempotency_keys SET locked_at = MAX(locked_at, ?)
			WHERE scope = ? AND key = ? AND claim = ? AND status = 'started'`, now, scope, key, claim)
		return err
	})
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
