package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"

	"paytwice/pay"
)

// This file serves the common-mistakes lab (web/lab*.go). Each method
// exists so that a deliberately wrong mode of the payments endpoint can do
// exactly what a naive application would do, against the real file, so
// that the failure the lab shows is a real one. The correct protocol
// (keys.go) never calls any of them.

// constraintError turns SQLite's constraint failure into pay.ErrConstraint,
// keeping SQLite's own words.
func constraintError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == 19 { // SQLITE_CONSTRAINT and its extended codes
		msg := se.Error()
		if i := strings.Index(msg, "UNIQUE constraint failed"); i >= 0 {
			msg = msg[i:]
		}
		return fmt.Errorf("%w: %s", pay.ErrConstraint, msg)
	}
	return err
}

// LabInsertKeyUnguarded inserts a started key row with a plain INSERT, no
// ON CONFLICT: the "check first, then insert" mistake with the constraints
// in place. When another request inserted the key since the caller looked,
// the table's primary key refuses the row and the error wraps
// pay.ErrConstraint. It returns the claim's fencing token.
func (db *DB) LabInsertKeyUnguarded(ctx context.Context, c pay.ClaimRequest) (string, error) {
	if err := db.need("payments"); err != nil {
		return "", err
	}
	now := toMillis(db.now())
	token := pay.NewToken()
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		_, err := db.conn.ExecContext(ctx, `INSERT INTO idempotency_keys
			(scope, key, method, path, fingerprint, order_id, amount_satang, status, created_at, locked_at, claim, charge_key)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'started', ?, ?, ?, ?)`,
			c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID, c.AmountSatang, now, now, token, c.ChargeKey)
		return err
	})
	if err != nil {
		return "", constraintError(err)
	}
	return token, nil
}

// LabRecordCharge inserts a charge under ch.Key with no key row at all:
// the "no idempotency key" mistake. ch.Key must start with pay.LabKeyPrefix
// and be new, as the lab makes one per request.
func (db *DB) LabRecordCharge(ctx context.Context, ch pay.Charge) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	if !strings.HasPrefix(ch.Key, pay.LabKeyPrefix) {
		return fmt.Errorf("store: lab charge key %q lacks the lab prefix", ch.Key)
	}
	err := db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		_, err := w.insertCharge.ExecContext(ctx, ch.ID, ch.Scope, ch.Key, ch.OrderID, ch.AmountSatang,
			ch.GatewayRef, toMillis(ch.CreatedAt))
		return err
	})
	return constraintError(err)
}

// LabLooseFindKey is the "check" of check-then-insert: a SELECT on the read
// pool, outside any write transaction, as an application would run it.
// Of several rows for the key (which this table allows) it prefers a done
// one, then the oldest.
func (db *DB) LabLooseFindKey(ctx context.Context, scope, key string) (pay.LabLooseKey, bool, error) {
	var k pay.LabLooseKey
	var status sql.NullInt64
	var body []byte
	var created int64
	err := db.read.QueryRowContext(ctx, `SELECT rowid, scope, key, fingerprint, order_id, amount_satang, status,
		response_status, response_body, request, created_at
		FROM lab_loose_keys WHERE scope = ? AND key = ? ORDER BY status = 'done' DESC, rowid LIMIT 1`, scope, key).
		Scan(&k.RowID, &k.Scope, &k.Key, &k.Fingerprint, &k.OrderID, &k.AmountSatang, &k.Status,
			&status, &body, &k.Request, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return k, false, nil
	}
	if err != nil {
		return k, false, err
	}
	k.ResponseStatus, k.ResponseBody, k.CreatedAt = int(status.Int64), body, fromMillis(created)
	return k, true, nil
}

