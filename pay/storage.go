package pay

import (
	"context"
	"time"
)

// firstKey marks a context whose writes go first (WriteFirst).
type firstKey struct{}

// WriteFirst returns ctx marked so that a store whose writes queue for
// one writer (store.DB) runs the writes made under it before everyone
// else's queued: each waits at most for the write being run, never for a
// queue of others. The room's presenter pays under it: a class flooding
// the writer is then never ahead of the presenter.
func WriteFirst(ctx context.Context) context.Context {
	return context.WithValue(ctx, firstKey{}, true)
}

// WritesFirst says whether ctx was marked by WriteFirst.
func WritesFirst(ctx context.Context) bool {
	first, _ := ctx.Value(firstKey{}).(bool)
	return first
}

// Storage keeps the idempotency keys and the charges. The SQLite store
// implements it (store.DB); every backend must pass the contract suite in
// store/storetest.
//
// Every claim carries a fencing token of its own. Complete and Release
// act only on the claim they name: a request whose claim was closed or
// released meanwhile can never touch a key that is now someone else's.
type Storage interface {
	// CachedResponse returns a done key's saved response from memory. A
	// miss says nothing: the key may still exist.
	CachedResponse(scope, key string) (Response, bool)
	// Claim records the key as started unless (scope, key) exists, in one
	// atomic step that exactly one of many concurrent callers wins, and is
	// durable when it returns. A loser gets the row that holds the key. A
	// key whose recorded charge is for another order or amount is not
	// claimed: Reused is that charge.
	Claim(ctx context.Context, c ClaimRequest) (ClaimResult, error)
	// Complete saves the outcome on the key the claim holds, with its
	// charge, in one transaction. When the claim is gone the charge is
	// still recorded, and the key written again if nobody holds it. When
	// the key's charge is already recorded with the same gateway reference,
	// it is not recorded twice and a 201 answers that charge.
	Complete(ctx context.Context, c Completion) (Completed, error)
	// Release deletes a started key held by claim, so a retry runs afresh,
	// and keeps a trace of the release (its order, cause and time) for the
	// order's look-up, until the trace is pruned like a done key.
	Release(ctx context.Context, scope, key, claim string, cause ReleaseCause) (bool, error)
	// StartedBefore lists the keys started before cutoff, oldest first:
	// the sweeper's candidates.
	StartedBefore(ctx context.Context, cutoff time.Time) ([]KeyRow, error)
	// RenewWork tells the sweepers that the work of the started key held
	// by claim is alive though paused: none takes the key for lease from
	// now (a lease, renewed while the pause lasts, so that the key of a
	// server that died is free soon after). A key no longer started, or
	// held by another claim, is left alone. A store that judges keys only
	// by their lock time (SQLite) makes it now, which keeps the key for
	// the sweeper's lock timeout: callers pass that as lease.
	RenewWork(ctx context.Context, scope, key, claim string, lease time.Duration) error
}

