package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"paytwice/pay"
)

// This file serves the common-mistakes lab (web/lab*.go), as store/lab.go
// does on SQLite: each method lets a deliberately wrong mode do what a
// naive application would do, against the real database. The correct
// protocol never calls any of them.

// constraintError turns PostgreSQL's unique violation into
// pay.ErrConstraint, keeping PostgreSQL's own words.
func constraintError(err error) error {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %s", pay.ErrConstraint, pe.Message)
	}
	return err
}

// LabInsertKeyUnguarded inserts a started key row with a plain INSERT, no
// ON CONFLICT: the "check first, then insert" mistake with the constraints
// in place. It returns the claim's fencing token.
func (db *DB) LabInsertKeyUnguarded(ctx context.Context, c pay.ClaimRequest) (string, error) {
	if err := db.need("payments"); err != nil {
		return "", err
	}
	token := pay.NewToken()
	_, err := db.pool.Exec(ctx, `INSERT INTO idempotency_keys
		(scope, key, method, path, fingerprint, order_id, amount_satang, status, created_at, locked_at, claim, charge_key,
		 claimed_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'started', $8, $8, $9, $10, $11)`,
		c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID, c.AmountSatang, db.now(), token, c.ChargeKey, db.server)
	if err != nil {
		return "", constraintError(err)
	}
	return token, nil
}

