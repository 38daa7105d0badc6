package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"paytwice/pay"
)

// A statement that acts on one key through its claim says the key must
// be started as status <> 'done', which the status's type (two values)
// makes the same thing: written status = 'started', it matches the index
// of keys by status, and PostgreSQL's planner, which expects few started
// keys, may scan all of them, dead entries included, and filter by key,
// instead of looking the key up in the primary key. With the partial
// index of started keys that an earlier schema had, at 16 clients, that
// read about a hundred index entries per save.
const keyColumns = `scope, key, method, path, fingerprint, order_id, amount_satang, status,
	response_status, response_body, created_at, locked_at, completed_at, claim, charge_key`

func scanKey(r pgx.Row) (pay.KeyRow, error) {
	var m maybeKey
	if err := r.Scan(m.dest()...); err != nil {
		return pay.KeyRow{}, err
	}
	k, _ := m.row() // every column but the answer's is NOT NULL
	return k, nil
}

const chargeColumns = `id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at`

func scanCharge(r pgx.Row) (pay.Charge, error) {
	var c pay.Charge
	err := r.Scan(&c.ID, &c.Scope, &c.Key, &c.OrderID, &c.AmountSatang, &c.GatewayRef, &c.CreatedAt)
	c.CreatedAt = c.CreatedAt.UTC()
	return c, err
}

// claimAttempts bounds how often Claim tries again when the row that
// beat it vanished before it could be read (its claim was released in
// between); each attempt either claims the key or reads its holder.
const claimAttempts = 5

// errKeyChurning is the (unlikely) outcome of a key that changed hands
// claimAttempts times while Claim looked at it.
var errKeyChurning = &pay.Error{Code: pay.EUNAVAILABLE, Message: "The key changed hands too often while it was being claimed; try again."}

// workMillis is a work's duration in whole milliseconds, rounded up so
// that the recorded deadline is never earlier than the work's own.
func workMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Claim records the key as started unless (scope, key) already exists.
// The claim itself is one INSERT … ON CONFLICT DO NOTHING RETURNING: of
// any number of requests on any number of servers, the primary key lets
// exactly one insert the row, and PostgreSQL makes the others wait until
// that insert commits or rolls back before they conflict. It commits on
// its own, so the claim is durable when Claim returns. A row committed
// before the statement began is read instead, without waiting for any
// lock on it, and answers the request.
//
// A key whose key row was pruned may still have its charge recorded. If
// that charge is for another order or amount, the key is not claimed.
//
// A database that refuses the connection (too many clients, starting up,
// unreachable) is an EUNAVAILABLE: nothing was claimed, and the caller
// may retry with the same key. So is a claim that waited ClaimLockWait
// for another claim of the key that has not committed (its server paused
// mid-statement), and one whose connection was terminated (57P01): a
// wait without a bound would take a connection per retry until the pool
// had none left for other keys.
func (db *DB) Claim(ctx context.Context, c pay.ClaimRequest) (pay.ClaimResult, error) {
	res, err := db.claim(ctx, c)
	return res, claimNotTaken(unreachable(err))
}

// ClaimLockWait bounds how long a claim waits for the lock on its key's
// row (lock_timeout), which another transaction may hold for as long as
// it likes. It is set on every connection of the store as it connects
// (see Open), not by each claim: set in the claim's own statement, it
// cost PostgreSQL more CPU per new payment than the claim's two index
// lookups together. So it bounds the lock waits of the store's other
// statements too: a release, a renewal or a room change waiting on a row
// that a paused transaction holds fails as the claim does, with nothing
// written; a save is tried again until it is saved (see Complete); the
// migrations lift the bound, to wait for another server migrating the
// same database.
const ClaimLockWait = 2 * time.Second

// claimNotTaken turns the errors of a claim that the database ended
// before it committed into EUNAVAILABLE: a lock wait past ClaimLockWait
// (55P03) and a terminated connection (57P01). The claim's statement
// commits on its own, so it did not happen, and a retry with the same key
// runs afresh.
func claimNotTaken(err error) error {
	switch sqlState(err) {
	case "55P03":
		return fmt.Errorf("%w (%v)", errKeyLocked, err)
	case "57P01":
		return fmt.Errorf("%w (%v)", errClaimTerminated, err)
	case "0A000":
		// A statement prepared before another server changed its tables
		// (a newer build's migration) is refused, once per connection,
		// before it runs: the refused statement is prepared afresh next
		// time, and this one recorded nothing.
		return fmt.Errorf("%w (%v)", errTablesChanged, err)
	}
	return err
}

