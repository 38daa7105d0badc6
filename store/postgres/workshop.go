package postgres

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
)

// The books of each workshop student's gateway (web/workshop), shared by
// every server on the database: a restarted server's gateways, and
// another server's, know every charge and key they took.

// RecordWorkshopCharge keeps c in student's gateway unless it holds c.Key
// already, and returns the charge that holds the key and the books'
// tally; a new charge past keep prunes the oldest in the same
// transaction.
func (db *DB) RecordWorkshopCharge(ctx context.Context, student string, c pay.GatewayCharge, keep int) (pay.GatewayCharge, bool, pay.WorkshopTally, error) {
	if err := db.need("payments"); err != nil {
		return pay.GatewayCharge{}, false, pay.WorkshopTally{}, err
	}
	out, fresh := c, false
	var tally pay.WorkshopTally
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// The student's row in workshop_books, locked until the end: one
		// student's charges and prunes take turns, so the books never
		// hold more than keep, on any server.
		if err := tx.QueryRow(ctx, `INSERT INTO workshop_books (student, pruned) VALUES ($1, 0)
			ON CONFLICT (student) DO UPDATE SET pruned = workshop_books.pruned RETURNING pruned`, student).Scan(&tally.Pruned); err != nil {
			return err
		}
		// Read once that row is ours: a removal of the student holds it
		// until it commits (DeleteWorkshopBooks), so it is seen here.
		var removed bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM workshop_removed WHERE student = $1)`, student).Scan(&removed); err != nil {
			return err
		}
		if removed {
			return pay.ErrWorkshopStudentRemoved
		}
		tag, err := tx.Exec(ctx, `INSERT INTO workshop_charges (student, `+gatewayColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (student, key) DO NOTHING`,
			student, c.Key, c.ID, c.OrderID, c.AmountSatang, c.CreatedAt)
		if err != nil {
			return err
		}
		if fresh = tag.RowsAffected() == 1; !fresh {
			// The row that conflicted is there to read: its student's
			// books are locked, so no prune takes it meanwhile.
			out, err = scanGateway(tx.QueryRow(ctx, `SELECT `+gatewayColumns+` FROM workshop_charges
				WHERE student = $1 AND key = $2`, student, c.Key))
			if errors.Is(err, pgx.ErrNoRows) {
				err = errors.New("postgres: the workshop charge that held the key vanished")
			}
			if err != nil {
				return err
			}
		} else if keep > 0 {
			gone, err := tx.Exec(ctx, `DELETE FROM workshop_charges WHERE student = $1 AND seq <= (
				SELECT seq FROM workshop_charges WHERE student = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2)`, student, keep)
			if err != nil {
				return err
			}
			if n := gone.RowsAffected(); n > 0 {
				if _, err := tx.Exec(ctx, `UPDATE workshop_books SET pruned = pruned + $2 WHERE student = $1`, student, n); err != nil {
					return err
				}
				tally.Pruned += n
			}
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM workshop_charges WHERE student = $1`, student).Scan(&tally.Held)
	})
	return out, fresh, tally, err
}

// WorkshopChargesByOrder reads the newest limit of orderID's charges in
// student's gateway, oldest first, and how many the order holds.
func (db *DB) WorkshopChargesByOrder(ctx context.Context, student, orderID string, limit int) (out []pay.GatewayCharge, total int, err error) {
	if err := db.need("payments"); err != nil {
		return nil, 0, err
	}
	rows, err := db.pool.Query(ctx, `SELECT `+gatewayColumns+`, total FROM (SELECT *, count(*) OVER () AS total
		FROM workshop_charges WHERE student = $1 AND order_id = $2 ORDER BY seq DESC LIMIT $3) newest ORDER BY seq`, student, orderID, max(limit, 1))
	if err != nil {
		return nil, 0, err
	}
	out, total, err = scanCounted(rows)
	if limit <= 0 {
		out = nil
	}
	return out, total, err
}

// WorkshopCharges reads the newest limit charges of student's gateway,
// oldest first, and the books' tally, in one statement: a restarted
// server reads every student's books within its start's bound.
func (db *DB) WorkshopCharges(ctx context.Context, student string, limit int) ([]pay.GatewayCharge, pay.WorkshopTally, error) {
	if err := db.need("payments"); err != nil {
		return nil, pay.WorkshopTally{}, err
	}
	var tally pay.WorkshopTally
	var out []pay.GatewayCharge
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM workshop_charges WHERE student = $1),
			coalesce((SELECT pruned FROM workshop_books WHERE student = $1), 0)`, student).Scan(&tally.Held, &tally.Pruned); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+gatewayColumns+`, 0 FROM (SELECT * FROM workshop_charges
			WHERE student = $1 ORDER BY seq DESC LIMIT $2) newest ORDER BY seq`, student, max(limit, 1))
		if err != nil {
			return err
		}
		out, _, err = scanCounted(rows)
		return err
	})
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
	rows, err := db.pool.Query(ctx, `SELECT student, sum(held)::bigint, sum(pruned)::bigint FROM (
		SELECT student, count(*) AS held, 0::bigint AS pruned FROM workshop_charges GROUP BY student
		UNION ALL SELECT student, 0, pruned FROM workshop_books) books GROUP BY student`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pay.WorkshopTally{}
	for rows.Next() {
		var student string
		var held, pruned int64
		if err := rows.Scan(&student, &held, &pruned); err != nil {
			return nil, err
		}
		out[student] = pay.WorkshopTally{Held: int(held), Pruned: pruned}
	}
	return out, rows.Err()
}

// DeleteWorkshopBooks deletes the students' charges and pruned counts,
// and remembers them as removed, forgetting those removed more than
// pay.WorkshopRemovedFor ago. It first takes each student's
// workshop_books row (making it if need be), the row every charge takes
// before it writes (RecordWorkshopCharge): a charge that took it first
// has committed before the charges are deleted here, and is deleted; one
// that comes after waits for this transaction and then finds the student
// removed.
func (db *DB) DeleteWorkshopBooks(ctx context.Context, students ...string) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	if len(students) == 0 {
		return nil
	}
	// In one order, so that two removals at once never wait on each other.
	students = slices.Compact(slices.Sorted(slices.Values(students)))
	now := db.now()
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM workshop_removed WHERE removed_at < $1`, now.Add(-pay.WorkshopRemovedFor)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workshop_books (student, pruned) SELECT s, 0 FROM unnest($1::text[]) AS s ORDER BY s
			ON CONFLICT (student) DO UPDATE SET pruned = workshop_books.pruned`, students); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workshop_removed (student, removed_at) SELECT unnest($1::text[]), $2
			ON CONFLICT (student) DO UPDATE SET removed_at = excluded.removed_at`, students, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM workshop_books WHERE student = ANY($1)`, students); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM workshop_charges WHERE student = ANY($1)`, students)
		return err
	})
}

// scanCounted reads charges each followed by a count, and the count.
func scanCounted(rows pgx.Rows) ([]pay.GatewayCharge, int, error) {
	defer rows.Close()
	var out []pay.GatewayCharge
	var total int
	for rows.Next() {
		var g pay.GatewayCharge
		if err := rows.Scan(&g.Key, &g.ID, &g.OrderID, &g.AmountSatang, &g.CreatedAt, &total); err != nil {
			return nil, 0, err
		}
		g.CreatedAt = g.CreatedAt.UTC()
		out = append(out, g)
	}
	return out, total, rows.Err()
}
