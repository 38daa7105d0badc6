// Package postgres keeps paytwice's durable state in PostgreSQL, so that
// several servers can share one database: the idempotency keys and the
// charges (pay.Storage), the simulated gateway's ledger (sim.Ledger) in a
// schema of its own, and the room the servers share (the presenter's
// switches, as JSON this package does not read: room.go).
//
// Nothing held in one process's memory guards a payment here: the two
// requests of a double-click may reach two servers. The claim is one
// INSERT … ON CONFLICT DO NOTHING on the key table's primary key,
// completion and release name the claim's fencing token, and the charge
// is UNIQUE per key, so the database alone decides every race. Each
// statement commits with PostgreSQL's default synchronous_commit, so a
// claim or a completion is durable when its call returns.
package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"paytwice/pay"
)

//go:embed migrations
var migrations embed.FS

// Options tune a DB. The zero value is usable.
type Options struct {
	// Now is the clock that stamps keys and charges; nil means time.Now.
	// Tests and the demo clock inject their own.
	Now func() time.Time
	// Schema chooses the tables; the zero value holds them all. A
	// ledger of its own (pay.SchemaLedger) lives in the schema "gateway":
	// its own database, or its own schema in ours.
	Schema pay.Schema
	// MaxConns bounds the connection pool; 0 means the URL's
	// pool_max_conns, or 16 when it names none.
	MaxConns int32
	// SweepLease is how long a sweeper keeps the started keys it took
	// from the other servers' sweepers (real time); 0 means a minute.
	SweepLease time.Duration
	// Logf reports what a listener cannot say to its caller: that its
	// connection failed, and that it listens again. nil means log.Printf.
	Logf func(format string, args ...any)
	// IdleInTransaction and StatementTimeout bound, on every session of
	// the pool, a transaction left idle and one statement; 0 means
	// DefaultIdleInTransaction and DefaultStatementTimeout.
	IdleInTransaction, StatementTimeout time.Duration
}

// DefaultIdleInTransaction bounds how long a session of the store may sit
// idle inside a transaction (idle_in_transaction_session_timeout). No
// transaction of the store waits between its statements for anything
// but the database, so only a server that stopped (SIGSTOP, a debugger,
// a machine that froze) leaves one idle: PostgreSQL then ends its session
// and rolls the transaction back, and the row locks it held, which every
// other server's claims of those keys would wait on, are freed.
const DefaultIdleInTransaction = 10 * time.Second

// DefaultStatementTimeout bounds one statement of the store
// (statement_timeout): the store's statements are short (a prune or a
// sweep works in batches), so one that runs this long is stuck, and is
// better ended with its locks than left to hold them. Migrations lift it.
const DefaultStatementTimeout = time.Minute

// defaultMaxConns bounds a pool whose URL names no pool_max_conns.
const defaultMaxConns = 16

// DB is a PostgreSQL store. It is safe for concurrent use, and any number
// of DBs, in any number of processes, may share one database.
type DB struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	schema pay.Schema
	// server names this DB to the other servers' sweepers.
	server string
	lease  time.Duration
	logf   func(format string, args ...any)
	// recent are the keys claimed lately, which a repeat most likely finds
	// held (see claim).
	recent recentKeys
	// stopLife ends this life's connection (life.go) at Close; lifeDone
	// is closed once it has ended. Both are nil on a ledger-only store.
	stopLife context.CancelFunc
	lifeDone chan struct{}
}

// IsURL reports whether s names a PostgreSQL database rather than a
// file: postgres:// or postgresql://.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open connects to the database at url, applies the migrations of the
// schema that it has not recorded yet, and returns the store.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SweepLease <= 0 {
		opts.SweepLease = time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	cfg, err := pgxpool.ParseConfig(plainOnLoopback(url))
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err) // pgx redacts the password
	}
	// pgx reads pool_max_conns from the URL: it is how an operator fits
	// several servers, each with a pool for the payments and one for the
	// gateway's ledger, under the database's max_connections.
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !namesPoolSize(url):
		cfg.MaxConns = defaultMaxConns
	}
	// Every connection bounds its lock waits from the start (see
	// ClaimLockWait).
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(ClaimLockWait.Milliseconds(), 10)
	// ... and its idle transactions and statements (see
	// DefaultIdleInTransaction and DefaultStatementTimeout).
	idle, statement := cmp.Or(opts.IdleInTransaction, DefaultIdleInTransaction), cmp.Or(opts.StatementTimeout, DefaultStatementTimeout)
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(idle.Milliseconds(), 10)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(statement.Milliseconds(), 10)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := migrate(ctx, pool, opts.Schema, max(idle, migrationIdleInTransaction)); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: migrate: %w", redact(url), err)
	}
	db := &DB{pool: pool, now: opts.Now, schema: opts.Schema, server: randomHex(8), lease: opts.SweepLease, logf: opts.Logf}
	if db.schema.Holds("payments") {
		lifeCtx, stop := context.WithCancel(context.Background())
		if err := db.startLife(lifeCtx); err != nil {
			stop()
			pool.Close()
			return nil, fmt.Errorf("postgres %s: this server's life connection: %w", redact(url), err)
		}
		db.stopLife = stop
	}
	return db, nil
}