var (
	errKeyLocked = &pay.Error{Code: pay.EUNAVAILABLE,
		Message: "Another server holds this key's row in a transaction that has not finished; nothing was recorded: retry with the same key."}
	errTablesChanged = &pay.Error{Code: pay.EUNAVAILABLE,
		Message: "The database's tables changed while this request was claiming its key (a newer server updated them); nothing was recorded: retry with the same key."}
	errClaimTerminated = &pay.Error{Code: pay.EUNAVAILABLE,
		Message: "The database ended the connection of this request's claim before it was recorded; nothing was recorded: retry with the same key."}
)

func (db *DB) claim(ctx context.Context, c pay.ClaimRequest) (pay.ClaimResult, error) {
	if err := db.need("payments"); err != nil {
		return pay.ClaimResult{}, err
	}
	now := db.now()
	token := c.Token
	if token == "" {
		token = pay.NewToken()
	}
	// A key this store claimed lately (a storm's losers, a replay of a
	// payment made here) is most likely held: one statement reads its row
	// and charge and inserts only if there is neither, so the repeat is
	// answered in one round trip.
	if db.recent.seen(c.Scope, c.Key) {
		return db.claimRepeat(ctx, c, now, token)
	}
	// Any other key is most likely new. One statement inserts the claim
	// unless the key's charge or its row is recorded: a new payment's claim
	// is one round trip, and a refused claim writes nothing. A claim it did
	// not insert (a replay of a payment made on another server, a key whose
	// charge refuses the request) reads why in a second statement, which
	// sees whatever the insert met.
	var claim string
	rows := 0
	_, err := db.direct(ctx, claimStatement, db.claimArgs(c, now, token), func(r directRow) error {
		rows++
		claim = string(r.vals[0])
		return nil
	})
	switch {
	case err != nil:
		return pay.ClaimResult{}, err
	case rows == 1:
		return pay.ClaimResult{Claimed: true, Claim: claim}, nil
	}
	return db.refused(ctx, c, now, token, claimAttempts)
}

// claimArgs writes the arguments of both claim statements (claimSQL and
// repeatSQL), which take the same thirteen.
func (db *DB) claimArgs(c pay.ClaimRequest, now time.Time, token string) func(*args) {
	return func(a *args) {
		a.text(c.Scope).text(c.Key).text(c.Method).text(c.Path).text(c.Fingerprint).text(c.OrderID).int(c.AmountSatang).
			time(now).text(token).text(c.ChargeKey).text(db.server).int(workMillis(c.WorkFor)).text(c.ChargeKeyOrKey())
	}
}

// claimRepeat claims a key that is most likely held, with the statement
// that also reads the key's row and charge (repeatSQL).
func (db *DB) claimRepeat(ctx context.Context, c pay.ClaimRequest, now time.Time, token string) (pay.ClaimResult, error) {
	var claim, chOrder pgtype.Text
	var chAmount pgtype.Int8
	var held maybeKey
	rows := 0
	_, err := db.direct(ctx, repeatStatement, db.claimArgs(c, now, token), func(r directRow) error {
		rows++
		// A new key's row holds its claim and nothing else: only a row
		// without one is scanned whole.
		if r.vals[0] != nil {
			claim = pgtype.Text{String: string(r.vals[0]), Valid: true}
			return nil
		}
		return r.scan(append([]any{&claim, &chOrder, &chAmount}, held.dest()...)...)
	})
	if err == nil && rows != 1 {
		err = fmt.Errorf("postgres: the claim's statement returned %d rows, not one", rows)
	}
	if err != nil {
		return pay.ClaimResult{}, err
	}
	if claim.Valid {
		return pay.ClaimResult{Claimed: true, Claim: claim.String}, nil
	}
	if res, ok, err := db.fromRead(ctx, c, now, token, claimAttempts, chOrder, chAmount, &held); ok || err != nil {
		return res, err
	}
	// The insert met a claim that was not committed when the statement
	// began: read who holds it now.
	return db.holder(ctx, c, now, token, claimAttempts)
}

// refused reads why a claim was not inserted: the key's charge and its
// row, in one statement. attempts bounds how often a holder that vanished
// is retried.
func (db *DB) refused(ctx context.Context, c pay.ClaimRequest, now time.Time, token string, attempts int) (pay.ClaimResult, error) {
	var chOrder pgtype.Text
	var chAmount pgtype.Int8
	var held maybeKey
	err := db.pool.QueryRow(ctx, refusedSQL, c.Scope, c.Key, c.ChargeKeyOrKey()).
		Scan(append([]any{&chOrder, &chAmount}, held.dest()...)...)
	if err != nil {
		return pay.ClaimResult{}, err
	}
	if res, ok, err := db.fromRead(ctx, c, now, token, attempts, chOrder, chAmount, &held); ok || err != nil {
		return res, err
	}
	// The claim the insert met was released since: the key is free again.
	return db.insertClaim(ctx, c, now, token, attempts-1)
}

