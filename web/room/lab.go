package room

import (
	"strings"
	"time"

	"paytwice/pay"
)

// The common-mistakes lab's switches. Each of the article's common
// mistakes can be switched on for the whole class: the server-side ones
// change how a server claims keys, the client-side ones what every
// browser sends.

// LabMode says how POST /v1/payments claims keys while the lab is on.
type LabMode = string

// The modes, as the JSON API names them.
const (
	// LabCorrect is the real protocol (pay.Service).
	LabCorrect LabMode = "correct"
	// LabNoKey executes every request: no key is read, nothing remembered.
	LabNoKey LabMode = "no_key"
	// LabCheckThenInsert looks the key up with a SELECT, pauses, and
	// INSERTs it into a copy of the key table with no constraints.
	LabCheckThenInsert LabMode = "check_then_insert"
	// LabCheckThenInsertConstrained is the same code on the real,
	// constrained key table: the primary key refuses the losers' INSERT.
	LabCheckThenInsertConstrained LabMode = "check_then_insert_constrained"
	// LabKeyTableOnly is the protocol with the key table as its only
	// memory: charges and gateway calls are not tied to the key, so a
	// pruned key charges again.
	LabKeyTableOnly LabMode = "key_table_only"
	// LabMemoryLock is check-then-insert on the unguarded tables, run
	// under a lock per key held in this server's memory: one server
	// charges once, two servers on one database can both charge.
	LabMemoryLock LabMode = "memory_lock"
)

var LabModes = []LabMode{LabCorrect, LabNoKey, LabCheckThenInsert, LabCheckThenInsertConstrained, LabKeyTableOnly, LabMemoryLock}

// Bounds on the lab's numbers.
const (
	MaxLabCheckGapMS       = 5000
	DefaultLabCheckGapMS   = 200
	MaxLabRetentionSeconds = int64(MaxClockAdvance / time.Second)
	// MaxLabServers is how many servers the lock in memory may run
	// inside one process.
	MaxLabServers = 2
)

// The lab's fixed numbers: the two retentions it offers besides the
// server's own (one minute, shorter than any client's retry window, and a
// day), how far its time warp jumps, and how many requests a burst sends.
const (
	LabShortRetentionSeconds = 60
	LabLongRetentionSeconds  = 24 * 3600
	LabWarpSeconds           = 120
	LabBurstSize             = 10
)

// LabServer are the server-side mistakes.
type LabServer struct {
	// Mode is how POST /v1/payments claims keys; "" reads as "correct".
	Mode LabMode `json:"mode"`
	// CheckGapMS is the pause between the check and the insert in the
	// check-then-insert modes and the lock in memory (0–5000).
	CheckGapMS int `json:"check_gap_ms"`
	// RetentionSeconds is how long POST /api/lab/prune keeps done keys;
	// 0 means the server's retention (-retention).
	RetentionSeconds int64 `json:"retention_seconds"`
	// Servers is how many servers the lock in memory runs behind the
	// room's front door on a server that has its database to itself (the
	// embedded SQLite default): 1, or 2 for two servers inside the one
	// process, each with a memory (a lock table) of its own, taking the
	// requests in turn. 0 reads as 1. Servers that share a database (a
	// cluster) are real servers already and ignore it.
	Servers int `json:"servers,omitempty"`
}

// LabClient are the client-side mistakes. The server only stores them:
// every browser's pay.js reads them from the page and makes the mistake.
type LabClient struct {
	NewKeyPerRetry  bool `json:"new_key_per_retry"`
	RetryEvery4xx   bool `json:"retry_every_4xx"`
	NewKeyAfter500  bool `json:"new_key_after_500"`
	PersonalDataKey bool `json:"personal_data_key"`
}

// LabSettings are the common-mistakes lab's switches: the room's, and
// the body of GET, PUT and PATCH /api/lab.
type LabSettings struct {
	Server LabServer `json:"server"`
	Client LabClient `json:"client"`
}

// DefaultLabSettings is every mistake off.
func DefaultLabSettings() LabSettings {
	return LabSettings{Server: LabServer{Mode: LabCorrect, CheckGapMS: DefaultLabCheckGapMS}}
}

// Normalize fills an empty mode.
func (l LabSettings) Normalize() LabSettings {
	if l.Server.Mode == "" {
		l.Server.Mode = LabCorrect
	}
	return l
}

// Validate names the first field that is out of range.
func (l LabSettings) Validate() error {
	known := false
	for _, m := range LabModes {
		known = known || l.Server.Mode == m
	}
	switch {
	case !known:
		return pay.Errorf(pay.EINVALID, "server.mode must be one of %s, not %q.", strings.Join(LabModes, ", "), pay.Truncate(l.Server.Mode, 40))
	case l.Server.CheckGapMS < 0 || l.Server.CheckGapMS > MaxLabCheckGapMS:
		return pay.Errorf(pay.EINVALID, "server.check_gap_ms must be between 0 and %d milliseconds, not %d.", MaxLabCheckGapMS, l.Server.CheckGapMS)
	case l.Server.Servers < 0 || l.Server.Servers > MaxLabServers:
		return pay.Errorf(pay.EINVALID, "server.servers must be 1 or %d (0 reads as 1), not %d.", MaxLabServers, l.Server.Servers)
	case l.Server.RetentionSeconds < 0 || l.Server.RetentionSeconds > MaxLabRetentionSeconds:
		return pay.Errorf(pay.EINVALID, "server.retention_seconds must be between 0 (the server's own retention) and %d, not %d.", MaxLabRetentionSeconds, l.Server.RetentionSeconds)
	}
	return nil
}
