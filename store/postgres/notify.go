package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay/peers"
)

// MaxNotifyPayload is the largest payload Notify sends: PostgreSQL
// refuses NOTIFY payloads of 8000 bytes or more.
const MaxNotifyPayload = peers.MaxPayload

// Notify sends each of payloads to every session listening on channel in
// this database, the sender's own listeners included. PostgreSQL
// delivers them once their transaction commits, in the order they were
// sent; several go in one transaction (one round trip, one commit, and
// each listener reads them together).
//
// A notification's transaction gets a transaction id and a commit record
// of its own, which PostgreSQL would flush to disk before answering, as
// it does a payment's commit. Nothing here needs that flush (a
// notification does not outlive the listeners' connections anyway), and
// it would compete with the payments' commits for the disk, so this one
// transaction commits without waiting for it.
func (db *DB) Notify(ctx context.Context, channel string, payloads ...string) error {
	for _, payload := range payloads {
		if len(payload) > MaxNotifyPayload {
			return fmt.Errorf("postgres: notify %s: payload of %d bytes is over the limit of %d", channel, len(payload), MaxNotifyPayload)
		}
	}
	switch len(payloads) {
	case 0:
		return nil
	case 1:
		_, err := db.pool.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`, channel, payloads[0])
		return err
	}
	// A batch's statements up to its one Sync are one implicit
	// transaction: the setting holds for all of them, and the
	// notifications are delivered in order, all or none. (PostgreSQL
	// drops a notification that repeats one of the same transaction;
	// the relay's never do, each starting with its first event's time.)
	var b pgx.Batch
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	for _, payload := range payloads {
		b.Queue(`SELECT pg_notify($1, $2)`, channel, payload)
	}
	return db.pool.SendBatch(ctx, &b).Close()
}

// Listen calls onNotify with the payload of each notification sent on
// channel, in order, until ctx ends; then it returns ctx's error. It
// listens on a connection of its own, outside the pool, so that a
// listener never takes a connection payments need.
//
// Notifications sent while no connection listens are lost, so Listen
// calls onListen each time it (re)starts listening: first at start, then
// after every reconnection, and the caller reloads there whatever the
// lost notifications would have told it. A lost connection is retried
// with a growing pause, up to 5 s. Both callbacks run on Listen's
// goroutine: a slow one holds back the next notification.
func (db *DB) Listen(ctx context.Context, channel string, onListen func(), onNotify func(payload string)) error {
	return db.listen(ctx, []string{channel}, "", onListen, func(_, payload string) { onNotify(payload) })
}

// ListenEach is Listen on several channels over one connection (a
// connection is worth saving: each server holds its listeners for good);
// onNotify learns which channel each notification came on.
func (db *DB) ListenEach(ctx context.Context, channels []string, onListen func(), onNotify func(channel, payload string)) error {
	return db.listen(ctx, channels, "", onListen, onNotify)
}

// listen is ListenEach on connections named appName (PostgreSQL's
// application_name) when it is not "", which every session of the
// database can read in pg_stat_activity.
func (db *DB) listen(ctx context.Context, channels []string, appName string, onListen func(), onNotify func(channel, payload string)) error {
	pause := 100 * time.Millisecond
	// failing is set from a failure to the next successful LISTEN, so
	// that an outage is reported once and its end once, however many
	// attempts it takes: a listener that cannot connect (a wrong
	// password, a full database) would otherwise retry in silence while
	// its server misses every change of the room.
	failing := false
	connected := func() {
		pause = 100 * time.Millisecond
		if failing {
			failing = false
			db.logf("postgres: listening on %s again", strings.Join(channels, ", "))
		}
	}
	for {
		err := db.listenOnce(ctx, channels, appName, onListen, onNotify, connected)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !failing {
			failing = true
			db.logf("postgres: listening on %s: %v; retrying every few seconds", strings.Join(channels, ", "), err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// listenOnce connects, listens and hands notifications over until the
// connection fails or ctx ends.
func (db *DB) listenOnce(ctx context.Context, channels []string, appName string, onListen func(), onNotify func(channel, payload string), connected func()) error {
	cfg := db.pool.Config().ConnConfig.Copy()
	if appName != "" {
		cfg.RuntimeParams["application_name"] = appName
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	for _, channel := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return err
		}
	}
	connected()
	if onListen != nil {
		onListen()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return ctx.Err()
			}
			return err
		}
		if slices.Contains(channels, n.Channel) {
			onNotify(n.Channel, n.Payload)
		}
	}
}

// NotifyNumbered sends payloads as one batch of the servers' one order
// (peers.Peers): its transaction first takes the next number from the
// relay_order row, whose lock every other batch's transaction then waits
// for until this one commits, so that numbers commit, and notifications
// reach the listeners, in the same order. A sequence would hand numbers
// out in the order transactions ask, not the order they commit, and a
// listener seeing n+1 before n could not tell a late batch from a lost
// one; the one row costs each batch a wait only while another batch of
// the class commits (at most about twenty a second per server). The
// batch is kept in relay_batches for ReadNumbered, and the batch that
// fell out of the newest peers.KeptBatches is deleted in the same
// transaction. A kept batch already under the number is replaced: the
// counter went back without its rows (set back by hand, or restored
// apart from them), and refusing the number would stop every batch for
// good, the counter never moving on.
//
// Each batch also carries the order's generation (peers.Part): the one
// kept in relay_life, an unlogged table that PostgreSQL empties when it
// recovers from a crash, so that the first batch numbered after a crash,
// which may reuse a forgotten batch's number, starts a new one.
func (db *DB) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	if len(payloads) == 0 {
		return 0, nil
	}
	for _, payload := range payloads {
		if len(payload) > peers.MaxNumberedPayload {
			return 0, fmt.Errorf("postgres: notify %s: payload of %d bytes is over the limit of %d", channel, len(payload), peers.MaxNumberedPayload)
		}
	}
	var b pgx.Batch
	// A new generation, if a crash emptied relay_life: the time in
	// microseconds, or one more than the last generation if the clock is
	// behind it. Two numberings at once both try; one inserts.
	b.Queue(`INSERT INTO relay_life (id, gen)
	SELECT 1, greatest(gen + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) FROM relay_order
	WHERE id = 1 AND NOT EXISTS (SELECT FROM relay_life)
	ON CONFLICT (id) DO NOTHING`)
	// The rest is one statement: the number, the kept batch and every
	// notification, the payloads sent once. pg_notify is volatile, so
	// PostgreSQL calls it after the sort, in the payloads' order. As
	// separate statements (one for the number, one pg_notify for each
	// payload, the payloads sent a second time as the kept batch) the
	// sending server encoded and read back three or more statements for
	// each batch, and every server sends twenty batches a second under
	// load.
	var n int64
	b.Queue(`WITH l AS (SELECT gen FROM relay_life WHERE id = 1),
	  c AS (UPDATE relay_order SET n = n + 1, gen = (SELECT gen FROM l) WHERE id = 1 RETURNING n, gen),
	  i AS (INSERT INTO relay_batches (n, gen, payloads) SELECT n, gen, $1 FROM c
	    ON CONFLICT (n) DO UPDATE SET gen = excluded.gen, payloads = excluded.payloads),
	  d AS (DELETE FROM relay_batches WHERE n = (SELECT n FROM c) - $2)
	SELECT c.n, set_config('synchronous_commit', 'off', true),
	  pg_notify($3, '#' || c.n || ' ' || p.i || '/' || $4::text || ' g' || c.gen || ' ' || p.payload)
	FROM c, unnest($1::text[]) WITH ORDINALITY AS p(payload, i)
	ORDER BY p.i`,
		payloads, int64(peers.KeptBatches), channel, strconv.Itoa(len(payloads))).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			// One row a payload, its number on each; the setting and
			// pg_notify's void are skipped.
			if err := rows.Scan(&n, nil, nil); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := db.pool.SendBatch(ctx, &b).Close(); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("postgres: notify %s: no number taken (relay_order has no row)", channel)
	}
	return uint64(n), nil
}

// ReadNumbered returns the kept batches from..to, their payloads after
// the Part headers their listeners received.
func (db *DB) ReadNumbered(ctx context.Context, from, to uint64) ([]string, bool, error) {
	if from > to {
		return nil, true, nil
	}
	to = min(to, math.MaxInt64)
	rows, err := db.pool.Query(ctx, `SELECT n, gen, payloads FROM relay_batches WHERE n BETWEEN $1 AND $2 ORDER BY n`, int64(min(from, math.MaxInt64)), int64(to))
	if err != nil {
		return nil, false, err
	}
	var out []string
	first := uint64(0)
	for rows.Next() {
		var n, gen int64
		var payloads []string
		if err := rows.Scan(&n, &gen, &payloads); err != nil {
			rows.Close()
			return nil, false, err
		}
		if first == 0 {
			first = uint64(n)
		}
		for i, p := range payloads {
			out = append(out, peers.Part{N: uint64(n), I: uint64(i + 1), K: uint64(len(payloads)), G: uint64(gen)}.Header()+p)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if first != 0 {
		return out, first == from, nil
	}
	// Nothing kept in the range: kept only if nothing was numbered in it.
	var newest int64
	if err := db.pool.QueryRow(ctx, `SELECT n FROM relay_order WHERE id = 1`).Scan(&newest); err != nil {
		return nil, false, err
	}
	return nil, from > uint64(newest), nil
}