// fromRead answers a claim that was not inserted from what was read of
// the key's charge and row; ok is false when neither was there. Of the
// charge only what decides the common case was read (its order and
// amount); the rest is read when the charge refuses the request, which
// is rare.
func (db *DB) fromRead(ctx context.Context, c pay.ClaimRequest, now time.Time, token string, attempts int,
	chOrder pgtype.Text, chAmount pgtype.Int8, held *maybeKey) (res pay.ClaimResult, ok bool, err error) {
	if chOrder.Valid {
		if chOrder.String != c.OrderID || chAmount.Int64 != c.AmountSatang {
			ch, err := scanCharge(db.pool.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges
				WHERE scope = $1 AND idempotency_key = $2`, c.Scope, c.ChargeKeyOrKey()))
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// Deleted since (a reset): the key is free.
				res, err = db.insertClaim(ctx, c, now, token, attempts)
				return res, true, err
			case err != nil:
				return pay.ClaimResult{}, true, err
			}
			return pay.ClaimResult{Reused: &ch}, true, nil
		}
		if row, ok := held.row(); ok {
			return pay.ClaimResult{Existing: row}, true, nil
		}
		// Pruned: a late retry of the same order may claim the key again.
		res, err = db.insertClaim(ctx, c, now, token, attempts)
		return res, true, err
	}
	if row, ok := held.row(); ok {
		return pay.ClaimResult{Existing: row}, true, nil
	}
	return pay.ClaimResult{}, false, nil
}

// recentKeys remembers the keys a store claimed lately, up to twice
// recentKeysKept of them: the newest in cur, the ones before in prev.
type recentKeys struct {
	mu        sync.Mutex
	cur, prev map[scopedKey]struct{}
}

type scopedKey struct{ scope, key string }

const recentKeysKept = 4096

// seen reports whether the key was noted lately, and notes it.
func (r *recentKeys) seen(scope, key string) bool {
	k := scopedKey{scope, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[k]; ok {
		return true
	}
	if _, ok := r.prev[k]; ok {
		return true
	}
	if r.cur == nil || len(r.cur) >= recentKeysKept {
		r.prev, r.cur = r.cur, make(map[scopedKey]struct{}, recentKeysKept)
	}
	r.cur[k] = struct{}{}
	return false
}

// maybeKey is a key row as keyColumns reads it, which a statement may
// not have found (every column NULL, as a LEFT JOIN gives it).
//
// Its fields are pgtype values, not pointers: pgx plans a scan for each
// column of every statement it runs, and a pointer to a pointer takes its
// slow path (reflection and two allocations per column), which for the
// fifteen columns a claim reads cost more than the rest of the claim's
// decoding.
type maybeKey struct {
	scope, key, method, path, fingerprint, orderID, status, claim, chargeKey pgtype.Text
	amount                                                                   pgtype.Int8
	responseStatus                                                           pgtype.Int4
	responseBody                                                             []byte
	created, locked, completed                                               pgtype.Timestamptz
}

// dest is where to scan keyColumns.
func (m *maybeKey) dest() []any {
	return []any{&m.scope, &m.key, &m.method, &m.path, &m.fingerprint, &m.orderID, &m.amount,
		&m.status, &m.responseStatus, &m.responseBody, &m.created, &m.locked, &m.completed, &m.claim, &m.chargeKey}
}

// row is the key row, if the statement found one.
func (m *maybeKey) row() (pay.KeyRow, bool) {
	if !m.key.Valid {
		return pay.KeyRow{}, false
	}
	k := pay.KeyRow{Scope: m.scope.String, Key: m.key.String, Method: m.method.String, Path: m.path.String,
		Fingerprint: m.fingerprint.String, OrderID: m.orderID.String, AmountSatang: m.amount.Int64,
		Status: m.status.String, ResponseBody: m.responseBody, CreatedAt: m.created.Time.UTC(),
		LockedAt: m.locked.Time.UTC(), Claim: m.claim.String, ChargeKey: m.chargeKey.String}
	if m.responseStatus.Valid {
		k.ResponseStatus = int(m.responseStatus.Int32)
	}
	if m.completed.Valid {
		k.CompletedAt = m.completed.Time.UTC()
	}
	return k, true
}

// insertClaimRow is the start of every claim's insert, up to its
// condition: the new started row, holding the claim's token and its work
// deadline ($12 milliseconds from now on the database's clock, if any).
const insertClaimRow = `INSERT INTO idempotency_keys
		(scope, key, method, path, fingerprint, order_id, amount_satang, status, created_at, locked_at, claim, charge_key,
		 claimed_by, work_until)
		SELECT $1, $2, $3, $4, $5, $6, $7, 'started', $8, $8, $9, $10, $11,
		 CASE WHEN $12::bigint > 0 THEN clock_timestamp() + $12::bigint * interval '1 millisecond' END`

// claimSQL is a claim's statement: it inserts the claim unless the key's
// charge is recorded (a key whose row was pruned) or its row is, and
// returns the claim it inserted. Its three conditions see one snapshot,
// taken as the statement begins: a row committed by then stops the insert
// before it is tried, so a claim of a row that another transaction holds
// (a save under way) does not wait for it; a claim that commits later
// makes the insert wait for it and do nothing.
//
// It is one INSERT, not a statement that also reads the key's row for the
// case it is refused: PostgreSQL prepares every part of a plan at every
// execution, run or not, and with the row's read in CTEs beside the
// insert a new payment's claim cost its backend about a tenth more CPU
// (pgbench, prepared statements) to save a replay one round trip.
// It is built once, not per claim.
var claimSQL = insertClaimRow + `
		WHERE NOT EXISTS (SELECT 1 FROM charges WHERE scope = $1 AND idempotency_key = $13)
		  AND NOT EXISTS (SELECT 1 FROM idempotency_keys WHERE scope = $1 AND key = $2)
		ON CONFLICT (scope, key) DO NOTHING RETURNING claim`

// repeatSQL is the claim of a key that is most likely held: it looks for
// the key's charge and row and, when there is neither, inserts the claim.
// The three parts see one snapshot, taken as the statement begins: a row
// committed by then is read and answers the request, and the insert is
// not tried; a claim that commits later makes the insert wait for it and
// do nothing. Its plan has more parts for PostgreSQL to prepare than
// claimSQL's, which is why a key not seen lately is claimed by claimSQL.
var repeatSQL = `WITH ch AS (
			SELECT order_id, amount_satang FROM charges WHERE scope = $1 AND idempotency_key = $13
		), kr AS (
			SELECT ` + keyColumns + ` FROM idempotency_keys WHERE scope = $1 AND key = $2
		), ins AS (
			` + insertClaimRow + `
			WHERE NOT EXISTS (SELECT 1 FROM ch) AND NOT EXISTS (SELECT 1 FROM kr)
			ON CONFLICT (scope, key) DO NOTHING RETURNING claim
		)
		SELECT ins.claim, ch.order_id, ch.amount_satang, ` + prefixed("kr.", keyColumns) + `
		FROM (SELECT 1) AS one LEFT JOIN ins ON true LEFT JOIN ch ON true LEFT JOIN kr ON true`

// repeatStatement is repeatSQL, prepared on each connection (direct.go).
var repeatStatement = statement{name: "paytwice_claim_repeat", sql: repeatSQL}

// refusedSQL reads what refused a claim: the key's charge (its order and
// amount) and the key's row, either possibly missing.
var refusedSQL = `SELECT ch.order_id, ch.amount_satang, ` + prefixed("kr.", keyColumns) + `
		FROM (SELECT 1) AS one
		LEFT JOIN charges ch ON ch.scope = $1 AND ch.idempotency_key = $3
		LEFT JOIN idempotency_keys kr ON kr.scope = $1 AND kr.key = $2`

// claimStatement is claimSQL, prepared on each connection (direct.go).
var claimStatement = statement{name: "paytwice_claim", sql: claimSQL}

// insertClaimSQL inserts a claim unless the key is held.
var insertClaimSQL = insertClaimRow + `
		ON CONFLICT (scope, key) DO NOTHING RETURNING claim`

// insertClaim inserts the claim unless the key is held, then reads the
// holder; attempts bounds how often a holder that vanished is retried.
func (db *DB) insertClaim(ctx context.Context, c pay.ClaimRequest, now time.Time, token string, attempts int) (pay.ClaimResult, error) {
	if attempts <= 0 {
		return pay.ClaimResult{}, errKeyChurning
	}
	var claim string
	err := db.pool.QueryRow(ctx, insertClaimSQL,
		c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID, c.AmountSatang, now, token, c.ChargeKey,
		db.server, workMillis(c.WorkFor)).Scan(&claim)
	if err == nil {
		return pay.ClaimResult{Claimed: true, Claim: claim}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return pay.ClaimResult{}, err
	}
	return db.holder(ctx, c, now, token, attempts-1)
}

// holder reads the row a claim conflicted with. Under READ COMMITTED this
// read sees it, unless it was released since: then the key is free again
// and the insert is tried again.
func (db *DB) holder(ctx context.Context, c pay.ClaimRequest, now time.Time, token string, attempts int) (pay.ClaimResult, error) {
	row, err := db.GetKey(ctx, c.Scope, c.Key)
	if pay.ErrorCode(err) == pay.ENOTFOUND {
		return db.insertClaim(ctx, c, now, token, attempts)
	}
	if err != nil {
		return pay.ClaimResult{}, err
	}
	return pay.ClaimResult{Existing: row}, nil
}

// CachedResponse always misses: a replay reads the key's row. Servers
// that share the database do not share a process's memory, so a cache
// here would go on replaying keys that another server pruned or reset.
func (db *DB) CachedResponse(scope, key string) (pay.Response, bool) { return pay.Response{}, false }

// Complete saves the response on the key the claim holds, with its charge
// if any, by the save rule (pay.SaveCompletion), in one transaction, and
// returns what was saved.
//
// A save waits for the locks it needs for as long as they are held: the
// gateway has answered, and what it did must be recorded. The lock waits
// of the store's connections end at ClaimLockWait, with nothing written,
// so a save whose wait ended so is tried again, until it is saved, fails
// otherwise, or ctx ends. Trying again is safe: the save acts through the
// claim's token, and tells its own charge from one recorded before it by
// the charge's id.
func (db *DB) Complete(ctx context.Context, c pay.Completion) (pay.Completed, error) {
	if err := db.need("payments"); err != nil {
		return pay.Completed{}, err
	}
	now := db.now()
	for {
		out, err := db.complete(ctx, c, now)
		if !lockWaitEnded(err) || ctx.Err() != nil {
			return out, err
		}
	}
}

// lockWaitEnded reports whether err is a statement's lock wait ended by
// lock_timeout (55P03), which leaves nothing of the statement's
// transaction.
func lockWaitEnded(err error) bool {
	return sqlState(err) == "55P03"
}

// sqlState is the SQLSTATE of the PostgreSQL error in err's chain, or ""
// when there is none. It allocates nothing, unlike errors.As with a
// pointer of the caller's, which escapes: it is asked of every claim's
// and every save's error, nil nearly always.
func sqlState(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// complete is one try of Complete.
func (db *DB) complete(ctx context.Context, c pay.Completion, now time.Time) (pay.Completed, error) {
	// The usual save is one statement, which commits on its own: the
	// charge inserted and the key, named by its fencing token, marked
	// done. A fault that must act before the commit needs a transaction.
	var done *fastSave
	if c.BeforeCommit == nil {
		f, err := db.saveFast(ctx, c, now)
		if err != nil {
			return pay.Completed{}, err
		}
		if f.marked {
			return pay.Completed{Response: pay.Response{Fingerprint: c.Fingerprint, Status: c.Status, Body: c.Body}}, nil
		}
		done = &f
	}
	// Something was not as usual (the claim was lost, or the charge was
	// already recorded): the save rule decides, in a transaction, knowing
	// what the single statement did.
	var out pay.Completed
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var err error
		if out, _, err = pay.SaveCompletion(saveTx{ctx, tx, now, done}, c); err != nil {
			return err
		}
		if c.BeforeCommit != nil {
			return c.BeforeCommit()
		}
		return nil
	})
	if err != nil {
		return pay.Completed{}, err
	}
	return out, nil
}

// fastSave is what the single statement of a save did.
type fastSave struct {
	inserted bool // the charge was inserted
	marked   bool // the key was marked done (only ever with the charge inserted, when there is one)
}

// saveFast inserts c's charge, if any, and marks the key done through its
// claim only if the charge was inserted: one statement, so both or the
// charge alone are committed, never the key without its charge.
func (db *DB) saveFast(ctx context.Context, c pay.Completion, now time.Time) (fastSave, error) {
	if c.Charge == nil {
		tag, err := db.pool.Exec(ctx, `UPDATE idempotency_keys
			SET status = 'done', response_status = $1, response_body = $2, completed_at = $3
			WHERE scope = $4 AND key = $5 AND claim = $6 AND status <> 'done'`,
			c.Status, c.Body, now, c.Scope, c.Key, c.Claim)
		return fastSave{marked: err == nil && tag.RowsAffected() == 1}, err
	}
	ch := c.Charge
	rows := 0
	_, err := db.direct(ctx, saveStatement, func(a *args) {
		a.int(int64(c.Status)).bytes(c.Body).time(now).text(c.Scope).text(c.Key).text(c.Claim).
			text(ch.ID).text(c.ChargeKeyOrKey()).text(ch.OrderID).int(ch.AmountSatang).text(ch.GatewayRef).time(ch.CreatedAt)
	}, func(r directRow) error {
		rows++
		return nil
	})
	switch {
	case err != nil:
		return fastSave{}, err
	case rows == 1:
		return fastSave{inserted: true, marked: true}, nil
	}
	// The key was not marked: either the charge was recorded already (by
	// the sweeper, or an earlier try), or the claim was lost after the
	// charge went in. Which one, the charge's id tells: this completion's
	// own is new.
	var id string
	err = db.pool.QueryRow(ctx, `SELECT id FROM charges WHERE scope = $1 AND idempotency_key = $2`,
		c.Scope, c.ChargeKeyOrKey()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fastSave{}, nil // deleted since (a reset)
	}
	return fastSave{inserted: err == nil && id == ch.ID}, err
}

// saveStatement is the usual save, one statement: the charge inserted
// and the key, named by its fencing token, marked done only if the
// charge was inserted. It returns a row when the key was marked. The
// UPDATE is the statement itself, not a third part beside two CTEs whose
// results are selected: a plan with fewer parts to prepare at every
// execution, about a twelfth less of PostgreSQL's CPU for a claim and a
// save (pgbench, prepared statements); what the charge's insert did is
// read afterwards when the key was not marked, which is rare.
var saveStatement = statement{name: "paytwice_save", sql: `WITH ins AS (
			INSERT INTO charges (` + chargeColumns + `)
			VALUES ($7, $4, $8, $9, $10, $11, $12) ON CONFLICT (scope, idempotency_key) DO NOTHING RETURNING 1
		)
		UPDATE idempotency_keys
		SET status = 'done', response_status = $1, response_body = $2, completed_at = $3
		WHERE scope = $4 AND key = $5 AND claim = $6 AND status <> 'done' AND EXISTS (SELECT 1 FROM ins)
		RETURNING 1`}

// saveTx is a transaction as the save rule uses it. fast, when set, is
// what the single statement already did: its steps are not done again.
type saveTx struct {
	ctx  context.Context
	tx   pgx.Tx
	now  time.Time
	fast *fastSave
}

func (t saveTx) MarkDone(c pay.Completion) (bool, error) {
	if t.fast != nil && (c.Charge == nil || t.fast.inserted) {
		// Tried, with the charge inserted: the claim is lost.
		return t.fast.marked, nil
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE idempotency_keys
		SET status = 'done', response_status = $1, response_body = $2, completed_at = $3
		WHERE scope = $4 AND key = $5 AND claim = $6 AND status <> 'done'`,
		c.Status, c.Body, t.now, c.Scope, c.Key, c.Claim)
	return err == nil && tag.RowsAffected() == 1, err
}

func (t saveTx) InsertCharge(c pay.Completion) (bool, error) {
	if t.fast != nil && t.fast.inserted {
		return true, nil
	}
	ch := c.Charge
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO charges (`+chargeColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (scope, idempotency_key) DO NOTHING`,
		ch.ID, c.Scope, c.ChargeKeyOrKey(), ch.OrderID, ch.AmountSatang, ch.GatewayRef, ch.CreatedAt)
	return err == nil && tag.RowsAffected() == 1, err
}

func (t saveTx) RecordedCharge(c pay.Completion) (pay.Charge, error) {
	return scanCharge(t.tx.QueryRow(t.ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE scope = $1 AND idempotency_key = $2`, c.Scope, c.ChargeKeyOrKey()))
}

func (t saveTx) SetBody(c pay.Completion, body []byte) error {
	_, err := t.tx.Exec(t.ctx, `UPDATE idempotency_keys SET response_body = $1 WHERE scope = $2 AND key = $3`,
		body, c.Scope, c.Key)
	return err
}

func (t saveTx) InsertDone(c pay.Completion, r pay.Response) (bool, error) {
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO idempotency_keys
		(scope, key, method, path, fingerprint, order_id, amount_satang, status, response_status, response_body,
		 created_at, locked_at, completed_at, claim, charge_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'done', $8, $9, $10, $10, $10, $11, $12)
		ON CONFLICT (scope, key) DO NOTHING`,
		c.Scope, c.Key, c.Method, c.Path, c.Fingerprint, c.OrderID, c.AmountSatang, r.Status, r.Body, t.now, c.Claim, c.ChargeKey)
	return err == nil && tag.RowsAffected() == 1, err
}

func (t saveTx) Key(c pay.Completion) (pay.KeyRow, bool, error) {
	row, err := scanKey(t.tx.QueryRow(t.ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = $1 AND key = $2`, c.Scope, c.Key))
	if errors.Is(err, pgx.ErrNoRows) {
		return pay.KeyRow{}, false, nil
	}
	return row, err == nil, err
}

// Release deletes a started key held by claim, so that a retry runs
// afresh, and leaves a trace of the release (released_keys) in the same
// statement, so that the order's look-up can say what became of it. It
// reports whether a row was deleted; done keys, and keys held by another
// claim, are never released.
func (db *DB) Release(ctx context.Context, scope, key, claim string, cause pay.ReleaseCause) (bool, error) {
	if err := db.need("payments"); err != nil {
		return false, err
	}
	tag, err := db.pool.Exec(ctx, `WITH gone AS (DELETE FROM idempotency_keys
			WHERE scope = $1 AND key = $2 AND claim = $3 AND status <> 'done'
			RETURNING scope, key, order_id)
		INSERT INTO released_keys (scope, key, order_id, cause, released_at)
		SELECT scope, key, order_id, $4, $5 FROM gone
		ON CONFLICT (scope, key) DO UPDATE SET order_id = excluded.order_id, cause = excluded.cause, released_at = excluded.released_at`,
		scope, key, claim, string(cause), db.now())
	return err == nil && tag.RowsAffected() == 1, err
}

// RenewWork makes a started key's work deadline (work_until) lease from
// now on the database's clock, unless it is later already: another
// server's sweeper leaves the key alone until that deadline has passed,
// and a server that stops renewing (it died) leaves its key free soon
// after.
func (db *DB) RenewWork(ctx context.Context, scope, key, claim string, lease time.Duration) error {
	if err := db.need("payments"); err != nil {
		return err
	}
	_, err := db.pool.Exec(ctx, `UPDATE idempotency_keys
		SET work_until = GREATEST(work_until, clock_timestamp() + $4 * interval '1 millisecond')
		WHERE scope = $1 AND key = $2 AND claim = $3 AND status <> 'done'`, scope, key, claim, lease.Milliseconds())
	return err
}

// sweepBatch bounds how many started keys one call of StartedBefore takes.
const sweepBatch = 500

// StartedBefore returns the started keys locked before cutoff, oldest
// first: the sweeper's candidates. Every server runs a sweeper, so the
// selection also takes the keys for this server: it skips the rows
// another server is selecting at this moment (FOR UPDATE SKIP LOCKED) and
// the ones another server's sweeper took less than the sweep lease ago,
// and marks the rest as this server's. Two servers therefore never close
// the same key; and if one did anyway (a lease outlived by a slow
// gateway), the fencing token would let only the first close count.
// Keys are found by created_at, which equals locked_at in every row, in
// the index of keys by status and creation time.
//
// Taking a key changes neither its claim nor its lock time: a request
// still running on this server keeps its key, and a key this server
// passes over is left to it for the lease, then to anyone.
//
// The cutoff is on this server's demo clock, which a presenter may warp,
// and the sweeper only knows which of its own claims are still running.
// So a key claimed here is judged by the cutoff, but a key another server
// claimed is taken only once it has really (on the database's clock) been
// held for as long as the cutoff asks, however far any demo clock has
// moved, and once the work deadline its claim recorded (work_until) has
// passed on that clock too: a request's work is bounded by the gateway
// time-out, shorter than the lock timeout, except while step mode holds
// it, which may last minutes; past both, the key has no live request left.
//
// A key whose claim names a life that has ended (life.go) is taken at
// once, whatever its age, lease or sweep lease: nobody is working on it
// any more. That is looked at only once PostgreSQL itself has been up for
// lifeSettle, so that servers that lost their life connections to a
// database restart have reconnected them.
func (db *DB) StartedBefore(ctx context.Context, cutoff time.Time) ([]pay.KeyRow, error) {
	held := max(db.now().Sub(cutoff), 0)
	rows, err := db.pool.Query(ctx, `WITH settled AS (
			SELECT pg_postmaster_start_time() < clock_timestamp() - $7 * interval '1 millisecond' AS yes)
		UPDATE idempotency_keys k
		SET sweep_owner = $2, sweep_until = clock_timestamp() + $3 * interval '1 millisecond'
		FROM (SELECT scope, key FROM idempotency_keys, settled
			WHERE status = 'started'
			  AND ((created_at < $1
			        AND (claimed_by = $2 OR (claimed_at < clock_timestamp() - $5 * interval '1 millisecond'
			             AND (work_until IS NULL OR work_until < clock_timestamp())))
			        AND (sweep_owner IS NULL OR sweep_owner = $2 OR sweep_until < clock_timestamp()))
			    OR (settled.yes AND claimed_by <> $2 AND `+lifeEnded("claimed_by", "$6")+`
			        AND (sweep_owner IS NULL OR sweep_owner = $2 OR sweep_until < clock_timestamp() OR `+lifeEnded("sweep_owner", "$6")+`)))
			ORDER BY created_at, key
			LIMIT $4
			FOR UPDATE OF idempotency_keys SKIP LOCKED) pick
		WHERE k.scope = pick.scope AND k.key = pick.key
		RETURNING `+prefixed("k.", keyColumns),
		cutoff, db.server, db.lease.Milliseconds(), sweepBatch, held.Milliseconds(), lifePrefix, lifeSettle.Milliseconds())
	if err != nil {
		return nil, err
	}
	keys, err := collectKeys(rows)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(keys, func(a, b pay.KeyRow) int {
		if c := a.LockedAt.Compare(b.LockedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return keys, nil
}

// prefixed qualifies every column of a column list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func collectKeys(rows pgx.Rows) ([]pay.KeyRow, error) {
	defer rows.Close()
	var keys []pay.KeyRow
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// GetKey reads one key row.
func (db *DB) GetKey(ctx context.Context, scope, key string) (pay.KeyRow, error) {
	k, err := scanKey(db.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE scope = $1 AND key = $2`, scope, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return k, pay.Errorf(pay.ENOTFOUND, "No idempotency key %q in this scope.", key)
	}
	return k, err
}

// RecentKeys returns up to limit keys, newest first (by created_at, which
// equals locked_at in this store, then key), read by newestKeysSQL.
func (db *DB) RecentKeys(ctx context.Context, limit int) ([]pay.KeyRow, error) {
	rows, err := db.pool.Query(ctx, recentKeysSQL, limit)
	if err != nil {
		return nil, err
	}
	return collectKeys(rows)
}

// KeyCounts counts the key rows by status.
func (db *DB) KeyCounts(ctx context.Context) (started, done int, err error) {
	err = db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'started'), count(*) FILTER (WHERE status = 'done')
		FROM idempotency_keys`).Scan(&started, &done)
	return started, done, err
}

// GetCharge reads one charge of a scope by its id. Another scope's charge
// is reported as not found.
func (db *DB) GetCharge(ctx context.Context, scope, id string) (pay.Charge, error) {
	c, err := scanCharge(db.pool.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges WHERE id = $1 AND scope = $2`, id, scope))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, pay.Errorf(pay.ENOTFOUND, "No charge %q.", id)
	}
	return c, err
}