// Store is the whole contract of a payments database: the protocol's
// storage, the reads the pages and the API make, retention, reset, and the
// lab's deliberately unguarded writes. The SQLite store (store.DB) and the
// PostgreSQL store (store/postgres.DB) implement it, and both pass the
// contract suite in store/storetest.
type Store interface {
	Storage
	GetKey(ctx context.Context, scope, key string) (KeyRow, error)
	RecentKeys(ctx context.Context, limit int) ([]KeyRow, error)
	KeyCounts(ctx context.Context) (started, done int, err error)
	GetCharge(ctx context.Context, scope, id string) (Charge, error)
	ChargesByOrder(ctx context.Context, scope, orderID string) ([]Charge, error)
	// OrderRecord reads, in one snapshot, all a scope keeps about one
	// order: what its look-up (LookUpOrder) answers from.
	OrderRecord(ctx context.Context, scope, orderID string) (OrderRecord, error)
	RecentCharges(ctx context.Context, limit int) ([]Charge, error)
	CountCharges(ctx context.Context) (int, error)
	Prune(ctx context.Context, cutoff time.Time) (Pruned, error)
	Reset(ctx context.Context) error
	// SaveAnswerCounts keeps what one server's life (origin) has answered
	// since the room's reset gen, replacing what it kept before, and
	// forgets the counts kept for earlier resets.
	SaveAnswerCounts(ctx context.Context, origin string, gen uint64, c AnswerCounts) error
	// AnswerCounts reads every origin's counts kept for the room's reset
	// gen.
	AnswerCounts(ctx context.Context, gen uint64) (map[string]AnswerCounts, error)

	// RecordWorkshopCharge keeps c in the books of the workshop gateway
	// of student (web/workshop) unless that gateway holds c.Key already,
	// and returns the charge that holds the key, whether this call kept
	// it, and the books' tally after it: each student's gateway is
	// idempotent by key, across restarts and every server sharing the
	// store. With keep > 0, a new charge that takes the books past keep
	// prunes their oldest in the same transaction, counted in Pruned. A
	// student whose books DeleteWorkshopBooks deleted is refused with
	// ErrWorkshopStudentRemoved, in the same transaction: no row is kept
	// for a student removed, whichever server the charge reached.
	RecordWorkshopCharge(ctx context.Context, student string, c GatewayCharge, keep int) (GatewayCharge, bool, WorkshopTally, error)
	// WorkshopChargesByOrder reads the newest limit charges of orderID in
	// student's gateway, oldest first, and how many the order holds.
	WorkshopChargesByOrder(ctx context.Context, student, orderID string, limit int) ([]GatewayCharge, int, error)
	// WorkshopCharges reads the newest limit charges of student's
	// gateway, oldest first, and the books' tally.
	WorkshopCharges(ctx context.Context, student string, limit int) ([]GatewayCharge, WorkshopTally, error)
	// WorkshopTallies reads the tally of every student's books that
	// holds or pruned a charge, by student, in one snapshot.
	WorkshopTallies(ctx context.Context) (map[string]WorkshopTally, error)
	// DeleteWorkshopBooks deletes the books of the students named, their
	// charges and their pruned count, and remembers them as removed: a
	// charge of theirs recorded at the same time is deleted with the
	// books, and one afterwards refused. It also forgets the students
	// removed more than WorkshopRemovedFor before (by the store's clock):
	// removals are the only rows it adds, so what it remembers is at most
	// a day's removals.
	DeleteWorkshopBooks(ctx context.Context, students ...string) error

	LabInsertKeyUnguarded(ctx context.Context, c ClaimRequest) (string, error)
	LabRecordCharge(ctx context.Context, ch Charge) error
	LabLooseFindKey(ctx context.Context, scope, key string) (LabLooseKey, bool, error)
	LabLooseInsertKey(ctx context.Context, c ClaimRequest, request string) (rowID int64, rows int, err error)
	LabLooseComplete(ctx context.Context, rowID int64, status int, body []byte, ch *Charge, request string) (charges int, err error)
	// LabLooseRelease deletes one loose key row that is still started:
	// its request stopped before it called the gateway, so a retry with
	// the key finds nothing of it.
	LabLooseRelease(ctx context.Context, rowID int64) error
	LabLooseCharges(ctx context.Context) ([]Charge, error)
	LabReset(ctx context.Context) error
	LabMeasure(ctx context.Context) (LabChargeGroups, error)
	// LabRows calls fn with every charge of both charge tables and every
	// row of the unguarded key table: what the lab's running counts are
	// rebuilt from.
	LabRows(ctx context.Context, fn func(LabRow)) error
	LabScanKeys(ctx context.Context, fn func(where, key string)) error
}

// AnswerCounts is what one server answered, as the live board counts it:
// the payment requests received and, of those, the ones refused before
// any work, those whose answer was lost, the replays, the 409s and the
// 422s. The board's counters are not read from the keys and charges, so
// each server keeps its own in the books, and a restarted server starts
// from them rather than from zero.
type AnswerCounts struct {
	Requests, Rejected, Lost, Replays, Conflicts, Mismatches int64
}

// Gateway is the payment provider. It is idempotent by the key it is
// given: charging a key twice returns the first charge.
type Gateway interface {
	Charge(ctx context.Context, key, orderID string, amountSatang int64) (GatewayCharge, error)
	Lookup(ctx context.Context, key string) (GatewayCharge, bool, error)
}

