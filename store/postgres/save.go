package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"paytwice/pay"
)

// Complete saves the response on the key the claim holds, with its charge
// if any, by the save rule (pay.SaveCompletion), in one transaction, and
// returns what was saved.
//
// A save waits for the locks it needs for as long as they are held: the
// gateway has answered, and what it did must be recorded. The lock waits
// of the store's connections end at ClaimLockWait, with nothing written,
// so a save whose wait ended so is tried again, until it is saved, fails
// otherwise, or ctx ends. Trying again is safe: the save acts through the
// claim's token, and tells its own charge from one recorded before it by
// the charge's id.
func (db *DB) Complete(ctx context.Context, c pay.Completion) (pay.Completed, error) {
	if err := db.need("payments"); err != nil {
		return pay.Completed{}, err
	}
	now := db.now()
	for {
		out, err := db.complete(ctx, c, now)
		if !lockWaitEnded(err) || ctx.Err() != nil {
			return out, err
		}
	}
}

// lockWaitEnded reports whether err is a statement's lock wait ended by
// lock_timeout (55P03), which leaves nothing of the statement's
// transaction.
func lockWaitEnded(err error) bool {
	return sqlState(err) == "55P03"
}

// sqlState is the SQLSTATE of the PostgreSQL error in err's chain, or ""
// when there is none. It allocates nothing, unlike errors.As with a
// pointer of the caller's, which escapes: it is asked of every claim's
// and every save's error, nil nearly always.
func sqlState(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// complete is one try of Complete.
func (db *DB) complete(ctx context.Context, c pay.Completion, now time.Time) (pay.Completed, error) {
	// The usual save is one statement, which commits on its own: the
	// charge inserted and the key, named by its fencing token, marked
	// done. A fault that must act before the commit needs a transaction.
	var done *fastSave
	if c.BeforeCommit == nil {
		f, err := db.saveFast(ctx, c, now)
		if err != nil {
			return pay.Completed{}, err
		}
		if f.marked {
			return pay.Completed{Response: pay.Response{Fingerprint: c.Fingerprint, Status: c.Status, Body: c.Body}}, nil
		}
		done = &f
	}
	// Something was not as usual (the claim was lost, or the charge was
	// already recorded): the save rule decides, in a transaction, knowing
	// what the single statement did.
	var out pay.Completed
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var err error
		if out, _, err = pay.SaveCompletion(saveTx{ctx, tx, now, done}, c); err != nil {
			return err
		}
		if c.BeforeCommit != nil {
			return c.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		return pay.Completed{}, err
	}
	return out, nil
}

// fastSave is what the single statement of a save did.
type fastSave struct {
	inserted bool // the charge was inserted
	marked   bool // the key was marked done (only ever with the charge inserted, when there is one)
}

// saveFast inserts c's charge, if any, and marks the key done through its
// claim only if the charge was inserted: one statement, so both or the
// charge alone are committed, never the key without its charge.
func (db *DB) saveFast(ctx context.Context, c pay.Completion, now time.Time) (fastSave, error) {
	if c.Charge == nil {
		tag, err := db.pool.Exec(ctx, `UPDATE idempotency_keys
			SET status = 'done', response_status = $1, response_body = $2, completed_at = $3
			WHERE scope = $4 AND key = $5 AND claim = $6 AND status <> 'done'`,
			c.Status, c.Body, now, c.Scope, c.Key, c.Claim)
		return fastSave{marked: err == nil && tag.RowsAffected() == 1}, err
	}
	ch := c.Charge
	rows := 0
	_, err := db.direct(ctx, saveStatement, func(a *args) {
		a.int(int64(c.Status)).bytes(c.Body).time(now).text(c.Scope).text(c.Key).text(c.Claim).
			text(ch.ID).text(c.ChargeKeyOrKey()).text(ch.OrderID).int(ch.AmountSatang).text(ch.GatewayRef).time(ch.CreatedAt)
	}, func(r directRow) error {
		rows++
		return nil
	})
	switch {
	case err != nil:
		return fastSave{}, err
	case rows == 1:
		return fastSave{inserted: true, marked: true}, nil
	}
	// The key was not marked: either the charge was recorded already (by
	// the sweeper, or an earlier try), or the claim was lost after the
	// charge went in. Which one, the charge's id tells: this completion's
	// own is new.
	var id string
	err = db.pool.QueryRow(ctx, `SELECT id FROM charges WHERE scope = $1 AND idempotency_key = $2`,
		c.Scope, c.ChargeKeyOrKey()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fastSave{}, nil // deleted since (a reset)
	}
	return fastSave{inserted: err == nil && id == ch.ID}, err
}

// saveStatement is the usual save, one statement: the charge inserted
// and the key, named by its fencing token, marked done only if the
// charge was inserted. It returns a row when the key was marked. The
// UPDATE is the statement itself, not a third part beside two CTEs whose
// results are selected: a plan with fewer parts to prepare at every
// execution, about a twelfth less of PostgreSQL's CPU for a claim and a
// save (pgbench, prepared statements); what the charge's insert did is
// read afterwards when the key was not marked, which is rare.
var saveStatement = statement{name: "paytwice_save", sql: `WITH ins AS (
			INSERT INTO charges (` + chargeColumns + `)
			VALUES ($7, $4, $8, $9, $10, $11, $12) ON CONFLICT (scope, idempotency_key) DO NOTHING RETURNING 1
		)
		UPDATE idempotency_keys
		SET status = 'done', response_status = $1, response_body = $2, completed_at = $3
		WHERE scope = $4 AND key = $5 AND claim = $6 AND status <> 'done' AND EXISTS (SELECT 1 FROM ins)
		RETURNING 1`}

// saveTx is a transaction as the save rule uses it. fast, when set, is
// what the single statement already did: its steps are not done again.
type saveTx struct {
	ctx  context.Context
	tx   pgx.Tx
	now  time.Time
	fast *fastSave
}

func (t saveTx) MarkDone(c pay.Completion) (bool, error) {
	if t.fast != nil && (c.Charge == nil || t.fast.inserted) {
		// Tried, with the charge inserted: the claim is lost.
		return t.fast.marked, nil
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE idempotency_keys
		SET status = 'done', response_status = $1, response_body = $2, completed_at = $3
		WHERE scope = $4 AND key = $5 AND claim = $6 AND status <> 'done'`,
		c.Status, c.Body, t.now, c.Scope, c.Key, c.Claim)
	return err == nil && tag.RowsAffected() == 1, err
}

func (t saveTx) InsertCharge(c pay.Completion) (bool, error) {
	if t.fast != nil && t.fast.inserted {
		return true, nil
	}
	ch := c.Charge
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO charges (`+chargeColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (scope, idempotency_key) DO NOTHING`,
		ch.ID, c.Scope, c.ChargeKeyOrKey(), ch.OrderID, ch.AmountSatang, ch.GatewayRef, ch.CreatedAt)
	return err == nil && tag.RowsAffected() == 1, err
}

func (t saveTx) RecordedCharge(c pay.Completion) (pay.Charge, error) {
	return scanCharge(t.tx.QueryRow(t.ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE scope = $1 AND idempotency_key = $2`, c.Scope, c.ChargeKeyOrKey()))
}

