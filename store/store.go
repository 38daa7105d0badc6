package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"paytwice/pay"
)

//go:embed migrations
var migrations embed.FS

// Options tune a DB. The zero value is usable.
type Options struct {
	// Now is the clock; nil means time.Now. Tests inject a fake one so that
	// expiry, sweeping and pruning can be checked without sleeping.
	Now func() time.Time
	// ReplayCacheSize bounds the in-memory cache of completed responses.
	ReplayCacheSize int
	// ReadConns is the size of the read pool.
	ReadConns int
	// Synchronous is SQLite's synchronous setting; "" means FULL, which
	// makes every commit survive a power loss.
	Synchronous string
	// Schema chooses the tables; the zero value holds them all.
	Schema pay.Schema
}

// DB is paytwice's store. It is safe for concurrent use.
type DB struct {
	Path string

	now    func() time.Time
	schema pay.Schema
	write  *sql.DB
	read   *sql.DB
	// readKey reads one key row through the read pool. It is prepared
	// once, so the read before each claim does not parse its SQL again:
	// every new payment makes that read.
	readKey *sql.Stmt
	// readLabOrder reads one order's charges for the lab's tally
	// (LabOrderRows), prepared once for the same reason: once the tally's
	// window of orders is full, every new payment makes that read too.
	readLabOrder *sql.Stmt
	conn         *sql.Conn // the writer goroutine's connection; nobody else uses it
	stmts        writeStatements
	cache        *replayCache
	held         claimsHeld

	stats struct{ commits, ops, first, busy atomic.Int64 }
	ops   chan *writeOp
	// first queues the writes made under pay.WriteFirst: the writer
	// takes them before any of ops, in a batch of their own, and a batch
	// of ops stops between two ops to let them go (runBatch). With a class
	// flooding the writer, the presenter's payment waited for batch after
	// batch of the students' writes (seconds each on a loaded machine),
	// so long that its client gave up.
	first      chan *writeOp
	quit       chan struct{}
	writerDone chan struct{}
	closeOnce  sync.Once
}

