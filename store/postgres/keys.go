package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
)

// A statement that acts on one key through its claim says the key must
// be started as status <> 'done', which the status's type (two values)
// makes the same thing: written status = 'started', it matches the index
// of keys by status, and PostgreSQL's planner, which expects few started
// keys, may scan all of them, dead entries included, and filter by key,
// instead of looking the key up in the primary key. With the partial
// index of started keys that an earlier schema had, at 16 clients, that
// read about a hundred index entries per save.
const keyColumns = `scope, key, method, path, fingerprint, order_id, amount_satang, status,
	response_status, response_body, created_at, locked_at, completed_at, claim, charge_key`

func scanKey(r pgx.Row) (pay.KeyRow, error) {
	var m maybeKey
	if err := r.Scan(m.dest()...); err != nil {
		return pay.KeyRow{}, err
	}
	k, _ := m.row() // every column but the answer's is NOT NULL
	return k, nil
}

const chargeColumns = `id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at`

func scanCharge(r pgx.Row) (pay.Charge, error) {
	var c pay.Charge
	err := r.Scan(&c.ID, &c.Scope, &c.Key, &c.OrderID, &c.AmountSatang, &c.GatewayRef, &c.CreatedAt)
	c.CreatedAt = c.CreatedAt.UTC()
	return c, err
}

// CachedResponse always misses: a replay reads the key's row. Servers
// that share the database do not share a process's memory, so a cache
// here would go on replaying keys that another server pruned or reset.
func (db *DB) CachedResponse(scope, key string) (pay.Response, bool) { return pay.Response{}, false }

// sweepBatch bounds how many started keys one call of StartedBefore takes.
const sweepBatch = 500

