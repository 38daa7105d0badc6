package pay

import (
	"context"
	"errors"
	"time"
)

// The names below are the storage vocabulary both backends (store, SQLite,
// and store/postgres) share with the code that calls them: neither backend
// imports the other.

// Schema says which tables a database holds.
type Schema int

const (
	// SchemaAll keeps the payments and the gateway's ledger in one
	// database: simple for tests and small setups.
	SchemaAll Schema = iota
	// SchemaPayments holds only the idempotency keys and the charges.
	SchemaPayments
	// SchemaLedger holds only the simulated gateway's ledger. In a
	// database of its own the gateway commits (and fsyncs) in parallel
	// with the payments, as a real provider's database would.
	SchemaLedger
)

// Holds reports whether the schema holds a part: "payments" or "ledger".
func (s Schema) Holds(part string) bool {
	switch s {
	case SchemaPayments:
		return part == "payments"
	case SchemaLedger:
		return part == "ledger"
	}
	return true
}

// ErrChargeDiffers means the key already holds a charge with another
// gateway reference: a completion never answers with another charge.
var ErrChargeDiffers = &Error{Code: EINTERNAL, Message: "This key already holds a different charge; nothing was recorded twice."}

// PrunedKey identifies a key removed by Prune.
type PrunedKey struct{ Scope, Key string }

// Pruned is what a prune deleted: how many keys, and one of them (the
// only one when Keys is 1, which the pages name). A prune does not return every key
// it deleted: a million of them held until it ends would be a heap the
// garbage collector marks again and again while payments wait for it.
type Pruned struct {
	Keys  int
	First PrunedKey
}

// PacePrune waits, between two batches of a prune, as long as the last
// batch took, or until ctx ends. A prune run flat out keeps the database
// busy and a core with it; the payments beside it, on two busy cores,
// then wait behind its batches in nearly every commit and for the CPU.
// Paced, it takes about twice as long and leaves the other half of the
// time to the payments.
func PacePrune(ctx context.Context, took time.Duration) error {
	t := time.NewTimer(took)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Add counts a batch of deleted keys.
func (p *Pruned) Add(batch []PrunedKey) {
	if len(batch) == 0 {
		return
	}
	if p.Keys == 0 {
		p.First = batch[0]
	}
	p.Keys += len(batch)
}

// LabKeyPrefix starts every key that the lab records on a charge on its
// own behalf. It contains a space, which a client's Idempotency-Key can
// never contain (only visible ASCII is accepted), so a lab charge can be
// told from a real one, and a client cannot forge one.
const LabKeyPrefix = "lab "

// ErrConstraint wraps a write that a PRIMARY KEY or UNIQUE constraint
// refused. The lab shows its message: it is what saved the money.
var ErrConstraint = errors.New("a uniqueness constraint refused the write")

// LabLooseKey is a row of lab_loose_keys, the lab's key table without
// constraints.
type LabLooseKey struct {
	RowID          int64
	Scope, Key     string
	Fingerprint    string
	OrderID        string
	AmountSatang   int64
	Status         string
	ResponseStatus int
	ResponseBody   []byte
	Request        string
	CreatedAt      time.Time
}

// LabGroup counts the charges that share an order (or, for the loose
// table, a key).
type LabGroup struct {
	Scope, OrderID, Key string
	Charges             int
	Keys                int  // distinct idempotency keys among them
	Saved500            bool // one of those keys saved a 500
}

// LabTable names the table a LabRow was read from.
type LabTable int

// The tables the lab's counts are made of.
const (
	LabCharges      LabTable = iota // charges: the real protocol's and the lab's own, under LabKeyPrefix
	LabLooseCharges                 // lab_loose_charges, the unguarded charge table
	LabLooseKeys                    // lab_loose_keys, the unguarded key table
)

// LabRow is one row the lab's running counts are rebuilt from (LabRows):
// a charge of either charge table, or a row of the unguarded key table.
type LabRow struct {
	Table LabTable
	// ID is the charge's id, or the loose key row's id in decimal.
	ID                  string
	Scope, Key, OrderID string
	CreatedAt           time.Time
	// Saved500 says the charge's key row holds a saved 500 (LabCharges
	// only).
	Saved500 bool
}

// LabChargeGroups is what the lab measures in the database.
type LabChargeGroups struct {
	// NoKey: charges made by the "no idempotency key" mode, per order.
	NoKey []LabGroup
	// KeyOnly: charges made while the key table was the only memory, per
	// order.
	KeyOnly []LabGroup
	// Loose: charges in the unguarded table, per key.
	Loose []LabGroup
	// LooseKeyRows is how many rows the unguarded key table holds under
	// clients' own keys: check-then-insert's. A mode that files its rows
	// there under LabKeyPrefix counts them from Loose.
	LooseKeyRows int
	// ManyKeys: orders charged by the real protocol under more than one
	// client key (what a client that changes keys produces).
	ManyKeys []LabGroup
}

// Where a key can be stored, for LabScanKeys.
const (
	WhereKeyTable = "key table"
	WhereCharges  = "charges"
	WhereGateway  = "gateway ledger"
)
