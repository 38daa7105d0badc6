package lab

// What the lab measures. Every number comes from the database (charges
// per order or per key) or from the server's own count of what it
// answered, never from a page: a page can only show what really happened.

// ChargeOutcome counts the charges a mistake made.
type ChargeOutcome struct {
	Charges int `json:"charges"`
	// ChargedTwice is how many orders (or keys, for check-then-insert)
	// were charged more than once.
	ChargedTwice int `json:"charged_twice"`
	// ExtraCharges is every charge after the first of its order (or key).
	ExtraCharges int `json:"extra_charges"`
	// Twice lists what was charged more than once, oldest first.
	Twice []string `json:"twice"`
}

// RaceOutcome is check-then-insert's: charges in the unguarded table per
// key, and how many times the constraint refused a loser.
type RaceOutcome struct {
	ChargeOutcome
	KeyRows            int   `json:"key_rows"`
	ConstraintRefusals int64 `json:"constraint_refusals"`
}

// LockOutcome is the lock in memory's: charges in the unguarded table per
// key, and how many requests waited for this server's lock.
type LockOutcome struct {
	ChargeOutcome
	// LockWaits counts the requests that waited for this server's lock
	// (each server counts its own).
	LockWaits int64 `json:"lock_waits"`
	// KeysLocked is how many keys this server's lock map holds now:
	// those being worked on or waited for.
	KeysLocked int `json:"keys_locked"`
}

// RefusalOutcome counts 400 and 422 answers, and the attempts that got
// one again for the same key.
type RefusalOutcome struct {
	Refusals       int64 `json:"refusals"`
	WastedAttempts int64 `json:"wasted_attempts"`
}

// ReconcileOutcome is a new key after a 500: orders charged under two
// keys where one key saved a 500, and how often clients looked an order
// up instead.
type ReconcileOutcome struct {
	ChargeOutcome
	Reconciliations int64 `json:"reconciliations"`
}

// PersonalOutcome says where keys made of personal data are now kept.
type PersonalOutcome struct {
	// Requests is how many requests carried such a key; Keys how many
	// different keys.
	Requests int64 `json:"requests"`
	Keys     int   `json:"keys"`
	// Stored counts the rows holding one, per table: "key table",
	// "charges", "gateway ledger".
	Stored map[string]int `json:"stored"`
	// TimelineEvents is how many events on the timeline (and so in its
	// export) show one.
	TimelineEvents int `json:"timeline_events"`
}

// PruneOutcome is pruning too soon: orders charged again once their key
// was gone.
type PruneOutcome struct {
	ChargeOutcome
	Pruned           int64 `json:"pruned"`
	RetentionSeconds int64 `json:"retention_seconds"`
}

// Outcomes is everything the lab measured: the body of GET
// /api/lab/outcomes, one field per mistake, named as the table names it.
type Outcomes struct {
	// Seq is the newest event the numbers include.
	Seq             uint64           `json:"seq"`
	NoKey           ChargeOutcome    `json:"no_key"`
	NewKeyPerRetry  ChargeOutcome    `json:"new_key_per_retry"`
	CheckThenInsert RaceOutcome      `json:"check_then_insert"`
	RetryEvery4xx   RefusalOutcome   `json:"retry_every_4xx"`
	NewKeyAfter500  ReconcileOutcome `json:"new_key_after_500"`
	PersonalDataKey PersonalOutcome  `json:"personal_data_key"`
	PruneTooSoon    PruneOutcome     `json:"prune_too_soon"`
	MemoryLock      LockOutcome      `json:"memory_lock"`
	// ExtraCharges is the sum of every mistake's extra charges.
	ExtraCharges int `json:"extra_charges"`
}

// Outcome is what the panel draws of one mistake's measurements: a
// headline number with its unit, a tone, and a few lines of detail.
type Outcome struct {
	N     int
	Unit  string
	Tone  Tone
	Lines []string
	// Extra is the charges the mistake made beyond the first of their
	// order (or key): the panel's summary adds them up.
	Extra int
}

// Tone says how an outcome reads: bad when money went wrong, ok when it
// was saved, mute when nothing happened yet. The values are the pages'
// badge classes.
type Tone string

// The tones.
const (
	Bad  Tone = "bad"
	OK   Tone = "ok"
	Mute Tone = "mute"
)