func (t saveTx) SetBody(c pay.Completion, body []byte) error {
	_, err := t.tx.Exec(t.ctx, `UPDATE idempotency_keys SET response_body = $1 WHERE scope = $2 AND key = $3`,
		body, c.Scope, c.Key)
	return err
}

func (t saveTx) InsertDone(c pay.Completion, r pay.Response) (bool, error) {
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO idempotency_keys
		(scope, key, method, path, fingerprint, order_id, amount_satang, status, response_status, response_body,
		 created_at, locked_at, completed_at, claim, charge_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'done', $8, $9, $10, $10, $10, $11, $12)
		ON CONFLICT (scope, key) DO NOTHING`,
		c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID, c.AmountSatang, r.Status, r.Body, t.now, c.Claim, c.ChargeKey)
	return err == nil && tag.RowsAffected() == 1, err
}

func (t saveTx) Key(c pay.Completion) (pay.KeyRow, bool, error) {
	row, err := scanKey(t.tx.QueryRow(t.ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = $1 AND key = $2`, c.Scope, c.Key))
	if errors.Is(err, pgx.ErrNoRows) {
		return pay.KeyRow{}, false, nil
	}
	return row, err == nil, err
}

// Release deletes a started key held by claim, so that a retry runs
// afresh, and leaves a trace of the release (released_keys) in the same
// statement, so that the order's look-up can say what became of it. It
// reports whether a row was deleted; done keys, and keys held by another
// claim, are never released.
func (db *DB) Release(ctx context.Context, scope, key, claim string, cause pay.ReleaseCause) (bool, error) {
	if err := db.need("payments"); err != nil {
		return false, err
	}
	tag, err := db.pool.Exec(ctx, `WITH gone AS (DELETE FROM idempotency_keys
			WHERE scope = $1 AND key = $2 AND claim = $3 AND status <> 'done'
			RETURNING scope, key, order_id)
		INSERT INTO released_keys (scope, key, order_id, cause, released_at)
		SELECT scope, key, order_id, $4, $5 FROM gone
		ON CONFLICT (scope, key) DO UPDATE SET order_id = excluded.order_id, cause = excluded.cause, released_at = excluded.released_at`,
		scope, key, claim, string(cause), db.now())
	return err == nil && tag.RowsAffected() == 1, err
}

// RenewWork makes a started key's work deadline (work_until) lease from
// now on the database's clock, unless it is later already: another
// server's sweeper leaves the key alone until that deadline has passed,
// and a server that stops renewing (it died) leaves its key free soon
// after.
func (db *DB) RenewWork(ctx context.Context, scope, key, claim string, lease time.Duration) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	_, err := db.pool.Exec(ctx, `UPDATE idempotency_keys
		SET work_until = GREATEST(work_until, clock_timestamp() + $4 * interval '1 millisecond')
		WHERE scope = $1 AND key = $2 AND claim = $3 AND status <> 'done'`, scope, key, claim, lease.Milliseconds())
	return err
}
