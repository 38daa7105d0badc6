package postgres

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// RoomChannel is the channel on which UpdateRoom announces each new
// version of the room, as its decimal number.
const RoomChannel = "paytwice_room"

// LoadRoom reads the room's state and its version. The state is opaque
// JSON here ("{}" until the first change); the web package gives it its
// meaning.
func (db *DB) LoadRoom(ctx context.Context) (state []byte, version int64, err error) {
	if err := db.need("payments"); err != nil {
		return nil, 0, err
	}
	err = db.pool.QueryRow(ctx, `SELECT state, version FROM room`).Scan(&state, &version)
	return state, version, err
}

// UpdateRoom replaces the room's state with change(old) and returns the
// new state and its version. The read, change and write happen in one
// transaction holding the row's lock, so changes made on several servers
// at once never lose one another; an error from change rolls everything
// back and is returned as it is. The notification on RoomChannel is sent
// in the same transaction: PostgreSQL delivers it at commit, never for a
// change that did not happen.
func (db *DB) UpdateRoom(ctx context.Context, change func(old []byte) ([]byte, error)) (state []byte, version int64, err error) {
	if err := db.need("payments"); err != nil {
		return nil, 0, err
	}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var old []byte
		if err := tx.QueryRow(ctx, `SELECT state, version FROM room FOR UPDATE`).Scan(&old, &version); err != nil {
			return err
		}
		next, err := change(old)
		if err != nil {
			return err
		}
		version++
		if _, err := tx.Exec(ctx, `UPDATE room SET state = $1, version = $2`, string(next), version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, RoomChannel, strconv.FormatInt(version, 10)); err != nil {
			return err
		}
		state = next
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return state, version, nil
}

// ListenRoom follows the room's changes: onNotify receives each new
// version's number, and onListen runs after every (re)connection, where
// the caller reloads the room with LoadRoom (see Listen).
func (db *DB) ListenRoom(ctx context.Context, onListen func(), onNotify func(version string)) error {
	return db.Listen(ctx, RoomChannel, onListen, onNotify)
}