// LabLooseInsertKey is the "insert" of check-then-insert on the table
// without constraints: it always succeeds, however many rows the key
// already has, and returns the new row's id and how many rows the key has
// now.
func (db *DB) LabLooseInsertKey(ctx context.Context, c pay.ClaimRequest, request string) (rowID int64, rows int, err error) {
	if err := db.need("payments"); err != nil {
		return 0, 0, err
	}
	now := toMillis(db.now())
	err = db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		if err := db.conn.QueryRowContext(ctx, `INSERT INTO lab_loose_keys
			(scope, key, fingerprint, order_id, amount_satang, status, request, created_at)
			VALUES (?, ?, ?, ?, ?, 'started', ?, ?) RETURNING rowid`,
			c.Scope, c.Key, c.Fingerprint, c.OrderID, c.AmountSatang, request, now).Scan(&rowID); err != nil {
			return err
		}
		return db.conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM lab_loose_keys WHERE scope = ? AND key = ?`,
			c.Scope, c.Key).Scan(&rows)
	})
	return rowID, rows, err
}

// LabLooseRelease deletes one loose key row while it is still started:
// its request stopped before it called the gateway.
func (db *DB) LabLooseRelease(ctx context.Context, rowID int64) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return db.exec(ctx, func(ctx context.Context, w *writeStatements) error {
		_, err := db.conn.ExecContext(ctx, `DELETE FROM lab_loose_keys WHERE rowid = ? AND status = 'started'`, rowID)
		return err
	})
}

// LabLooseComplete marks one loose key row done with its response and
// records its charge in lab_loose_charges, in one transaction. It returns
// how many charges the key has now.
func (db *DB) LabLooseComplete(ctx context.Context, rowID int64, status int, body []byte, ch *pay.Charge, request string) (charges int, err error) {
	if err := db.need("payments"); err != nil {
		return 0, err
	}
	now := toMillis(db.now())
	err = db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		if _, err := db.conn.ExecContext(ctx, `UPDATE lab_loose_keys SET status = 'done', response_status = ?, response_body = ?
			WHERE rowid = ?`, status, string(body), rowID); err != nil {
			return err
		}
		if ch == nil {
			return nil
		}
		if _, err := db.conn.ExecContext(ctx, `INSERT INTO lab_loose_charges
			(id, scope, idempotency_key, order_id, amount_satang, gateway_ref, request, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, ch.ID, ch.Scope, ch.Key, ch.OrderID, ch.AmountSatang, ch.GatewayRef,
			request, now); err != nil {
			return err
		}
		return db.conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM lab_loose_charges WHERE scope = ? AND idempotency_key = ?`,
			ch.Scope, ch.Key).Scan(&charges)
	})
	return charges, err
}

// LabLooseCharges lists the charges of the unguarded table, oldest first.
func (db *DB) LabLooseCharges(ctx context.Context) ([]pay.Charge, error) {
	return db.queryCharges(ctx, `SELECT id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at
		FROM lab_loose_charges ORDER BY created_at, rowid`)
}

// LabReset empties the lab's own tables. The key and charge tables are
// Reset's.
func (db *DB) LabReset(ctx context.Context) error {
	if !db.schema.Holds("payments") {
		return nil
	}
	return db.execAtomic(ctx, func(ctx context.Context, w *writeStatements) error {
		_, err := db.conn.ExecContext(ctx, `DELETE FROM lab_loose_keys; DELETE FROM lab_loose_charges;`)
		return err
	})
}

// labMaxGroups bounds each list: a demonstration has a few dozen orders.
const labMaxGroups = 500

// LabMeasure reads, for the lab, how many times each order or key was
// charged.
func (db *DB) LabMeasure(ctx context.Context) (pay.LabChargeGroups, error) {
	var g pay.LabChargeGroups
	if !db.schema.Holds("payments") {
		return g, nil
	}
	byOrder := func(prefix string) ([]pay.LabGroup, error) {
		return db.labGroups(ctx, `SELECT scope, order_id, '', COUNT(*), COUNT(DISTINCT idempotency_key), 0
			FROM charges WHERE substr(idempotency_key, 1, ?) = ? GROUP BY scope, order_id ORDER BY MIN(created_at) LIMIT ?`,
			len(prefix), prefix, labMaxGroups)
	}
	var err error
	if g.NoKey, err = byOrder(pay.LabKeyPrefix + "no-key "); err != nil {
		return g, err
	}
	if g.KeyOnly, err = byOrder(pay.LabKeyPrefix + "key-table-only "); err != nil {
		return g, err
	}
	if g.Loose, err = db.labGroups(ctx, `SELECT scope, order_id, idempotency_key, COUNT(*), 1, 0
		FROM lab_loose_charges GROUP BY scope, idempotency_key ORDER BY MIN(created_at) LIMIT ?`, labMaxGroups); err != nil {
		return g, err
	}
	if err := db.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM lab_loose_keys WHERE substr(key, 1, ?) <> ?`,
		len(pay.LabKeyPrefix), pay.LabKeyPrefix).Scan(&g.LooseKeyRows); err != nil {
		return g, err
	}
	g.ManyKeys, err = db.labGroups(ctx, `SELECT c.scope, c.order_id, '', COUNT(*), COUNT(DISTINCT c.idempotency_key),
		COALESCE(MAX(k.response_status = 500), 0)
		FROM charges c LEFT JOIN idempotency_keys k ON k.scope = c.scope AND k.key = c.idempotency_key
		WHERE substr(c.idempotency_key, 1, ?) <> ?
		GROUP BY c.scope, c.order_id HAVING COUNT(DISTINCT c.idempotency_key) > 1 ORDER BY MIN(c.created_at) LIMIT ?`,
		len(pay.LabKeyPrefix), pay.LabKeyPrefix, labMaxGroups)
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
		{pay.LabCharges, `SELECT c.id, c.scope, c.idempotency_key, c.order_id, c.created_at, COALESCE(k.response_status = 500, 0)
			FROM charges c LEFT JOIN idempotency_keys k ON k.scope = c.scope AND k.key = c.idempotency_key`},
		{pay.LabLooseCharges, `SELECT id, scope, idempotency_key, order_id, created_at, 0 FROM lab_loose_charges`},
		{pay.LabLooseKeys, `SELECT CAST(rowid AS TEXT), scope, key, order_id, created_at, 0 FROM lab_loose_keys`},
	} {
		if err := db.labRowsOf(ctx, src.table, src.query, fn); err != nil {
			return err
		}
	}
	return nil
}

