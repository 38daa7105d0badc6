package store

import (
	"context"

	"paytwice/pay"
)

// SaveAnswerCounts keeps origin's answer counts for the room's reset gen,
// through the writer, and deletes the rows of earlier resets.
func (db *DB) SaveAnswerCounts(ctx context.Context, origin string, gen uint64, c pay.AnswerCounts) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return db.execAtomic(ctx, func(ctx context.Context, _ *writeStatements) error {
		if _, err := db.conn.ExecContext(ctx, `INSERT INTO answer_counts (origin, gen, requests, rejected, lost, replays, conflicts, mismatches)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (origin) DO UPDATE SET gen = excluded.gen, requests = excluded.requests, rejected = excluded.rejected,
				lost = excluded.lost, replays = excluded.replays, conflicts = excluded.conflicts, mismatches = excluded.mismatches`,
			origin, int64(gen), c.Requests, c.Rejected, c.Lost, c.Replays, c.Conflicts, c.Mismatches); err != nil {
			return err
		}
		_, err := db.conn.ExecContext(ctx, `DELETE FROM answer_counts WHERE gen < ?`, int64(gen))
		return err
	})
}

// AnswerCounts reads every origin's counts kept for the room's reset gen.
func (db *DB) AnswerCounts(ctx context.Context, gen uint64) (map[string]pay.AnswerCounts, error) {
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	rows, err := db.read.QueryContext(ctx, `SELECT origin, requests, rejected, lost, replays, conflicts, mismatches
		FROM answer_counts WHERE gen = ?`, int64(gen))
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
