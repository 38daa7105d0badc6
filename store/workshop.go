package store

import (
	"context"
	"database/sql"

	"paytwice/pay"
)

// The books of each workshop student's gateway (web/workshop), kept in the
// file so that a restarted server's gateways know every charge and key
// they took before.

// RecordWorkshopCharge keeps c in student's gateway unless it holds c.Key
// already, through the writer, and returns the charge that holds the key
// and the books' tally; a new charge past keep prunes the oldest in the
// same transaction.
func (db *DB) RecordWorkshopCharge(ctx context.Context, student string, c pay.GatewayCharge, keep int) (pay.GatewayCharge, bool, pay.WorkshopTally, error) {
	if err := db.need("payments"); err != nil {
		return pay.GatewayCharge{}, false, pay.WorkshopTally{}, err
	}
	out, fresh := c, false
	var tally pay.WorkshopTally
	err := db.execAtomic(ctx, func(ctx context.Context, _ *writeStatements) error {
		var removed int
		if err := db.conn.QueryRowContext(ctx, `SELECT count(*) FROM workshop_removed WHERE student = ?`, student).Scan(&removed); err != nil {
			return err
		}
		if removed > 0 {
			return pay.ErrWorkshopStudentRemoved
		}
		r, err := db.conn.ExecContext(ctx, `INSERT INTO workshop_charges (student, key, id, order_id, amount_satang, created_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (student, key) DO NOTHING`,
			student, c.Key, c.ID, c.OrderID, c.AmountSatang, toMillis(c.CreatedAt))
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if fresh = n == 1; !fresh {
			if out, err = scanGateway(db.conn.QueryRowContext(ctx, `SELECT `+gatewayColumns+` FROM workshop_charges
				WHERE student = ? AND key = ?`, student, c.Key)); err != nil {
				return err
			}
		} else if keep > 0 {
			// Everything older than the newest keep goes, and is counted.
			r, err := db.conn.ExecContext(ctx, `DELETE FROM workshop_charges WHERE student = ? AND seq <= (
				SELECT seq FROM workshop_charges WHERE student = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`, student, student, keep)
			if err != nil {
				return err
			}
			if gone, err := r.RowsAffected(); err != nil {
				return err
			} else if gone > 0 {
				if _, err := db.conn.ExecContext(ctx, `INSERT INTO workshop_books (student, pruned) VALUES (?, ?)
					ON CONFLICT (student) DO UPDATE SET pruned = pruned + excluded.pruned`, student, gone); err != nil {
					return err
				}
			}
		}
		return db.conn.QueryRowContext(ctx, workshopTallyQuery, student, student).Scan(&tally.Held, &tally.Pruned)
	})
	return out, fresh, tally, err
}

// workshopTallyQuery reads one student's tally; the student twice.
const workshopTallyQuery = `SELECT (SELECT count(*) FROM workshop_charges WHERE student = ?),
	coalesce((SELECT pruned FROM workshop_books WHERE student = ?), 0)`

// WorkshopChargesByOrder reads the newest limit of orderID's charges in
// student's gateway, oldest first, and how many the order holds.
func (db *DB) WorkshopChargesByOrder(ctx context.Context, student, orderID string, limit int) ([]pay.GatewayCharge, int, error) {
	if err := db.need("payments"); err != nil {
		return nil, 0, err
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+gatewayColumns+`, total FROM (SELECT *, count(*) OVER () AS total
		FROM workshop_charges WHERE student = ? AND order_id = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq`, student, orderID, max(limit, 1))
	if err != nil {
		return nil, 0, err
	}
	out, total, err := scanCounted(rows)
	if limit <= 0 {
		out = nil
	}
	return out, total, err
}

// WorkshopCharges reads the newest limit charges of student's gateway,
// oldest first, and the books' tally, in one snapshot.
func (db *DB) WorkshopCharges(ctx context.Context, student string, limit int) ([]pay.GatewayCharge, pay.WorkshopTally, error) {
	if err := db.need("payments"); err != nil {
		return nil, pay.WorkshopTally{}, err
	}
	var out []pay.GatewayCharge
	var tally pay.WorkshopTally
	err := func() error {
		tx, err := db.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := tx.QueryRowContext(ctx, workshopTallyQuery, student, student).Scan(&tally.Held, &tally.Pruned); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+gatewayColumns+`, 0 FROM (SELECT * FROM workshop_charges
			WHERE student = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq`, student, max(limit, 1))
		if err != nil {
			return err
		}
		out, _, err = scanCounted(rows)
		return err
	}()
	if limit <= 0 {
		out = nil
	}
	return out, tally, err
}

// WorkshopTallies reads every student's tally, in one statement.
func (db *DB) WorkshopTallies(ctx context.Context) (map[string]pay.WorkshopTally, error) {
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	rows, err := db.read.QueryContext(ctx, `SELECT student, sum(held), sum(pruned) FROM (
		SELECT student, count(*) AS held, 0 AS pruned FROM workshop_charges GROUP BY student
		UNION ALL SELECT student, 0, pruned FROM workshop_books) GROUP BY student`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pay.WorkshopTally{}
	for rows.Next() {
		var student string
		var t pay.WorkshopTally
		if err := rows.Scan(&student, &t.Held, &t.Pruned); err != nil {
			return nil, err
		}
		out[student] = t
	}
	return out, rows.Err()
}

// DeleteWorkshopBooks deletes the students' charges and pruned counts,
// and remembers them as removed, forgetting those removed more than
// pay.WorkshopRemovedFor ago. The writer takes one transaction at a
// time, so a charge recorded is either before (and deleted) or after
// (and refused).
func (db *DB) DeleteWorkshopBooks(ctx context.Context, students ...string) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return db.execAtomic(ctx, func(ctx context.Context, _ *writeStatements) error {
		now := db.now()
		if _, err := db.conn.ExecContext(ctx, `DELETE FROM workshop_removed WHERE removed_at < ?`,
			toMillis(now.Add(-pay.WorkshopRemovedFor))); err != nil {
			return err
		}
		for _, st := range students {
			// Removed again (its books not deleted the first time): the
			// charges in flight are counted from now.
			if _, err := db.conn.ExecContext(ctx, `INSERT INTO workshop_removed (student, removed_at) VALUES (?, ?)
				ON CONFLICT (student) DO UPDATE SET removed_at = excluded.removed_at`, st, toMillis(now)); err != nil {
				return err
			}
			if _, err := db.conn.ExecContext(ctx, `DELETE FROM workshop_charges WHERE student = ?`, st); err != nil {
				return err
			}
			if _, err := db.conn.ExecContext(ctx, `DELETE FROM workshop_books WHERE student = ?`, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// scanCounted reads charges each followed by a count, and the count.
func scanCounted(rows *sql.Rows) ([]pay.GatewayCharge, int, error) {
	defer rows.Close()
	var out []pay.GatewayCharge
	var total int
	for rows.Next() {
		var g pay.GatewayCharge
		var created int64
		if err := rows.Scan(&g.Key, &g.ID, &g.OrderID, &g.AmountSatang, &created, &total); err != nil {
			return nil, 0, err
		}
		g.CreatedAt = fromMillis(created)
		out = append(out, g)
	}
	return out, total, rows.Err()
}