// LabOrderRows calls fn with the charges of one order in the charges
// table, as LabRows reads them: the lab's counts read back an order they
// dropped from memory when it is charged again (by the (scope, order_id)
// index).
func (db *DB) LabOrderRows(ctx context.Context, scope, orderID string, fn func(pay.LabRow)) error {
	if !db.schema.Holds("payments") {
		return nil
	}
	rows, err := db.readLabOrder.QueryContext(ctx, scope, orderID)
	if err != nil {
		return err
	}
	return scanLabRows(rows, pay.LabCharges, fn)
}

// labOrderQuery is LabOrderRows' statement, prepared once (DB.readLabOrder).
const labOrderQuery = `SELECT c.id, c.scope, c.idempotency_key, c.order_id, c.created_at, COALESCE(k.response_status = 500, 0)
			FROM charges c LEFT JOIN idempotency_keys k ON k.scope = c.scope AND k.key = c.idempotency_key
			WHERE c.scope = ? AND c.order_id = ?`

func (db *DB) labRowsOf(ctx context.Context, table pay.LabTable, query string, fn func(pay.LabRow), args ...any) error {
	rows, err := db.read.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	return scanLabRows(rows, table, fn)
}

// scanLabRows calls fn with each row of a charge table's read, and closes
// the rows.
func scanLabRows(rows *sql.Rows, table pay.LabTable, fn func(pay.LabRow)) error {
	defer rows.Close()
	for rows.Next() {
		r := pay.LabRow{Table: table}
		var created int64
		if err := rows.Scan(&r.ID, &r.Scope, &r.Key, &r.OrderID, &created, &r.Saved500); err != nil {
			return err
		}
		r.CreatedAt = fromMillis(created)
		fn(r)
	}
	return rows.Err()
}

func (db *DB) labGroups(ctx context.Context, query string, args ...any) ([]pay.LabGroup, error) {
	rows, err := db.read.QueryContext(ctx, query, args...)
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

// LabScanKeys calls fn with every idempotency key stored in this file's
// tables (the newest labScanLimit of each) and the table it is in, so the
// lab can show where a key made of personal data has ended up.
func (db *DB) LabScanKeys(ctx context.Context, fn func(where, key string)) error {
	type source struct{ where, query string }
	var sources []source
	if db.schema.Holds("payments") {
		sources = append(sources,
			source{pay.WhereKeyTable, `SELECT key FROM idempotency_keys ORDER BY created_at DESC LIMIT ?`},
			source{pay.WhereCharges, `SELECT idempotency_key FROM charges ORDER BY created_at DESC LIMIT ?`},
			source{pay.WhereCharges, `SELECT idempotency_key FROM lab_loose_charges ORDER BY created_at DESC LIMIT ?`})
	}
	if db.schema.Holds("ledger") {
		sources = append(sources, source{pay.WhereGateway, `SELECT key FROM gateway_charges ORDER BY created_at DESC LIMIT ?`})
	}
	for _, src := range sources {
		if err := db.scanStrings(ctx, src.query, func(k string) { fn(src.where, k) }); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) scanStrings(ctx context.Context, query string, fn func(string)) error {
	rows, err := db.read.QueryContext(ctx, query, labScanLimit)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		fn(s)
	}
	return rows.Err()
}