// ClaimRequest describes the request that wants to own a key.
type ClaimRequest struct {
	Scope, Key, Method, Path, Fingerprint string
	OrderID                               string
	AmountSatang                          int64
	// ChargeKey is the key the charge is recorded under and the gateway is
	// called with; "" means Key. Only the lab sets it.
	ChargeKey string
	// WorkFor is how long the claimed request's work may still run once
	// the key is claimed (its work context's deadline; while step mode
	// holds the request, RenewWork renews it as a lease); 0 when unknown.
	// A store that several servers share records it, so that another
	// server's sweeper leaves the key alone until that deadline has
	// passed; a store of one server needs it not, since its sweeper knows
	// which of its claims are running.
	WorkFor time.Duration
	// Token is the fencing token a won claim carries; "" lets the store
	// make one. Pay makes it, so that the claim counts as running here
	// from before it commits: a repeat of the request that meets the
	// claim must never be told that nobody works on it.
	Token string
}

// ChargeKeyOrKey is the key the request's charge is recorded under.
func (c ClaimRequest) ChargeKeyOrKey() string {
	if c.ChargeKey != "" {
		return c.ChargeKey
	}
	return c.Key
}

// ClaimRequestOf is the request a key row was claimed for.
func ClaimRequestOf(k KeyRow) ClaimRequest {
	return ClaimRequest{Scope: k.Scope, Key: k.Key, Method: k.Method, Path: k.Path, Fingerprint: k.Fingerprint,
		OrderID: k.OrderID, AmountSatang: k.AmountSatang, ChargeKey: k.ChargeKey}
}

// ClaimResult tells whether the claim won. When it won, Claim is the
// claim's fencing token. When it lost, Existing is the row that holds the
// key, read in the same transaction. When the key's charge is kept for
// another order, nothing is claimed and Reused is that charge.
type ClaimResult struct {
	Claimed  bool
	Claim    string
	Existing KeyRow
	Reused   *Charge
}

// Completion is the outcome of a claimed request, to be saved on its key.
type Completion struct {
	// ClaimRequest is the request as it was claimed: a completion whose
	// claim is gone may have to write the key row again.
	ClaimRequest
	// Claim is the fencing token Claim returned.
	Claim  string
	Status int
	Body   []byte
	// Charge, when set, is recorded in the same transaction that marks the
	// key done, under the request's charge key: the money and the saved
	// response appear together or not at all.
	Charge *Charge
	// BeforeCommit, when set, runs inside the transaction after its writes;
	// an error undoes them all and is returned. The "fails halfway" fault
	// uses it.
	BeforeCommit func() error
}

// Completed is what Complete saved.
type Completed struct {
	// Response is what the request answers: the completion's own, unless
	// the key's charge was already recorded (then its 201), or the claim
	// was gone and the key is done with the same request's answer.
	Response
	// ClaimLost says the claim was gone when the completion arrived. The
	// charge was recorded all the same.
	ClaimLost bool
	// ChargeExisted says the key's charge had been recorded before: a
	// pruned key retried late, or the sweeper got there first.
	ChargeExisted bool
}

// WorkshopRemovedFor is how long the store remembers a removed workshop
// student (DeleteWorkshopBooks): long past the time any charge of theirs
// can still be on its way to the books. A charge reaches the books only
// through a gateway of a server that knows the student, and each server
// forgets a removed student when it hears of the removal on the relay,
// or at its next read of the kept workshop (a save, a board, its relay
// listening again); a charge already inside the gateway then lasts at
// most its latency and held answer (10 s each) and one write. A day
// covers a workshop (90 minutes) many times over, and a server whose
// relay and store stayed out of reach all that time writes no charge.
const WorkshopRemovedFor = 24 * time.Hour

// ErrWorkshopStudentRemoved is RecordWorkshopCharge's refusal of a charge
// of a workshop student whose books were deleted (DeleteWorkshopBooks).
var ErrWorkshopStudentRemoved = Errorf(ENOTFOUND, "the presenter removed this workshop student: their gateway's books take no more charges")