// Open opens (creating if needed) the SQLite database at path, applies the
// migrations and starts the writer goroutine.
func Open(path string, opts Options) (*DB, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReplayCacheSize <= 0 {
		opts.ReplayCacheSize = 100_000
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.Synchronous == "" {
		opts.Synchronous = "FULL"
	}
	db := &DB{
		Path:       path,
		schema:     opts.Schema,
		now:        opts.Now,
		cache:      newReplayCache(opts.ReplayCacheSize),
		ops:        make(chan *writeOp, 1024),
		first:      make(chan *writeOp, 64),
		quit:       make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	var err error
	if db.write, err = sql.Open("sqlite", dsn(path, opts.Synchronous, false)); err != nil {
		return nil, err
	}
	db.write.SetMaxOpenConns(1)
	db.write.SetConnMaxLifetime(0)
	db.write.SetConnMaxIdleTime(0)
	if err := migrate(db.write, opts.Schema); err != nil {
		db.write.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	if db.conn, err = db.write.Conn(context.Background()); err != nil {
		db.write.Close()
		return nil, err
	}
	if err := db.stmts.prepare(db.conn, opts.Schema); err != nil {
		db.conn.Close()
		db.write.Close()
		return nil, err
	}
	if db.read, err = sql.Open("sqlite", dsn(path, opts.Synchronous, true)); err != nil {
		db.conn.Close()
		db.write.Close()
		return nil, err
	}
	db.read.SetMaxOpenConns(opts.ReadConns)
	db.read.SetMaxIdleConns(opts.ReadConns)
	if db.schema.Holds("payments") {
		db.readKey, err = db.read.Prepare(`SELECT ` + keyColumns + ` FROM idempotency_keys WHERE scope = ? AND key = ?`)
		if err == nil {
			db.readLabOrder, err = db.read.Prepare(labOrderQuery)
		}
		if err != nil {
			if db.readKey != nil {
				db.readKey.Close()
			}
			db.read.Close()
			db.conn.Close()
			db.write.Close()
			return nil, err
		}
	}
	go db.writer()
	return db, nil
}

// dsn builds a modernc.org/sqlite data source name. Writes use IMMEDIATE
// transactions so that a transaction takes the write lock when it begins
// instead of failing with SQLITE_BUSY when it first writes.
func dsn(path, synchronous string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+synchronous+")")
	q.Add("_pragma", "foreign_keys(1)")
	// A batch runs each multi-statement write in a savepoint. With temp
	// files on disk, the savepoints' sub-journal spills into a temporary
	// file after 64 KiB, and every later page change in that batch is a
	// pwrite: a tenth of the server's CPU at 64 clients. Kept in memory it
	// costs a copy. Nothing durable lives in temporary storage.
	q.Add("_pragma", "temp_store(MEMORY)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// need fails when the file does not hold the part of the schema a write
// is for, instead of running a statement that was never prepared.
func (db *DB) need(part string) error {
	if db.schema.Holds(part) {
		return nil
	}
	return fmt.Errorf("store: %s holds no %s tables", db.Path, part)
}

// migrate applies, in name order, every embedded migration of the schema
// that the file has not recorded yet, each in its own transaction.
func migrate(db *sql.DB, schema pay.Schema) error {
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		return err
	}
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
	for _, name := range names {
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		r, err := tx.Exec(`INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?) ON CONFLICT DO NOTHING`, name, time.Now().UnixMilli())
		if err != nil {
			tx.Rollback()
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			tx.Rollback() // already applied
			continue
		}
		if _, err := tx.Exec(string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the writer after its current batch and closes the database.
// Writes submitted afterwards fail with ErrClosed.
func (db *DB) Close() error {
	var err error
	db.closeOnce.Do(func() {
		close(db.quit)
		<-db.writerDone
		db.stmts.close()
		for _, s := range []*sql.Stmt{db.readKey, db.readLabOrder} {
			if s != nil {
				s.Close()
			}
		}
		err = errors.Join(db.conn.Close(), db.read.Close(), db.write.Close())
	})
	return err
}

// Now returns the store's clock reading.
func (db *DB) Now() time.Time { return db.now() }

// writeOp is one unit of work for the writer: done receives fn's error,
// or the commit's. An op of several writes runs inside its own savepoint
// so that its failure undoes only its own work; an op of one statement
// needs none, since SQLite undoes a failed statement by itself.
//
// fn runs its statements under the ctx the writer passes, never under
// its caller's: a batch holds many callers' writes in one transaction,
// and when a statement's context ends the driver interrupts the
// connection, which rolls the whole transaction back, so one client
// hanging up would fail every other write in the batch.
type writeOp struct {
	fn        func(ctx context.Context, w *writeStatements) error
	savepoint bool
	done      chan error
}

var opPool = sync.Pool{New: func() any { return &writeOp{done: make(chan error, 1)} }}

// WriterStats describe the writer's work since the store was opened.
type WriterStats struct {
	Commits int64         // transactions committed (one fsync each)
	Ops     int64         // writes they carried
	First   int64         // of those, the writes that went first (pay.WriteFirst)
	Busy    time.Duration // time spent running and committing them
}

// WriterStats reports how well group commit is batching: Ops/Commits is
// the number of requests that share an fsync.
func (db *DB) WriterStats() WriterStats {
	return WriterStats{Commits: db.stats.commits.Load(), Ops: db.stats.ops.Load(), First: db.stats.first.Load(), Busy: time.Duration(db.stats.busy.Load())}
}

// maxBatch bounds how many operations share one transaction, so that one
// huge batch cannot delay its first caller for long.
const maxBatch = 512

// exec hands fn to the writer and waits until the transaction that ran it
// has committed. ctx bounds only the wait for a place in the queue. Once
// handed over, the operation runs under the writer's own context and is
// waited for even if ctx ends: its outcome must be known, or a claim
// could be left behind unseen. (done is buffered, so a caller that
// stopped listening could never hold the writer up either.)
func (db *DB) exec(ctx context.Context, fn func(ctx context.Context, w *writeStatements) error) error {
	return db.submit(ctx, fn, false)
}

// execAtomic is exec for an fn of several writes: they are undone
// together if fn fails.
func (db *DB) execAtomic(ctx context.Context, fn func(ctx context.Context, w *writeStatements) error) error {
	return db.submit(ctx, fn, true)
}

func (db *DB) submit(ctx context.Context, fn func(ctx context.Context, w *writeStatements) error, savepoint bool) error {
	op := opPool.Get().(*writeOp)
	op.fn, op.savepoint = fn, savepoint
	queue := db.ops
	if pay.WritesFirst(ctx) {
		queue = db.first
	}
	select {
	case queue <- op:
	case <-db.quit:
		opPool.Put(op)
		return ErrClosed
	case <-ctx.Done():
		opPool.Put(op)
		return ctx.Err()
	}
	var err error
	select {
	case err = <-op.done:
	case <-db.writerDone:
		select {
		case err = <-op.done:
		default:
			return ErrClosed // the op is lost with the writer; do not reuse it
		}
	}
	op.fn = nil
	opPool.Put(op)
	return err
}

func (db *DB) writer() {
	defer close(db.writerDone)
	batch := make([]*writeOp, 0, maxBatch)
	// left holds the ops a batch stopped before, to let the first's go:
	// they begin the next batch of the others.
	var left []*writeOp
	for {
		batch = batch[:0]
		first := false
		switch {
		case len(db.first) > 0:
			first = true
		case len(left) > 0:
			batch = append(batch, left...)
			left = left[:0]
		default:
			select {
			case <-db.quit:
				return
			case op := <-db.first:
				batch, first = append(batch, op), true
			case op := <-db.ops:
				batch = append(batch, op)
			}
		}
		// Commit what is queued: the writes that arrive while this batch's
		// fsync runs form the next batch. Before that, one yield lets
		// goroutines that are already runnable (handlers the last commit
		// answered, requests just parsed) queue their writes first. It never
		// waits for anything that is not already runnable, so a lone
		// request or an idle server pays nothing for it. The writes that go
		// first make a batch of their own, however many others wait.
		if first {
			batch = drain(db.first, batch)
		} else {
			batch = drain(db.ops, batch)
			if len(batch) < maxBatch {
				runtime.Gosched()
				batch = drain(db.ops, batch)
			}
		}
		t0 := time.Now()
		ran := db.runBatch(batch, !first)
		left = append(left, batch[ran:]...)
		db.stats.busy.Add(int64(time.Since(t0)))
	}
}

// drain adds to batch what is already queued on ops, without waiting.
func drain(ops chan *writeOp, batch []*writeOp) []*writeOp {
	for len(batch) < maxBatch {
		select {
		case op := <-ops:
			batch = append(batch, op)
		default:
			return batch
		}
	}
	return batch
}

// runBatch runs the ops of the batch in one transaction, then commits,
// and says how many it ran. Every statement runs under a context that
// nobody can cancel (see writeOp). A batch that may yield stops before
// its next op when writes that go first are waiting: it commits what it
// ran, and the writer runs the rest after them.
func (db *DB) runBatch(batch []*writeOp, mayYield bool) int {
	ctx := context.Background()
	w := &db.stmts
	errs := make([]error, len(batch))
	if _, err := w.begin.ExecContext(ctx); err != nil {
		db.count(len(batch), !mayYield)
		for _, op := range batch {
			op.done <- fmt.Errorf("begin: %w", err)
		}
		return len(batch)
	}
	ran := len(batch)
	for i, op := range batch {
		if mayYield && i > 0 && len(db.first) > 0 {
			ran = i
			break
		}
		if !op.savepoint {
			errs[i] = op.fn(ctx, w)
			continue
		}
		if _, err := w.savepoint.ExecContext(ctx); err != nil {
			errs[i] = err
			continue
		}
		if err := op.fn(ctx, w); err != nil {
			errs[i] = err
			_, _ = w.rollbackTo.ExecContext(ctx)
		}
		_, _ = w.release.ExecContext(ctx)
	}
	if _, err := w.commit.ExecContext(ctx); err != nil {
		_, _ = w.rollback.ExecContext(ctx)
		db.count(ran, !mayYield)
		for _, op := range batch[:ran] {
			op.done <- fmt.Errorf("commit: %w", err)
		}
		return ran
	}
	db.count(ran, !mayYield)
	for i, op := range batch[:ran] {
		op.done <- errs[i]
	}
	return ran
}

// count adds a batch of ran writes to the writer's stats (first: writes
// that went first) before their callers hear of them, so that a caller
// that returned finds its write counted.
func (db *DB) count(ran int, first bool) {
	db.stats.commits.Add(1)
	db.stats.ops.Add(int64(ran))
	if first {
		db.stats.first.Add(int64(ran))
	}
}

// writeStatements are prepared once on the writer's connection.
type writeStatements struct {
	all []*sql.Stmt

	begin, commit, rollback, savepoint, rollbackTo, release *sql.Stmt

	claim, selectKey, complete, release_, insertCharge *sql.Stmt
	insertDone, traceRelease                           *sql.Stmt
	selectCharge, setBody                              *sql.Stmt
	insertGateway, selectGateway                       *sql.Stmt
}

func (w *writeStatements) prepare(conn *sql.Conn, schema pay.Schema) error {
	ctx := context.Background()
	p := func(dst **sql.Stmt, query string) error {
		s, err := conn.PrepareContext(ctx, query)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", strings.Fields(query)[0], err)
		}
		*dst = s
		w.all = append(w.all, s)
		return nil
	}
	err := errors.Join(
		p(&w.begin, "BEGIN IMMEDIATE"),
		p(&w.commit, "COMMIT"),
		p(&w.rollback, "ROLLBACK"),
		p(&w.savepoint, "SAVEPOINT op"),
		p(&w.rollbackTo, "ROLLBACK TO op"),
		p(&w.release, "RELEASE op"),
	)
	if schema.Holds("payments") {
		err = errors.Join(err,
			p(&w.claim, `INSERT INTO idempotency_keys
			(scope, key, method, path, fingerprint, order_id, amount_satang, status, created_at, locked_at, claim, charge_key)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'started', ?, ?, ?, ?)
			ON CONFLICT (scope, key) DO NOTHING RETURNING created_at`),
			p(&w.insertDone, `INSERT INTO idempotency_keys
			(scope, key, method, path, fingerprint, order_id, amount_satang, status, response_status, response_body,
			 created_at, locked_at, completed_at, claim, charge_key)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'done', ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, key) DO NOTHING`),
			p(&w.selectKey, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = ? AND key = ?`),
			p(&w.complete, `UPDATE idempotency_keys
			SET status = 'done', response_status = ?, response_body = ?, completed_at = ?
			WHERE scope = ? AND key = ? AND claim = ? AND status = 'started'`),
			p(&w.release_, `DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND claim = ? AND status = 'started'
			RETURNING order_id`),
			p(&w.traceRelease, `INSERT INTO released_keys (scope, key, order_id, cause, released_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (scope, key) DO UPDATE SET order_id = excluded.order_id, cause = excluded.cause, released_at = excluded.released_at`),
			p(&w.insertCharge, `INSERT INTO charges (id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope, idempotency_key) DO NOTHING`),
			p(&w.selectCharge, `SELECT `+chargeColumns+` FROM charges WHERE scope = ? AND idempotency_key = ?`),
			p(&w.setBody, `UPDATE idempotency_keys SET response_body = ? WHERE scope = ? AND key = ?`),
		)
	}
	if schema.Holds("ledger") {
		err = errors.Join(err,
			p(&w.insertGateway, `INSERT INTO gateway_charges (key, id, order_id, amount_satang, created_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING RETURNING id`),
			p(&w.selectGateway, `SELECT `+gatewayColumns+` FROM gateway_charges WHERE key = ?`),
		)
	}
	return err
}

func (w *writeStatements) close() {
	for _, s := range w.all {
		s.Close()
	}
}

// A DB is the whole payments store the server runs on.
var _ pay.Store = (*DB)(nil)