// LabRecordCharge inserts a charge under ch.Key with no key row at all:
// the "no idempotency key" mistake. ch.Key must start with
// pay.LabKeyPrefix.
func (db *DB) LabRecordCharge(ctx context.Context, ch pay.Charge) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	if !strings.HasPrefix(ch.Key, pay.LabKeyPrefix) {
		return fmt.Errorf("postgres: lab charge key %q lacks the lab prefix", ch.Key)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO charges (`+chargeColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		ch.ID, ch.Scope, ch.Key, ch.OrderID, ch.AmountSatang, ch.GatewayRef, ch.CreatedAt)
	return constraintError(err)
}

// LabLooseFindKey is the "check" of check-then-insert, outside any
// transaction. Of several rows for the key it prefers a done one, then
// the oldest.
func (db *DB) LabLooseFindKey(ctx context.Context, scope, key string) (pay.LabLooseKey, bool, error) {
	var k pay.LabLooseKey
	var status *int32
	err := db.pool.QueryRow(ctx, `SELECT id, scope, key, fingerprint, order_id, amount_satang, status,
		response_status, response_body, request, created_at
		FROM lab_loose_keys WHERE scope = $1 AND key = $2 ORDER BY status = 'done' DESC, id LIMIT 1`, scope, key).
		Scan(&k.RowID, &k.Scope, &k.Key, &k.Fingerprint, &k.OrderID, &k.AmountSatang, &k.Status,
			&status, &k.ResponseBody, &k.Request, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, false, nil
	}
	if err != nil {
		return k, false, err
	}
	if status != nil {
		k.ResponseStatus = int(*status)
	}
	k.CreatedAt = k.CreatedAt.UTC()
	return k, true, nil
}

// LabLooseInsertKey is the "insert" of check-then-insert on the table
// without constraints: it always succeeds, and returns the new row's id
// and how many rows the key has now.
func (db *DB) LabLooseInsertKey(ctx context.Context, c pay.ClaimRequest, request string) (rowID int64, rows int, err error) {
	if err := db.need("payments"); err != nil {
		return 0, 0, err
	}
	if err := db.pool.QueryRow(ctx, `INSERT INTO lab_loose_keys
		(scope, key, fingerprint, order_id, amount_satang, status, request, created_at)
		VALUES ($1, $2, $3, $4, $5, 'started', $6, $7) RETURNING id`,
		c.Scope, c.Key, c.Fingerprint, c.OrderID, c.AmountSatang, request, db.now()).Scan(&rowID); err != nil {
		return 0, 0, err
	}
	err = db.pool.QueryRow(ctx, `SELECT count(*) FROM lab_loose_keys WHERE scope = $1 AND key = $2`, c.Scope, c.Key).Scan(&rows)
	return rowID, rows, err
}

// LabLooseRelease deletes one loose key row while it is still started:
// its request stopped before it called the gateway.
func (db *DB) LabLooseRelease(ctx context.Context, rowID int64) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	_, err := db.pool.Exec(ctx, `DELETE FROM lab_loose_keys WHERE id = $1 AND status = 'started'`, rowID)
	return err
}

// LabLooseComplete marks one loose key row done and records its charge in
// lab_loose_charges, in one transaction, and returns how many charges the
// key has now.
func (db *DB) LabLooseComplete(ctx context.Context, rowID int64, status int, body []byte, ch *pay.Charge, request string) (charges int, err error) {
	if err := db.need("payments"); err != nil {
		return 0, err
	}
	now := db.now()
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE lab_loose_keys SET status = 'done', response_status = $1, response_body = $2
			WHERE id = $3`, status, body, rowID); err != nil {
			return err
		}
		if ch == nil {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO lab_loose_charges
			(id, scope, idempotency_key, order_id, amount_satang, gateway_ref, request, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, ch.ID, ch.Scope, ch.Key, ch.OrderID, ch.AmountSatang, ch.GatewayRef,
			request, now); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM lab_loose_charges WHERE scope = $1 AND idempotency_key = $2`,
			ch.Scope, ch.Key).Scan(&charges)
	})
	return charges, err
}

// LabLooseCharges lists the charges of the unguarded table, oldest first.
func (db *DB) LabLooseCharges(ctx context.Context) ([]pay.Charge, error) {
	return db.queryCharges(ctx, `SELECT `+chargeColumns+` FROM lab_loose_charges ORDER BY created_at, seq`)
}

// LabReset empties the lab's own tables.
func (db *DB) LabReset(ctx context.Context) error {
	if !db.schema.Holds("payments") {
		return nil
	}
	_, err := db.pool.Exec(ctx, `TRUNCATE lab_loose_keys, lab_loose_charges`)
	return err
}

// labMaxGroups bounds each list of LabMeasure.
const labMaxGroups = 500

// LabMeasure reads, for the lab, how many times each order or key was
// charged.
func (db *DB) LabMeasure(ctx context.Context) (pay.LabChargeGroups, error) {
	var g pay.LabChargeGroups
	if !db.schema.Holds("payments") {
		return g, nil
	}
	byOrder := func(prefix string) ([]pay.LabGroup, error) {
		return db.labGroups(ctx, `SELECT scope, order_id, '', count(*), count(DISTINCT idempotency_key), false
			FROM charges WHERE starts_with(idempotency_key, $1) GROUP BY scope, order_id ORDER BY min(created_at) LIMIT $2`,
			prefix, labMaxGroups)
	}
	var err error
	if g.NoKey, err = byOrder(pay.LabKeyPrefix + "no-key "); err != nil {
		return g, err
	}
	if g.KeyOnly, err = byOrder(pay.LabKeyPrefix + "key-table-only "); err != nil {
		return g, err
	}
	if g.Loose, err = db.labGroups(ctx, `SELECT scope, min(order_id), idempotency_key, count(*), 1, false
		FROM lab_loose_charges GROUP BY scope, idempotency_key ORDER BY min(created_at) LIMIT $1`, labMaxGroups); err != nil {
		return g, err
	}
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM lab_loose_keys WHERE NOT starts_with(key, $1)`,
		pay.LabKeyPrefix).Scan(&g.LooseKeyRows); err != nil {
		return g, err
	}
	g.ManyKeys, err = db.labGroups(ctx, `SELECT c.scope, c.order_id, '', count(*), count(DISTINCT c.idempotency_key),
		coalesce(bool_or(k.response_status = 500), false)
		FROM charges c LEFT JOIN idempotency_keys k ON k.scope = c.scope AND k.key = c.idempotency_key
		WHERE NOT starts_with(c.idempotency_key, $1)
		GROUP BY c.scope, c.order_id HAVING count(DISTINCT c.idempotency_key) > 1 ORDER BY min(c.created_at) LIMIT $2`,
		pay.LabKeyPrefix, labMaxGroups)
	return g, err
}

