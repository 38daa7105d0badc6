package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"paytwice/pay"

	"github.com/jackc/pgx/v5"
)

// pruneBatchTimeout bounds one of a prune's statements, which the prune's
// own context does not cut off.
const pruneBatchTimeout = 30 * time.Second

// pruneBatch is how many keys one of a prune's statements deletes.
const pruneBatch = 500

// Prune deletes done keys created before cutoff, oldest first. Started
// keys are never pruned: their outcome is unknown, and only a sweeper may
// close them.
//
// Each statement deletes at most pruneBatch keys and commits on its own:
// a prune of a million keys is two thousand short transactions, never one
// that holds a million row locks and writes all its WAL at once, and a
// late retry of a key being pruned waits for one batch at most. Rows
// another server's prune holds are skipped (SKIP LOCKED), so several
// servers pruning at once share the work instead of queueing. After each
// batch it waits as long as the batch took (see pay.PacePrune). It stops
// when ctx ends, once the batch under way has committed, with what it
// pruned so far. It keeps no key beyond its batch (see pay.Pruned).
func (db *DB) Prune(ctx context.Context, cutoff time.Time) (pay.Pruned, error) {
	var pruned pay.Pruned
	if err := db.need("payments"); err != nil {
		return pruned, err
	}
	batch := make([]pay.PrunedKey, 0, pruneBatch)
	// Each batch starts where the last one ended (from): the entries the
	// earlier batches deleted stay in the index, dead, until a vacuum, and
	// a batch that began at the oldest key would step over all of them,
	// more with every batch.
	from := time.Time{}
	for ctx.Err() == nil {
		t0 := time.Now()
		// A batch is not cut off when ctx ends: its DELETE commits on its
		// own, and a statement cancelled after it committed would delete
		// keys that the prune never counts. ctx stops the prune between
		// batches; pruneBatchTimeout bounds one batch all the same.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pruneBatchTimeout)
		rows, err := db.pool.Query(bctx, `DELETE FROM idempotency_keys k
			USING (SELECT scope, key FROM idempotency_keys
				WHERE status = 'done' AND created_at >= $3 AND created_at < $1
				ORDER BY created_at LIMIT $2
				FOR UPDATE SKIP LOCKED) old
			WHERE k.scope = old.scope AND k.key = old.key
			RETURNING k.scope, k.key, k.created_at`, cutoff, pruneBatch, from)
		if err != nil {
			cancel()
			return pruned, err
		}
		batch = batch[:0]
		for rows.Next() {
			var p pay.PrunedKey
			var created time.Time
			if err := rows.Scan(&p.Scope, &p.Key, &created); err != nil {
				rows.Close()
				cancel()
				return pruned, err
			}
			if created.After(from) {
				from = created
			}
			batch = append(batch, p)
		}
		rows.Close()
		cancel()
		if err := rows.Err(); err != nil {
			return pruned, err
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

// ResetLockWait bounds how long a reset's TRUNCATE waits for the
// transactions under way on the tables: longer than the pool's
// ClaimLockWait, since a presenter's reset is not to be refused because a
// payment was slow (a lab's transaction may be held by a fault), but not
// for ever, since a session left open in a transaction would otherwise
// hold the reset, and the room with it.
const ResetLockWait = 15 * time.Second

// errResetLocked is a reset that waited ResetLockWait in vain.
var errResetLocked = &pay.Error{Code: pay.EUNAVAILABLE,
	Message: fmt.Sprintf("A transaction on the payment tables did not finish within %s, so they were not emptied; try the reset again.", ResetLockWait)}

// Reset deletes every key and charge, and the gateway's records when this
// store holds them: a clean slate for the next demonstration, for every
// server on the database at once.
func (db *DB) Reset(ctx context.Context) error {
	var tables []string
	if db.schema.Holds("payments") {
		tables = append(tables, "idempotency_keys", "charges", "released_keys")
	}
	if db.schema.Holds("ledger") {
		tables = append(tables, "gateway.charges")
	}
	if len(tables) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", ResetLockWait.Milliseconds())); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("TRUNCATE %s", strings.Join(tables, ", ")))
		return err
	})
	if lockWaitEnded(err) {
		return fmt.Errorf("%w (%v)", errResetLocked, err)
	}
	return err
}