func (db *DB) queryCharges(ctx context.Context, query string, args ...any) ([]pay.Charge, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	charges := []pay.Charge{}
	for rows.Next() {
		c, err := scanCharge(rows)
		if err != nil {
			return nil, err
		}
		charges = append(charges, c)
	}
	return charges, rows.Err()
}

// ChargesByOrder lists a scope's charges for one order, oldest first,
// with those of the lab's unguarded table: a charge one of its mistakes
// made is a charge the customer paid.
func (db *DB) ChargesByOrder(ctx context.Context, scope, orderID string) ([]pay.Charge, error) {
	return db.queryCharges(ctx, `SELECT `+chargeColumns+` FROM charges WHERE scope = $1 AND order_id = $2
		UNION ALL SELECT `+chargeColumns+` FROM lab_loose_charges WHERE scope = $1 AND order_id = $2
		ORDER BY created_at, id`, scope, orderID)
}

// RecentCharges returns up to limit charges of every scope, newest first,
// through the index of charges by time: the live pages' model asks for
// them each time it loads, which under load is often (see migration 010).
func (db *DB) RecentCharges(ctx context.Context, limit int) ([]pay.Charge, error) {
	return db.queryCharges(ctx, recentChargesSQL, limit)
}

// recentChargesSQL reads the newest $1 charges.
const recentChargesSQL = `SELECT ` + chargeColumns + ` FROM charges ORDER BY created_at DESC, id DESC LIMIT $1`

// CountCharges counts every charge.
func (db *DB) CountCharges(ctx context.Context) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n)
	return n, err
}

// newestKeysSQL selects columns of the newest $1 keys, newest first:
// the newest of each status through the index of keys by status and
// creation time, then the newest of both.
func newestKeysSQL(columns string) string {
	return `SELECT ` + columns + ` FROM (
			(SELECT * FROM idempotency_keys WHERE status = 'started' ORDER BY created_at DESC, key LIMIT $1)
			UNION ALL
			(SELECT * FROM idempotency_keys WHERE status = 'done' ORDER BY created_at DESC, key LIMIT $1)
		) recent ORDER BY created_at DESC, key LIMIT $1`
}

// recentKeysSQL reads the newest $1 key rows (RecentKeys).
var recentKeysSQL = newestKeysSQL(keyColumns)