// StartedBefore returns the started keys locked before cutoff, oldest
// first: the sweeper's candidates. Every server runs a sweeper, so the
// selection also takes the keys for this server: it skips the rows
// another server is selecting at this moment (FOR UPDATE SKIP LOCKED) and
// the ones another server's sweeper took less than the sweep lease ago,
// and marks the rest as this server's. Two servers therefore never close
// the same key; and if one did anyway (a lease outlived by a slow
// gateway), the fencing token would let only the first close count.
// Keys are found by created_at, which equals locked_at in every row, in
// the index of keys by status and creation time.
//
// Taking a key changes neither its claim nor its lock time: a request
// still running on this server keeps its key, and a key this server
// passes over is left to it for the lease, then to anyone.
//
// The cutoff is on this server's demo clock, which a presenter may warp,
// and the sweeper only knows which of its own claims are still running.
// So a key claimed here is judged by the cutoff, but a key another server
// claimed is taken only once it has really (on the database's clock) been
// held for as long as the cutoff asks, however far any demo clock has
// moved, and once the work deadline its claim recorded (work_until) has
// passed on that clock too: a request's work is bounded by the gateway
// time-out, shorter than the lock timeout, except while step mode holds
// it, which may last minutes; past both, the key has no live request left.
//
// A key whose claim names a life that has ended (life.go) is taken at
// once, whatever its age, lease or sweep lease: nobody is working on it
// any more. That is looked at only once PostgreSQL itself has been up for
// lifeSettle, so that servers that lost their life connections to a
// database restart have reconnected them.
func (db *DB) StartedBefore(ctx context.Context, cutoff time.Time) ([]pay.KeyRow, error) {
	held := max(db.now().Sub(cutoff), 0)
	rows, err := db.pool.Query(ctx, `WITH settled AS (
			SELECT pg_postmaster_start_time() < clock_timestamp() - $7 * interval '1 millisecond' AS yes)
		UPDATE idempotency_keys k
		SET sweep_owner = $2, sweep_until = clock_timestamp() + $3 * interval '1 millisecond'
		FROM (SELECT scope, key FROM idempotency_keys, settled
			WHERE status = 'started'
			  AND ((created_at < $1
			        AND (claimed_by = $2 OR (claimed_at < clock_timestamp() - $5 * interval '1 millisecond'
			             AND (work_until IS NULL OR work_until < clock_timestamp())))
			        AND (sweep_owner IS NULL OR sweep_owner = $2 OR sweep_until < clock_timestamp()))
			    OR (settled.yes AND claimed_by <> $2 AND `+lifeEnded("claimed_by", "$6")+`
			        AND (sweep_owner IS NULL OR sweep_owner = $2 OR sweep_until < clock_timestamp() OR `+lifeEnded("sweep_owner", "$6")+`)))
			ORDER BY created_at, key
			LIMIT $4
			FOR UPDATE OF idempotency_keys SKIP LOCKED) pick
		WHERE k.scope = pick.scope AND k.key = pick.key
		RETURNING `+prefixed("k.", keyColumns),
		cutoff, db.server, db.lease.Milliseconds(), sweepBatch, held.Milliseconds(), lifePrefix, lifeSettle.Milliseconds())
	if err != nil {
		return nil, err
	}
	keys, err := collectKeys(rows)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(keys, func(a, b pay.KeyRow) int {
		if c := a.LockedAt.Compare(b.LockedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return keys, nil
}

// prefixed qualifies every column of a column list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func collectKeys(rows pgx.Rows) ([]pay.KeyRow, error) {
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

// GetKey reads one key row.
func (db *DB) GetKey(ctx context.Context, scope, key string) (pay.KeyRow, error) {
	k, err := scanKey(db.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = $1 AND key = $2`, scope, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return k, pay.Errorf(pay.ENOTFOUND, "No idempotency key %q in this scope.", key)
	}
	return k, err
}

// RecentKeys returns up to limit keys, newest first (by created_at, which
// equals locked_at in this store, then key), read by newestKeysSQL.
func (db *DB) RecentKeys(ctx context.Context, limit int) ([]pay.KeyRow, error) {
	rows, err := db.pool.Query(ctx, recentKeysSQL, limit)
	if err != nil {
		return nil, err
	}
	return collectKeys(rows)
}

// KeyCounts counts the key rows by status.
func (db *DB) KeyCounts(ctx context.Context) (started, done int, err error) {
	err = db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'started'), count(*) FILTER (WHERE status = 'done')
		FROM idempotency_keys`).Scan(&started, &done)
	return started, done, err
}

// GetCharge reads one charge of a scope by its id. Another scope's charge
// is reported as not found.
func (db *DB) GetCharge(ctx context.Context, scope, id string) (pay.Charge, error) {
	c, err := scanCharge(db.pool.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges WHERE id = $1 AND scope = $2`, id, scope))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, pay.Errorf(pay.ENOTFOUND, "No charge %q.", id)
	}
	return c, err
}

func (db *DB) queryCharges(ctx context.Context, query string, args ...any) ([]pay.Charge, error) {
	rows, err := db.pool.Query(ctx, query, args...)
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

// ChargesByOrder lists a scope's charges for one order, oldest first,
// with those of the lab's unguarded table: a charge one of its mistakes
// made is a charge the customer paid.
func (db *DB) ChargesByOrder(ctx context.Context, scope, orderID string) ([]pay.Charge, error) {
	return db.queryCharges(ctx, `SELECT `+chargeColumns+` FROM charges WHERE scope = $1 AND order_id = $2
		UNION ALL SELECT `+chargeColumns+` FROM lab_loose_charges WHERE scope = $1 AND order_id = $2
		ORDER BY created_at, id`, scope, orderID)
}

// RecentCharges returns up to limit charges of every scope, newest first,
// through the index of charges by time: the live pages' model asks for
// them each time it loads, which under load is often (see migration 010).
func (db *DB) RecentCharges(ctx context.Context, limit int) ([]pay.Charge, error) {
	return db.queryCharges(ctx, recentChargesSQL, limit)
}

// recentChargesSQL reads the newest $1 charges.
const recentChargesSQL = `SELECT ` + chargeColumns + ` FROM charges ORDER BY created_at DESC, id DESC LIMIT $1`

// CountCharges counts every charge.
func (db *DB) CountCharges(ctx context.Context) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n)
	return n, err
}

// newestKeysSQL selects columns of the newest $1 keys, newest first:
// the newest of each status through the index of keys by status and
// creation time, then the newest of both.
func newestKeysSQL(columns string) string {
	return `SELECT ` + columns + ` FROM (
			(SELECT * FROM idempotency_keys WHERE status = 'started' ORDER BY created_at DESC, key LIMIT $1)
			UNION ALL
			(SELECT * FROM idempotency_keys WHERE status = 'done' ORDER BY created_at DESC, key LIMIT $1)
		) recent ORDER BY created_at DESC, key LIMIT $1`
}

// recentKeysSQL reads the newest $1 key rows (RecentKeys).
var recentKeysSQL = newestKeysSQL(keyColumns)