// LabRows calls fn with every charge of both charge tables and every row
// of the unguarded key table, for the lab's running counts. It reads the
// whole tables: the server calls it at start-up and after a reset or a
// prune, not per request.
func (db *DB) LabRows(ctx context.Context, fn func(pay.LabRow)) error {
	if !db.schema.Holds("payments") {
		return nil
	}
	type source struct {
		table pay.LabTable
		query string
	}
	for _, src := range []source{
		{pay.LabCharges, labChargeRows},
		{pay.LabLooseCharges, `SELECT id, scope, idempotency_key, order_id, created_at, false FROM lab_loose_charges`},
		{pay.LabLooseKeys, `SELECT id::text, scope, key, order_id, created_at, false FROM lab_loose_keys`},
	} {
		if err := db.forEachLabRow(ctx, src.table, fn, src.query); err != nil {
			return err
		}
	}
	return nil
}

// labChargeRows reads the charges table as lab rows: each charge with
// whether its key saved a 500.
const labChargeRows = `SELECT c.id, c.scope, c.idempotency_key, c.order_id, c.created_at, coalesce(k.response_status = 500, false)
	FROM charges c LEFT JOIN idempotency_keys k ON k.scope = c.scope AND k.key = c.idempotency_key`

// forEachLabRow calls fn with each row of query (id, scope, key, order
// id, time, saved 500) as a row of table.
func (db *DB) forEachLabRow(ctx context.Context, table pay.LabTable, fn func(pay.LabRow), query string, args ...any) error {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	r := pay.LabRow{Table: table}
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Scope, &r.Key, &r.OrderID, &r.CreatedAt, &r.Saved500}, func() error {
		r.CreatedAt = r.CreatedAt.UTC()
		fn(r)
		return nil
	})
	return err
}

// LabOrderRows calls fn with the charges of one order in the charges
// table, as LabRows reads them: the lab's counts read back an order they
// dropped from memory when it is charged again (by the (scope, order_id)
// index).
func (db *DB) LabOrderRows(ctx context.Context, scope, orderID string, fn func(pay.LabRow)) error {
	if !db.schema.Holds("payments") {
		return nil
	}
	return db.forEachLabRow(ctx, pay.LabCharges, fn, labChargeRows+`
	WHERE c.scope = $1 AND c.order_id = $2`, scope, orderID)
}

func (db *DB) labGroups(ctx context.Context, query string, args ...any) ([]pay.LabGroup, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pay.LabGroup
	for rows.Next() {
		var lg pay.LabGroup
		if err := rows.Scan(&lg.Scope, &lg.OrderID, &lg.Key, &lg.Charges, &lg.Keys, &lg.Saved500); err != nil {
			return nil, err
		}
		out = append(out, lg)
	}
	return out, rows.Err()
}

// labScanLimit bounds how many rows of each table LabScanKeys reads.
const labScanLimit = 2_000

// LabScanKeys calls fn with every idempotency key stored in this store's
// tables (the newest labScanLimit of each) and the table it is in. The
// key table's newest are found through its index by status and time and
// the charge table's through its index by time; the lab's loose charges
// and the gateway's records, which have none, are read whole and their
// newest kept. The lab asks again only when the tables may hold more or
// fewer keys of personal data than it found (web/lab_outcomes.go), not
// after every payment.
func (db *DB) LabScanKeys(ctx context.Context, fn func(where, key string)) error {
	type source struct{ where, query string }
	var sources []source
	if db.schema.Holds("payments") {
		sources = append(sources,
			source{pay.WhereKeyTable, newestKeysSQL("key")},
			source{pay.WhereCharges, `SELECT idempotency_key FROM charges ORDER BY created_at DESC LIMIT $1`},
			source{pay.WhereCharges, `SELECT idempotency_key FROM lab_loose_charges ORDER BY created_at DESC LIMIT $1`})
	}
	if db.schema.Holds("ledger") {
		sources = append(sources, source{pay.WhereGateway, `SELECT key FROM gateway.charges ORDER BY created_at DESC LIMIT $1`})
	}
	for _, src := range sources {
		rows, err := db.pool.Query(ctx, src.query, labScanLimit)
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, k := range keys {
			fn(src.where, k)
		}
	}
	return nil
}

// ForgetCachedResponses does nothing: this store keeps no replay cache.
func (db *DB) ForgetCachedResponses() {}
