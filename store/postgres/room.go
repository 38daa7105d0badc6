package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay/peers"
)

// A DB is the peers of every server on its database: the room's row, the
// sessions that follow it, LISTEN/NOTIFY.
var _ peers.Peers = (*DB)(nil)

// Shared reports that other servers may use the database: always.
func (db *DB) Shared() bool { return true }

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

// LoadWorkshop reads the workshop's state ("{}" before it is first
// saved): the web package's document, opaque here.
func (db *DB) LoadWorkshop(ctx context.Context) ([]byte, error) {
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	var state string
	err := db.pool.QueryRow(ctx, `SELECT state FROM workshop`).Scan(&state)
	return []byte(state), err
}

// UpdateWorkshop replaces the workshop's state with change(old) for every
// server, in one transaction holding the row's lock: servers saving at
// once each merge into what the others wrote, never over it. An error
// from change rolls it back and is returned as it is.
func (db *DB) UpdateWorkshop(ctx context.Context, change func(old []byte) ([]byte, error)) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var old string
		if err := tx.QueryRow(ctx, `SELECT state FROM workshop FOR UPDATE`).Scan(&old); err != nil {
			return err
		}
		next, err := change([]byte(old))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE workshop SET state = $1`, string(next))
		return err
	})
}

// ListenRoom follows the room's changes: onNotify receives each new
// version's number, and onListen runs after every (re)connection, where
// the caller reloads the room with LoadRoom (see Listen). The listening
// connection carries member in its name, so that RoomMembers finds this
// server among the live ones for as long as it follows the room.
func (db *DB) ListenRoom(ctx context.Context, member string, onListen func(), onNotify func(version string)) error {
	return db.listen(ctx, []string{RoomChannel}, memberAppName(member), onListen, func(_, version string) { onNotify(version) })
}

// roomMemberPrefix starts the application_name of every connection that
// follows the room.
const roomMemberPrefix = "paytwice-room "

// maxAppName is the longest application_name PostgreSQL keeps
// (NAMEDATALEN - 1 bytes); it cuts longer ones.
const maxAppName = 63

// memberAppName is the application_name of member's listening
// connection: printable ASCII only, which PostgreSQL keeps as it is, and
// cut to the length it keeps.
func memberAppName(member string) string {
	b := []byte(roomMemberPrefix)
	for i := 0; i < len(member) && len(b) < maxAppName; i++ {
		c := member[i]
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}

// RoomMembers returns the members (as given to ListenRoom, perhaps cut
// short) of the sessions that follow the room in this database now. A
// server that died, or whose listening connection was cut, is not among
// them: PostgreSQL ends a session with its connection. The name of a
// session is visible to every role, unlike its query.
func (db *DB) RoomMembers(ctx context.Context) ([]string, error) {
	if err := db.need("payments"); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT substr(application_name, $1 + 1) FROM pg_stat_activity
		WHERE datname = current_database() AND left(application_name, $1) = $2`, len(roomMemberPrefix), roomMemberPrefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// LoadGuesses reads client's wrong presenter tokens.
func (db *DB) LoadGuesses(ctx context.Context, client string) (g peers.Guesses, ok bool, err error) {
	if err := db.need("payments"); err != nil {
		return peers.Guesses{}, false, err
	}
	err = db.pool.QueryRow(ctx, `SELECT left_tries, at FROM wrong_tokens WHERE client = $1`, client).Scan(&g.Left, &g.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return peers.Guesses{}, false, nil
	}
	return g, err == nil, err
}

// UpdateGuesses replaces client's wrong tokens with change(old, ok) in one
// transaction holding the client's row lock, so wrong tokens sent to
// several servers at once all count. The rows of other clients last
// changed before forgetBefore are deleted in the same transaction, which
// keeps the table as small as the clients guessing now; a row another
// transaction holds is left for a later one.
//
// The wait for the client's row is bounded by guessLockWait, besides ctx:
// the guesses of one client sent to several servers at once queue on that
// row (each server sends one at a time), and a guess waiting there holds
// a connection of the pool the payments use, so it gives up after a
// second rather than after the caller's whole bound.
// guessLockWait is UpdateGuesses' lock_timeout: how long a guess waits
// for its client's row.
const guessLockWait = "1s"

func (db *DB) UpdateGuesses(ctx context.Context, client string, forgetBefore time.Time, change func(old peers.Guesses, ok bool) peers.Guesses) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+guessLockWait+"'"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM wrong_tokens WHERE client IN (
			SELECT client FROM wrong_tokens WHERE at < $1 AND client <> $2 FOR UPDATE SKIP LOCKED)`, forgetBefore, client); err != nil {
			return err
		}
		// The row is made first, so that two first wrong tokens from one
		// client both wait on its lock instead of racing to insert it.
		if _, err := tx.Exec(ctx, `INSERT INTO wrong_tokens (client, left_tries, at) VALUES ($1, 'NaN', $2) ON CONFLICT DO NOTHING`, client, forgetBefore); err != nil {
			return err
		}
		var old peers.Guesses
		if err := tx.QueryRow(ctx, `SELECT left_tries, at FROM wrong_tokens WHERE client = $1 FOR UPDATE`, client).Scan(&old.Left, &old.At); err != nil {
			return err
		}
		ok := !math.IsNaN(old.Left) && !old.At.Before(forgetBefore)
		if !ok {
			old = peers.Guesses{}
		}
		next := change(old, ok)
		_, err := tx.Exec(ctx, `UPDATE wrong_tokens SET left_tries = $2, at = $3 WHERE client = $1`, client, next.Left, next.At)
		return err
	})
}
