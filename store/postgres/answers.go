package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
)

// SaveAnswerCounts keeps origin's answer counts for the room's reset gen
// and deletes the rows of earlier resets, in one transaction.
func (db *DB) SaveAnswerCounts(ctx context.Context, origin string, gen uint64, c pay.AnswerCounts) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO answer_counts (origin, gen, requests, rejected, lost, replays, conflicts, mismatches)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (origin) DO UPDATE SET gen = excluded.gen, requests = excluded.requests, rejected = excluded.rejected,
				lost = excluded.lost, replays = excluded.replays, conflicts = excluded.conflicts, mismatches = excluded.mismatches`,
			origin, int64(gen), c.Requests, c.Rejected, c.Lost, c.Replays, c.Conflicts, c.Mismatches); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM answer_counts WHERE gen < $1`, int64(gen))
		return err
	})
}

// AnswerCounts reads every origin's counts kept for the room's reset gen.
func (db *DB) AnswerCounts(ctx context.Context, gen uint64) (map[string]pay.AnswerCounts, error) {
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT origin, requests, rejected, lost, replays, conflicts, mismatches
		FROM answer_counts WHERE gen = $1`, int64(gen))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pay.AnswerCounts{}
	for rows.Next() {
		var origin string
		var c pay.AnswerCounts
		if err := rows.Scan(&origin, &c.Requests, &c.Rejected, &c.Lost, &c.Replays, &c.Conflicts, &c.Mismatches); err != nil {
			return nil, err
		}
		out[origin] = c
	}
	return out, rows.Err()
}
