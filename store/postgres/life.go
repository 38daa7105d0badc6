package postgres

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// A server's life. Every claim names the server that took it
// (claimed_by): an id drawn at each Open, so it names one life of one
// process, never the server that a restart brings back under the same
// name. While that life lasts it holds one connection of its own whose
// application_name is lifePrefix and the id; PostgreSQL ends that
// session when the process dies (SIGKILL included: the kernel closes its
// sockets), so "no session of that name" means the life is over and
// none of its requests is still at work. A sweeper then takes the keys
// that life claimed at once, without waiting out the work lease that
// step mode kept renewing or the lock time-out: a restarted server
// answers its previous life's keys within one sweep. A process that is
// stopped (SIGSTOP) or slow keeps its session, so its keys wait for the
// lease and the time-out as before.
const lifePrefix = "paytwice-life "

// lifeSettle is how long PostgreSQL must have been up before a missing
// life counts as an ended one: after a restart of the database every
// server needs a moment to connect its life again.
const lifeSettle = 10 * time.Second

// lifeAppName is the application_name of server's life connection.
func lifeAppName(server string) string {
	name := lifePrefix + server
	if len(name) > maxAppName {
		name = name[:maxAppName]
	}
	return name
}

// startLife connects this life's connection and keeps it until ctx ends,
// connecting again whenever it is lost. The first connection is made
// before it returns, so that no claim of this life is ever taken for a
// dead one's.
func (db *DB) startLife(ctx context.Context) error {
	conn, err := db.connectLife(ctx)
	if err != nil {
		return err
	}
	db.lifeDone = make(chan struct{})
	go func() {
		defer close(db.lifeDone)
		pause := 100 * time.Millisecond
		for {
			// The connection listens on nothing and sends nothing: the wait
			// ends when the connection does, or at Close.
			_, err := conn.WaitForNotification(ctx)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			db.logf("postgres: this server's life connection was lost (%v); connecting again", err)
			for conn = nil; conn == nil; {
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				if conn, err = db.connectLife(ctx); err != nil {
					pause = min(2*pause, 5*time.Second)
				}
			}
			pause = 100 * time.Millisecond
		}
	}()
	return nil
}

func (db *DB) connectLife(ctx context.Context) (*pgx.Conn, error) {
	cfg := db.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = lifeAppName(db.server)
	return pgx.ConnectConfig(ctx, cfg)
}

// lifeEnded is SQL true when the life named by the column col has no
// session left: $n is lifePrefix. PostgreSQL cuts application_name to
// maxAppName bytes, and so does lifeAppName.
func lifeEnded(col, n string) string {
	return `(` + col + ` <> '' AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.application_name = left(` + n + ` || ` + col + `, ` + strconv.Itoa(maxAppName) + `)))`
}
