package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
