package store

import (
	"context"
)

// The room's state (web/room) kept in the file, so that a restarted server
// carries on with the class where it was: the chapter, step mode, the
// switches, the clock's offset and the resets. The document is opaque
// here; the web package gives it its meaning.

// LoadRoom reads the room's state and the version it was saved at ("{}"
// and 0 before the first change).
func (db *DB) LoadRoom(ctx context.Context) (state []byte, version int64, err error) {
	if err := db.need("payments"); err != nil {
		return nil, 0, err
	}
	err = db.read.QueryRowContext(ctx, `SELECT state, version FROM room WHERE id = 1`).Scan(&state, &version)
	return state, version, err
}

// SaveRoom writes the room's state and its version, through the writer:
// it is durable once SaveRoom returns.
func (db *DB) SaveRoom(ctx context.Context, state []byte, version int64) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return db.exec(ctx, func(ctx context.Context, _ *writeStatements) error {
		_, err := db.conn.ExecContext(ctx, `UPDATE room SET state = ?, version = ? WHERE id = 1`, string(state), version)
		return err
	})
}

// LoadWorkshop reads the workshop's state ("{}" before it is first saved):
// the web package's document, opaque here.
func (db *DB) LoadWorkshop(ctx context.Context) ([]byte, error) {
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	var state []byte
	err := db.read.QueryRowContext(ctx, `SELECT state FROM workshop WHERE id = 1`).Scan(&state)
	return state, err
}

// UpdateWorkshop replaces the workshop's state with change(old), through
// the writer: the read and the write are one step of the writer, so two
// servers' saves never lose one another's part. It is durable once
// UpdateWorkshop returns; an error from change writes nothing.
func (db *DB) UpdateWorkshop(ctx context.Context, change func(old []byte) ([]byte, error)) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return db.execAtomic(ctx, func(ctx context.Context, _ *writeStatements) error {
		var old []byte
		if err := db.conn.QueryRowContext(ctx, `SELECT state FROM workshop WHERE id = 1`).Scan(&old); err != nil {
			return err
		}
		next, err := change(old)
		if err != nil {
			return err
		}
		_, err = db.conn.ExecContext(ctx, `UPDATE workshop SET state = ? WHERE id = 1`, string(next))
		return err
	})
}
