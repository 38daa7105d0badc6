package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"paytwice/pay"
)

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