// plainOnLoopback adds sslmode=allow to a URL whose hosts are all on
// this machine (localhost, 127.0.0.0/8, ::1) and that says nothing of TLS
// itself (no ssl… parameter, pgx's ssl=true among them), nor through the
// environment (PGSSL…). pgx's default, sslmode=prefer, would wrap every
// statement in TLS whenever the server offers it; over loopback the
// encryption guards against nobody, and it costs a payment about a tenth
// of the server's CPU. "allow" connects without TLS first and with TLS
// only if the server refuses that (a pg_hba.conf of hostssl lines), so a
// server that insists on TLS still gets it. A URL that asks for TLS gets
// it.
//
// The parameter is appended to the URL's text, which is otherwise kept
// as given: pgx reads a URL as libpq does, not as Go's net/url, which
// would write a space back as "+" (a literal plus to pgx).
func plainOnLoopback(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || u.Fragment != "" || asksForTLS() {
		return rawURL
	}
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		k, _, _ := strings.Cut(pair, "=")
		if k, err := url.PathUnescape(k); err != nil || strings.HasPrefix(k, "ssl") || k == "host" || k == "hostaddr" {
			return rawURL // TLS asked for, or hosts named here
		}
	}
	for _, hp := range strings.Split(u.Host, ",") {
		host := hp
		if h, _, err := net.SplitHostPort(hp); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return rawURL
		}
	}
	switch {
	case u.RawQuery != "":
		return rawURL + "&sslmode=allow"
	case strings.HasSuffix(rawURL, "?"):
		return rawURL + "sslmode=allow"
	}
	return rawURL + "?sslmode=allow"
}

// asksForTLS reports whether the environment says anything of TLS to
// pgx (PGSSLMODE, PGSSLCERT, PGSSLROOTCERT, …).
func asksForTLS() bool {
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PGSSL") && v != "" {
			return true
		}
	}
	return false
}

// namesPoolSize reports whether a URL's query sets pool_max_conns (and
// not merely its password or database name holding those letters).
func namesPoolSize(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has("pool_max_conns")
}

// Close closes the pool; calls made afterwards fail.
func (db *DB) Close() error {
	if db.stopLife != nil {
		db.stopLife()
		<-db.lifeDone
	}
	db.pool.Close()
	return nil
}

// Now returns the store's clock reading.
func (db *DB) Now() time.Time { return db.now() }

// Pool is the connection pool, for tests and tools that read the tables
// directly.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// migrationLock is the advisory lock every server takes to migrate. It is
// a transaction-level lock: it is released by the commit that records
// the migrations, or by the rollback when one fails, so a server killed
// mid-migration holds it no longer than its connection.
const migrationLock int64 = 0x7061797477696365 // "paytwice"

// migrate applies, in name order, every embedded migration of the schema
// that the database has not recorded yet, all in one transaction under
// migrationLock: when several servers start at once, one migrates and
// the others wait for it, then find every migration recorded. DDL is
// transactional in PostgreSQL, so a failed migration leaves nothing half
// done.
// migrationIdleInTransaction is the least idle bound of the migrations'
// transaction: a server's own bound may be short (a test's 300 ms), and a
// process starved of CPU between two statements of its migrations is not
// stopped, yet a server that truly stopped while it held the migrations'
// lock is still ended, and the next server's start goes on.
const migrationIdleInTransaction = time.Minute

func migrate(ctx context.Context, pool *pgxpool.Pool, schema pay.Schema, idle time.Duration) error {
	var names []string
	for _, part := range []string{"payments", "ledger"} {
		if !schema.Holds(part) {
			continue
		}
		found, err := fs.Glob(migrations, "migrations/"+part+"/*.sql")
		if err != nil {
			return err
		}
		sort.Strings(found)
		names = append(names, found...)
	}
	// The idle bound is lifted in the statement that begins the
	// transaction, so that no pause of this process between statements
	// meets the session's own bound.
	begin := pgx.TxOptions{BeginQuery: fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", idle.Milliseconds())}
	return pgx.BeginTxFunc(ctx, pool, begin, func(tx pgx.Tx) error {
		// Another server's migration may hold the lock for as long as its
		// statements take, and a table in use is altered only once the
		// statements under way on it end: unlike the store's other
		// statements (ClaimLockWait), these waits have no bound.
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		for _, name := range names {
			tag, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1) ON CONFLICT DO NOTHING`, name)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue // already applied
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			// Without arguments, Exec uses the simple protocol, which runs
			// a file of several statements.
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
}

// need fails when the DB does not hold the part of the schema a call is
// for.
func (db *DB) need(part string) error {
	if db.schema.Holds(part) {
		return nil
	}
	return fmt.Errorf("postgres: this store holds no %s tables", part)
}

// redact hides the password in a database URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// A DB is the whole payments store the server runs on.
var _ pay.Store = (*DB)(nil)
